"""Interpreter start-up hook for cleanflush (run from ``cleanflush.pth``).

Imported at every interpreter start where ``CLEANFLUSH`` is set, so it imports nothing and
does almost nothing: unless the value says "off", it puts a finder at the front of
``sys.meta_path`` that waits for the first import of torch or triton.  Only then does it
import cleanflush (and wrapt), which installs the patches and the hooks that patch each
target as it loads.  A process that never imports torch or triton (pip, linters, launchers)
pays a few microseconds.  Nothing here may raise: a broken autoload must not break the
user's program, only say so on stderr.
"""

import os
import sys

booted = False
report_at_start = None  # CLEANFLUSH_REPORT made absolute at interpreter start (a later chdir does not move it)
# The top-level packages whose import wakes cleanflush up: everything it patches lives there.
TRIGGERS = frozenset(("torch", "triton"))
# cleanflush._env.OFF (and the line in cleanflush.pth), which this module cannot import; a test
# checks the three agree.
OFF = frozenset(("0", "off", "false", "no"))


class _WakeOnImport:
    """A meta path finder that finds nothing: it imports cleanflush just before the first
    torch or triton import goes on to the real finders, then stays inert.  It does not take
    itself out of ``sys.meta_path``: the import system is iterating over that list right
    then, and removing an entry would make it skip the next finder."""

    awake = False

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if not cls.awake and fullname in TRIGGERS:
            cls.awake = True
            _import_cleanflush()
        return None


def _import_cleanflush():
    try:
        import cleanflush  # noqa: F401  (the import installs, honouring CLEANFLUSH)
    except Exception as exc:  # pragma: no cover - defensive
        print(f"cleanflush: autoload failed ({exc!r}); benchmarks keep their stock L2 flush", file=sys.stderr)


def boot():
    global booted, report_at_start
    value = os.environ.get("CLEANFLUSH", "")
    if booted or value.strip().lower() in OFF or not value.strip():
        return
    booted = True
    report = os.environ.get("CLEANFLUSH_REPORT")
    report_at_start = os.path.abspath(report) if report else None
    if TRIGGERS.intersection(sys.modules):  # started with torch already loaded (rare)
        _import_cleanflush()
    else:
        sys.meta_path.insert(0, _WakeOnImport)


def adopt(value):
    """Unpickled in a multiprocessing child before its target runs (cleanflush._children):
    the child runs under the ``CLEANFLUSH`` value its parent had when it started it, whatever
    the start method (a forkserver's children otherwise get the server's)."""
    try:
        if value is None:
            os.environ.pop("CLEANFLUSH", None)
        else:
            os.environ["CLEANFLUSH"] = value
        targets = sys.modules.get("cleanflush._targets")
        if targets is not None:  # loaded already: the server imported torch or triton
            targets.adopt(value)
        else:
            boot()
    except Exception as exc:  # pragma: no cover - defensive: never break the child's start
        print(f"cleanflush: could not take the parent's policy ({exc!r})", file=sys.stderr)
