"""Build the CUDA extensions ahead of time: ``python -m torchcut.build``.

Compiles every extension in :data:`torchcut._ext.EXTENSIONS` into the cache folder, so the first
CUDA call does not pay the compile. It needs nvcc and a CUDA build of torch, not a GPU. Exit code 1
when a build fails, with the compiler's message.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    """Build all extensions; return 0 when all built.

    Examples
    --------
    >>> main(["--help"])  # doctest: +SKIP
    """
    from . import _ext

    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0
    os.environ.setdefault("TORCHCUT_VERBOSE", "1")
    failed = 0
    for name in argv or list(_ext.EXTENSIONS):
        try:
            _ext.load_named(name)
            print(f"built {name} in {_ext.cache_dir(name)}")
        except Exception as exc:
            print(f"FAILED {name}: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
