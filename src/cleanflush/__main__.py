"""``python -m cleanflush``: the command line (cleanflush.cli)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
