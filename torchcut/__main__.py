"""``python -m torchcut``: the ``torchcut`` command (:func:`torchcut.cli.main`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
