"""Everything cleanflush remembers at run time, in one place."""

from __future__ import annotations

import json
import os
import sys
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any


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
    # (target, policy) -> number of flushes run through our wrappers
    flushes: Counter[tuple[str, str]] = field(default_factory=Counter)
    warned: set[str] = field(default_factory=set)


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


def count_flush(target: str, policy: str) -> None:
    # Counter += is not atomic across threads; a lost count is harmless, a lock per
    # flush is not free, so none is taken here.
    STATE.flushes[(target, policy)] += 1


def warn_once(key: str, message: str) -> None:
    """Warn the first time ``key`` is seen; benchmarks run in loops and must not spam."""
    with LOCK:
        if key in STATE.warned:
            return
        STATE.warned.add(key)
    warnings.warn(f"cleanflush: {message}", RuntimeWarning, stacklevel=3)


REPORT_VAR = "CLEANFLUSH_REPORT"


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
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "flushes": {f"{target} | {policy}": n for (target, policy), n in sorted(STATE.flushes.items())},
        "patched": sorted(row.target for row in STATE.targets.values() if row.patched),
    }
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    except OSError as exc:
        print(f"cleanflush: could not write {REPORT_VAR}={path!r}: {exc}", file=sys.stderr)
