"""Interpreter start-up hook for cleanflush (run from ``cleanflush.pth``).

This module is imported at every interpreter start where ``CLEANFLUSH`` is set, so it
imports only ``os`` and ``sys``.  It never raises: a broken autoload must not break the
user's program, only say so on stderr.
"""

import os
import sys

booted = False


def boot() -> None:
    global booted
    if booted or not os.environ.get("CLEANFLUSH"):
        return
    booted = True
    try:
        import cleanflush  # noqa: F401  (the import installs, honouring CLEANFLUSH)
    except Exception as exc:  # pragma: no cover - defensive
        print(f"cleanflush: autoload failed ({exc!r}); benchmarks keep their stock L2 flush",
              file=sys.stderr)
