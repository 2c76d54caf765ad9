"""cleanflush: make GPU kernel benchmarks start from a cold *and clean* L2.

Importing this package installs its patches (unless ``CLEANFLUSH=0``): every benchmarker
it knows then flushes L2 with its stock write followed by a float32 read of a separate
region of at least 2 x L2 (the ``write-read`` policy), so dirty lines are written back
before the timer starts instead of during the timed kernel.  ``cleanflush.policy("read")``
selects a read-only flush for a block, ``policy("write")`` the stock one.  Neither torch nor
triton is imported here: targets are patched when they are imported, or at once if they
already are.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

import wrapt

from . import _env, _flush, _policy
from ._env import DISABLE_VAR, ENV_VAR
from ._policy import DEFAULT_POLICY, POLICIES, current_policy, policy
from ._state import LOCK, REPORT_VAR, STATE, TargetStatus, record, warn_once, write_report
from .patches import TARGETS

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "TargetStatus",
    "current_policy",
    "flush_counts",
    "install",
    "is_installed",
    "policy",
    "status",
    "uninstall",
]
__version__ = "0.1.0"


def _disabled() -> frozenset[str]:
    try:
        return _env.disabled_from_environ()
    except ValueError as exc:
        warn_once("disable-var", f"{exc}; no target is disabled")
        return frozenset()


def _apply(target: Any) -> None:
    """Patch one target now; on any failure undo it, say why in status, keep it stock."""
    if not STATE.installed:
        return
    if target.NAME in _disabled():
        record(TargetStatus(f"{target.NAME}: every target", target.PACKAGE, None, False,
                            f"disabled by {DISABLE_VAR}; stock flush kept"))
        return
    try:
        target.apply()
    except Exception as exc:
        # An exception here would break the user's `import triton`: undo, warn, stay stock.
        try:
            target.revert()
        except Exception:
            pass
        reason = f"could not patch {target.PACKAGE} ({exc!r}); its stock flush is kept"
        record(TargetStatus(f"{target.NAME} (patch failed)", target.PACKAGE, None, False, reason))
        warn_once(f"apply:{target.__name__}", reason)


def _hook(target: Any) -> Any:
    def hook(module: Any) -> None:
        _apply(target)

    return hook


def install(policy: str | None = None) -> None:
    """Patch every known benchmarker (now, or when it is imported).  Idempotent.

    ``policy`` sets the process default (``write-read`` unless ``CLEANFLUSH`` names
    another).  ``CLEANFLUSH`` is set in ``os.environ`` so that child processes, such as
    Inductor's autotuning workers, autoload cleanflush with the same policy.
    """
    _install(policy, "install()")


def _install(policy: str | None, source: str) -> None:
    if policy is not None:
        _policy.set_default(policy)
    with LOCK:
        if not STATE.installed:
            STATE.installed = True
            STATE.source = source
            STATE.env_before_install = os.environ.get(ENV_VAR)
        _policy.export(True, _policy.default())
        first_install, STATE.hooks_registered = not STATE.hooks_registered, True
    # Hooks run outside our lock: they may fire inside another thread's import.
    if first_install:
        if os.environ.get(REPORT_VAR):
            atexit.register(write_report, os.environ[REPORT_VAR])
        for target in TARGETS:
            for module in target.HOOKS:
                # wrapt fires the hook at once if the module is already imported
                wrapt.register_post_import_hook(_hook(target), module)
        return
    for target in TARGETS:
        if any(module in sys.modules for module in target.HOOKS):
            _apply(target)


def uninstall() -> None:
    """Restore every patched object exactly as it was, and free the read buffers.  Idempotent."""
    with LOCK:
        if not STATE.installed:
            return
        STATE.installed = False
        for target in TARGETS:
            target.revert()
        _policy.export(False, STATE.env_before_install)
    _flush.release()


def is_installed() -> bool:
    return STATE.installed


def status() -> list[TargetStatus]:
    """One row per target: installed version, patched or not, and why."""
    rows = [row for target in TARGETS for row in target.status()]
    for device, reason in sorted(STATE.read_unavailable.items()):
        rows.append(TargetStatus(f"read buffer on {device}", "cleanflush", __version__, False,
                                 f"{reason}: every flush on {device} runs the stock write"))
    for device, reason in sorted(STATE.sweep_unavailable.items()):
        rows.append(TargetStatus(f"read kernel on {device}", "cleanflush", __version__, False,
                                 f"{_flush.READ_KERNEL} could not be built ({reason}): the read runs as torch's sum"))
    return rows


def flush_counts() -> dict[tuple[str, str], int]:
    """How many flushes ran through cleanflush, by (target, policy that actually ran)."""
    return dict(STATE.flushes)


def _install_from_environ() -> None:
    try:
        chosen = _env.from_environ()
    except ValueError as exc:
        print(f"cleanflush: {exc}; benchmarks keep their stock L2 flush", file=sys.stderr)
        return
    if chosen is not None:
        autoloaded = getattr(sys.modules.get("_cleanflush_boot"), "booted", False)
        _install(chosen, "autoload" if autoloaded else "import")


_install_from_environ()
