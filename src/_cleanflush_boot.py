"""Interpreter start-up hook for cleanflush (run from ``cleanflush.pth``).

Imported at every interpreter start where ``CLEANFLUSH`` (or ``CLEANFLUSH_PICK``,
``CLEANFLUSH_PICK_FILE``) is set, so it imports nothing and
does almost nothing: unless the value says "off", it puts a finder at the front of
``sys.meta_path`` that waits for the first import of a package cleanflush patches (torch,
triton, a harness, or a script's own module such as GPU MODE's ``utils``).  Only then does
it import cleanflush (and wrapt), which installs the patches and the hooks that patch each
target as it loads.  A process that imports none of them (pip, linters, launchers) pays a
few microseconds.  Nothing here may raise: a broken autoload must not break the
user's program, only say so on stderr.
"""

import os
import sys

booted = False
report_at_start = None  # CLEANFLUSH_REPORT made absolute at interpreter start (a later chdir does not move it)
# The top-level names whose import wakes cleanflush up: the first part of every trigger in
# cleanflush._registry (a test checks they agree).  Waking at the harness's own import, not
# at the torch it imports, lets the hooks see that import end: a module that imports torch
# first would otherwise be half made when its hook fires, and stay unpatched.
TRIGGERS = frozenset(
    (
        "torch",
        "triton",
        "tritonbench",
        "tilelang",
        "flashinfer",
        "deep_gemm",
        "sglang",
        "kernelbench",
        "sol_execbench",
        "deep_ep",
        "cutlass",
        "utils",
        "bench_utils",
        "common",
    )
)
# The values of CLEANFLUSH that switch cleanflush off: written here alone (cleanflush._env
# takes them from here), since this module reads them before anything is imported.
OFF = ("0", "off", "false", "no")
PICK_VARIABLES = ("CLEANFLUSH_PICK", "CLEANFLUSH_PICK_FILE")  # each turns cleanflush on by itself


class _WakeOnImport:
    """A meta path finder that imports cleanflush just before the first import of a trigger,
    then stays inert.  It does not take itself out of ``sys.meta_path``: the import system
    is iterating over that list right then, and removing an entry would make it skip the
    next finder."""

    awake = False

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if cls.awake or fullname not in TRIGGERS:
            return None
        cls.awake = True
        _import_cleanflush()
        # The finders cleanflush put in front of this one (wrapt's post-import hooks) would
        # miss the import under way: ask them, so a script's module (``utils``) is patched
        # as it loads.  The ones after this finder run as usual when none finds it.
        for finder in list(sys.meta_path):
            if finder is cls:
                break
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                return spec
        return None


def _import_cleanflush():
    try:
        import cleanflush  # noqa: F401  (the import installs, honouring CLEANFLUSH)
    except Exception as exc:  # pragma: no cover - defensive
        print(f"cleanflush: autoload failed ({exc!r}); benchmarks keep their stock L2 flush", file=sys.stderr)


def boot():
    global booted, report_at_start
    value = os.environ.get("CLEANFLUSH", "")
    # a pick rule or a pick file alone turns cleanflush on too: each runs through its patches
    asked = value.strip() or any(os.environ.get(name, "").strip() for name in PICK_VARIABLES)
    if booted or value.strip().lower() in OFF or not asked:
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
