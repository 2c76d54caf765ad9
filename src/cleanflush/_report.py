"""``CLEANFLUSH_REPORT``: each process that flushed through cleanflush appends one JSON line
about its own flushes when it exits, so that processes nobody can inspect (Inductor's
autotuning workers, multiprocessing pools) leave evidence of what they did.

The line is written once per process: at interpreter exit, or, for multiprocessing workers
that end with ``os._exit`` (fork and forkserver), from multiprocessing's own exit
finalizers.  A forked child counts only its own flushes (``_state``).  The path is the one
the process started with, made absolute then: a later ``os.chdir`` does not move it.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

import wrapt

from . import _env, _policy
from ._state import STATE, on_reset

MP_UTIL = "multiprocessing.util"


def _start_path() -> str | None:
    # The start-up hook saw the variable at interpreter start, before any user code ran.
    boot = sys.modules.get("_cleanflush_boot")
    path = getattr(boot, "report_at_start", None) or _env.AT_START[_env.REPORT_VAR]
    return os.path.abspath(path) if path else None


PATH = _start_path()
_written = False  # this process's line (a forked child writes its own)


def line() -> dict[str, Any]:
    """What this process reports."""
    return {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": sys.argv,
        "source": STATE.source,
        # what this process was started with and its default: a worker that outlived a
        # policy block (a pool) shows here with the policy it really used
        "env_at_start": _env.AT_START[_env.POLICY_VAR],
        "default_policy": _policy.default(),
        "cuda_visible_devices": _env.value("CUDA_VISIBLE_DEVICES"),
        "flushes": {f"{label} | {policy}": n for (label, policy), n in sorted(STATE.flushes.items())},
        "patched": sorted(row.target for rows in STATE.sites.values() for row in rows.values() if row.patched),
    }


def write() -> None:
    """Append this process's line, once, if it flushed; a failure is one line on stderr."""
    global _written
    if PATH is None or _written or not STATE.flushes:
        return
    _written = True
    try:
        with open(PATH, "a", encoding="utf-8") as f:
            f.write(json.dumps(line()) + "\n")
    except OSError as exc:
        print(f"cleanflush: could not write {_env.REPORT_VAR}={PATH!r}: {exc}", file=sys.stderr)


@on_reset
def _not_written() -> None:
    global _written
    _written = False


os.register_at_fork(after_in_child=_not_written)


def _finalize_in_this_worker(module: Any = None) -> None:
    """A multiprocessing worker ends with os._exit after running these finalizers."""
    util = sys.modules[MP_UTIL]
    util.Finalize(None, write, exitpriority=-100)


def _on_multiprocessing(util: Any) -> None:
    import multiprocessing

    if multiprocessing.parent_process() is not None:  # this process is a worker
        _finalize_in_this_worker()
    # workers forked from this process run this in the child, after clearing our finalizers
    util.register_after_fork(write, _finalize_in_this_worker)


def register() -> None:
    """Called once per process, at the first install."""
    if PATH is None:
        return
    # children started after an os.chdir write to the same file: they get the absolute path
    _env.export(_env.REPORT_VAR, PATH)
    atexit.register(write)
    wrapt.register_post_import_hook(_on_multiprocessing, MP_UTIL)
