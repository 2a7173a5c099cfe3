"""Build the CUDA extensions ahead of time: ``python -m torchcut.build [NAME ...]``.

Compiles every extension in :data:`torchcut._ext.EXTENSIONS` (or the ones named) into the cache
folder, so the first CUDA call does not pay the compile. It needs nvcc and a CUDA build of torch, not
a GPU. Several extensions compile at once, each in its own process (each one's ninja compiles its
files in parallel too; ``MAX_JOBS`` bounds each ninja). Exit code 1 when a build fails, with the
compiler's message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def _build_one(name: str) -> int:
    """Build extension ``name`` in this process; 0 when built."""
    from . import _ext

    try:
        _ext.load_named(name)
    except Exception as exc:
        print(f"FAILED {name}: {exc}", file=sys.stderr)
        return 1
    print(f"built {name} in {_ext.cache_dir(name)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Build the named extensions (default: all), in parallel processes; return 0 when all built.

    Each build's output is printed when it ends, whole, so that the outputs do not interleave.

    Examples
    --------
    >>> main(["--help"])  # doctest: +SKIP
    0
    >>> main(["torchcut_cpu"])  # doctest: +SKIP
    built torchcut_cpu in /root/.cache/torchcut/torchcut_cpu-torch2.13.0-cuNone
    0
    """
    from . import _ext

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    names = list(dict.fromkeys(argv)) or list(_ext.EXTENSIONS)  # each once, in the order given
    unknown = [n for n in names if n not in _ext.EXTENSIONS]
    if unknown:
        print(f"torchcut.build: unknown extension(s) {', '.join(unknown)}; expected some of "
              f"{', '.join(_ext.EXTENSIONS)}", file=sys.stderr)
        return 2
    os.environ.setdefault("TORCHCUT_VERBOSE", "1")
    if len(names) == 1:
        return _build_one(names[0])
    t0 = time.perf_counter()
    code = "import sys; from torchcut.build import _build_one; sys.exit(_build_one(sys.argv[1]))"
    procs = {n: subprocess.Popen([sys.executable, "-c", code, n], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True) for n in names}
    failed = 0
    for name, p in procs.items():
        out, _ = p.communicate()
        sys.stdout.write(out)
        failed += p.returncode != 0
    print(f"built {len(names) - failed} of {len(names)} extensions in {time.perf_counter() - t0:.0f} s"
          f" ({len(names)} processes)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
