"""The tracked files speak of the project alone.

History lives in git; the repository says what torchcut does, how, how fast and how to reproduce
it. This test lists the tracked files (``git ls-files``; skipped outside a git checkout) and searches
their names and their text for words that belong to the way the work was organised, not to the
project. It fails with ``file:line`` and the matched text of every hit.

The patterns (case-insensitive, except the two file names marked below) are built from pieces in
``_patterns`` so that this file does not match itself:

* the word for a working period (``ses`` + ``sion``, singular or plural), as a word. Allowed:
  pytest's fixture scope of that name (``scope=`` followed by the word in quotes), a third-party API
  name, not a process word.
* ``stop`` as a noun of the process: ``this``/``that``/``last``/``next``/``previous``/``same``
  followed by ``stop``, or ``stop`` + ``'s``. ``stop`` meaning termination is allowed: "a stop test",
  "stops when its mask repeats", "an early stop", "the stopping rule", a key named ``stop``.
* numbered tracker items: the word ``issue`` (or ``issues``) followed by a number, with or without
  a space, ``_``, ``-`` or ``#`` between (this also catches file names that join the two);
  and ``#`` followed by digits and a word boundary, not preceded by a word character or ``&`` (so
  ``&#39;``, ``{x:#04x}`` and hex colours with letters do not match).
* paths outside the checkout: absolute paths of the machine the work ran on, and relative paths
  that climb out of the repository to data beside it (test data comes from ``$TORCHCUT_DATA``).
* notes and tools that are not part of the repository: upper-case Markdown notes by name (the
  project's own notes are ``README.md``, ``DEVELOPERS.md`` and the lower-case files under ``docs/``;
  one name is matched case-sensitively so that ``docs/design.md`` passes), and the name of the
  virtualisation layer of the hosts that ran the GPU benchmarks (a reader needs the GPU and driver,
  which the tables name, not the host's plumbing).
* references to the benchmark notes that were distilled into ``docs/performance.md`` and removed.

The exact patterns are in ``_patterns``.

Binary files (a NUL byte in the first 8 KB, or not UTF-8) are read by name only.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _patterns() -> list[tuple[str, re.Pattern]]:
    period = "ses" + "sion"
    stop = "st" + "op"
    issue = "iss" + "ue"
    return [
        (period, re.compile(r"\b" + period + r"s?\b", re.I)),
        (
            stop + " (process)",
            re.compile(
                r"\b(?:this|that|last|next|previous|same)\s+"
                + stop
                + r"\b(?!\s+(?:test|rule|criterion|condition|reason))"
                r"|\b" + stop + r"'s\b",
                re.I,
            ),
        ),
        (issue + " number", re.compile(issue + r"s?[\s_#-]*\d+", re.I)),
        ("#number", re.compile(r"(?<![\w&])#\d+\b")),
        ("outside path", re.compile(r"\.\./" + "shared" + r"|/" + "work" + r"/")),
        ("outside notes", re.compile(r"\b(?:" + "METH" + "OD|" + "HOP" + "PER|" + "KIN" + r"DS)\.md\b", re.I)),
        ("outside design note", re.compile(r"\b" + "DES" + r"IGN\.md\b")),  # case-sensitive
        ("outside machines", re.compile("Fire" + "cracker", re.I)),
        ("removed notes", re.compile(r"\b" + "NOTES" + r"-(?:grid|cpu)\b")),  # distilled into docs/performance.md
    ]


PATTERNS = _patterns()

# Text that contains a pattern legitimately, removed from a line before it is searched.
ALLOWED = [
    re.compile(r"""scope\s*=\s*["']""" + "ses" + r"""sion["']"""),  # pytest fixture scope
]


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not in a git checkout (git ls-files failed)")
    files = [f for f in out.stdout.decode("utf-8", "surrogateescape").split("\0") if f]
    if not files:
        pytest.skip("git ls-files listed no files")
    return files


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except OSError:  # listed but deleted in the work tree
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _hits(line: str) -> list[str]:
    for allowed in ALLOWED:
        line = allowed.sub(" ", line)
    found = []
    for name, pattern in PATTERNS:
        for m in pattern.finditer(line):
            found.append(f"{name}: {m.group(0)!r}")
    return found


def find_hits(files) -> list[str]:
    """``file:line: what`` for every hit in the names and texts of ``files`` (paths relative to ROOT)."""
    report = []
    for rel in files:
        for what in _hits(rel):
            report.append(f"{rel}: (file name) {what}")
        text = _text(ROOT / rel)
        if text is None:
            continue
        for no, line in enumerate(text.splitlines(), 1):
            for what in _hits(line):
                report.append(f"{rel}:{no}: {what}")
    return report


def test_patterns_match_what_they_mean():
    """The patterns catch the process words and leave the technical ones alone."""
    period, stop, issue = "ses" + "sion", "st" + "op", "iss" + "ue"
    flagged = [
        f"see {period} 11",
        f"the last {stop}'s run",
        f"in that {stop}'s runs",
        f"the next {stop} starts",
        f"{issue} 10's targets",
        f"({issue} 3)",
        f"{issue}s 11-13",
        f"memory_{issue}14.py",
        f"({issue} " + "#" + "11)",
        "closes " + "#" + "14",
        "../" + "shared/data",
        "/" + "work/venv",
        "METH" + "OD.md",
        "DES" + "IGN.md",
        "Fire" + "cracker machines",
        "NOTES" + "-grid.md, v8",
    ]
    for text in flagged:
        assert _hits(text), text
    clean = [
        f'@pytest.fixture(scope="{period}")',
        f"a {stop} test",
        f"each image {stop}s when its mask repeats",
        f"its early {stop}",
        f"the {stop}ping rule",
        f'"{stop}": "rule"',
        f"{stop} = kStopIters",
        "docs/design.md",
        "#pragma unroll",
        "&#39;",
        "{x:#04x}",
        "color='#1f77b4'",
        "# 1. a comment",
        f"{issue}d by the driver",
        "tissue",
        f"slice(s.start, s.{stop})",
    ]
    for text in clean:
        assert not _hits(text), (text, _hits(text))


def test_tracked_files_speak_of_the_project_alone():
    hits = find_hits(_tracked_files())
    if hits:
        per_file: dict[str, int] = {}
        for h in hits:
            name = h.split(":", 1)[0]
            per_file[name] = per_file.get(name, 0) + 1
        pytest.fail(
            f"{len(hits)} process words, tracker numbers or outside paths in {len(per_file)} tracked files "
            f"(patterns: tests/test_repository.py docstring); rewrite them in the project's own terms.\n"
            "Files (hits):\n"
            + "\n".join(f"  {n} ({c})" for n, c in per_file.items())
            + "\nHits (file:line: pattern: text):\n"
            + "\n".join(hits),
            pytrace=False,
        )
