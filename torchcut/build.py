"""Compile what this machine can build into the run-time cache: ``python -m torchcut.build [cpu] [cuda]``.

For installs that come without compiled libraries (a source checkout that was not built, or one built
for another torch): it does ahead of time what the first solve would do, so that no later process
waits for a compiler. Installing with ``pip install --no-build-isolation .`` is the usual way and
needs none of this.

Each part prints one line: "installed" (the package already has a library that fits), "built"
(compiled into the cache), "cached" (compiled there earlier), "skipped" (this machine cannot build it: no CUDA toolkit or a CPU-only
torch) or "FAILED" with the compiler's last line. The exit code is 1 only when a part that this machine
should be able to build fails.
"""

from __future__ import annotations

import sys
import time

_PARTS = ("cpu", "cuda")


def _cuda_skip_reason() -> str | None:
    import torch
    from torch.utils import cpp_extension

    from ._build_config import cuda_unavailable

    return cuda_unavailable(torch, cpp_extension)


def main(argv: list[str] | None = None) -> int:
    """Build the named parts (default: both); return 0 unless a buildable part failed.

    Examples
    --------
    >>> main(["--help"])  # doctest: +ELLIPSIS
    Compile what this machine can build ...
    0
    >>> main(["gpu"])
    torchcut.build: unknown part(s) gpu; expected some of cpu, cuda
    2
    """
    from . import _ops

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    parts = list(dict.fromkeys(argv)) or list(_PARTS)
    unknown = [p for p in parts if p not in _PARTS]
    if unknown:
        print(f"torchcut.build: unknown part(s) {', '.join(unknown)}; expected some of {', '.join(_PARTS)}")
        return 2
    failed = 0
    for part in parts:
        skip = _cuda_skip_reason() if part == "cuda" else None
        if skip:
            print(f"{part}: skipped ({skip})")
            continue
        t0 = time.perf_counter()
        err = _ops.load_error(part)
        state = _ops.status()[part]
        if err is None and state == "installed":
            print(f"{part}: installed ({_ops._installed(part).name})")
        elif err is None and state == "cached":
            print(f"{part}: cached ({_ops.cache_dir(part)})")
        elif err is None:
            print(f"{part}: built in {time.perf_counter() - t0:.0f} s ({_ops.cache_dir(part)})")
        else:
            print(f"{part}: FAILED: {err}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
