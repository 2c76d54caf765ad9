"""What cleanflush remembers at run time about targets, flushes and warnings.

The active policy and ``CLEANFLUSH`` belong to ``_policy``; the read buffers to ``_flush``;
the applied patches to each patch module.  ``reset_for_tests`` clears what tests must not
carry from one to the next.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import wrapt

from ._policy import ENV_VAR


@dataclass
class TargetStatus:
    """One row of ``cleanflush.status()``: a place where a benchmarker flushes L2."""

    target: str  # what is patched, e.g. "triton CudaDriver.clear_cache"
    package: str  # "triton" or "torch"
    version: str | None  # installed version, None when the package is not installed
    patched: bool
    detail: str  # what the patched target does, or why it is not patched

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "package": self.package,
            "version": self.version,
            "patched": self.patched,
            "detail": self.detail,
        }


@dataclass
class _State:
    installed: bool = False
    source: str | None = None  # "import", "install()", "autoload"
    env_before_install: str | None = None
    # target name -> the row status() reports for it
    targets: dict[str, TargetStatus] = field(default_factory=dict)
    # (target, policy that ran) -> number of flushes run through our wrappers; a flush
    # whose read failed counts as the stock write it fell back to
    flushes: Counter[tuple[str, str]] = field(default_factory=Counter)
    warned: set[str] = field(default_factory=set)
    # device -> why its read buffer could not be prepared (not retried)
    read_unavailable: dict[str, str] = field(default_factory=dict)
    # device -> why the named read kernel could not be built there (torch's sum reads instead)
    sweep_unavailable: dict[str, str] = field(default_factory=dict)
    # once per process, also across importlib.reload(cleanflush)
    hooks_registered: bool = False


STATE = _State()
LOCK = threading.RLock()


def record(row: TargetStatus) -> None:
    with LOCK:
        STATE.targets[row.target] = row


def not_loaded_row(name: str, package: str, version: str | None) -> TargetStatus:
    """The row for a target with nothing to report yet: not installed, or not imported."""
    if version is None:
        return TargetStatus(name, package, None, False, f"{package} is not installed")
    detail = "not imported yet; patched when it is" if STATE.installed else "cleanflush is not installed"
    return TargetStatus(name, package, version, False, detail)


def mark_uninstalled(package: str) -> None:
    """After a revert: the package's patched rows say so."""
    with LOCK:
        for name, row in list(STATE.targets.items()):
            if row.package == package and row.patched:
                STATE.targets[name] = TargetStatus(row.target, row.package, row.version, False, "uninstalled")


def count_flush(target: str, ran: str) -> None:
    """Count a flush under the policy that actually ran, after it ran."""
    # Counter += is not atomic across threads; a lost count is harmless, a lock per
    # flush is not free, so none is taken here.
    STATE.flushes[(target, ran)] += 1


def warn_once(key: str, message: str) -> None:
    """Warn the first time ``key`` is seen; benchmarks run in loops and must not spam.

    Never raises: under ``-W error`` (or pytest's ``filterwarnings = error``) the warning
    would become an exception inside the user's benchmark or import, so it goes to stderr
    instead.
    """
    with LOCK:
        if key in STATE.warned:
            return
        STATE.warned.add(key)
    text = f"cleanflush: {message}"
    try:
        warnings.warn(text, RuntimeWarning, stacklevel=_first_frame_outside())
    except Exception:
        try:
            print(f"{text} (RuntimeWarning, shown here because warnings are errors)", file=sys.stderr)
        except Exception:
            pass


_OURS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep for path in (__file__, wrapt.__file__))


def _first_frame_outside() -> int:
    """The stacklevel of the first caller outside cleanflush (and wrapt): the warning then
    points at the user's or the harness's line that led to it, not at ours."""
    level, frame = 2, sys._getframe(2)  # 1: warnings.warn's caller (warn_once); 2: its caller
    while frame.f_back is not None and os.path.abspath(frame.f_code.co_filename).startswith(_OURS):
        level, frame = level + 1, frame.f_back
    return level


def reset_for_tests() -> None:
    """Forget counts, warnings, failed devices and status rows (install records them again)."""
    with LOCK:
        STATE.targets.clear()
        STATE.flushes.clear()
        STATE.warned.clear()
        STATE.read_unavailable.clear()
        STATE.sweep_unavailable.clear()


REPORT_VAR = "CLEANFLUSH_REPORT"
ENV_AT_START = os.environ.get(ENV_VAR)


def write_report(path: str) -> None:
    """Append one JSON line about this process: which flushes ran, under which policy.

    Registered at exit when ``CLEANFLUSH_REPORT`` names a file, so that processes nobody
    can inspect (Inductor's autotuning workers) leave evidence of what they did.
    """
    if not STATE.flushes:
        return
    line = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "argv": sys.argv,
        "source": STATE.source,
        # what this process was started with and its default: a worker that outlived a
        # policy block (forkserver, a pool) shows here with the policy it really used
        "env_at_start": ENV_AT_START,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "flushes": {f"{target} | {policy}": n for (target, policy), n in sorted(STATE.flushes.items())},
        "patched": sorted(row.target for row in STATE.targets.values() if row.patched),
    }
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    except OSError as exc:
        print(f"cleanflush: could not write {REPORT_VAR}={path!r}: {exc}", file=sys.stderr)
