"""cleanflush: make GPU kernel benchmarks start from a cold *and clean* L2.

Importing this package installs its patches (unless ``CLEANFLUSH=0``): every benchmarker
it knows then flushes L2 with its stock write followed by a read of a separate region of
at least 2 x L2, so dirty lines are written back before the timer starts instead of
during the timed kernel.  Neither torch nor triton is imported here: targets are patched
when they are imported, or at once if they already are.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import Any

import wrapt

from . import _env, _policy
from ._env import DEFAULT_POLICY, ENV_VAR, POLICIES
from ._policy import current_policy, policy
from ._state import LOCK, REPORT_VAR, STATE, TargetStatus, warn_once, write_report
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

_hooks_registered = False


def _on_import(target: Any) -> Any:
    def hook(module: Any) -> None:
        # An exception here would break the user's `import triton`: warn and stay stock.
        if not STATE.installed:
            return
        try:
            target.apply()
        except Exception as exc:
            warn_once(f"apply:{target.__name__}", f"could not patch {target.PACKAGE} ({exc!r}); "
                      "its stock flush is kept")

    return hook


def install(policy: str | None = None, *, source: str = "install()") -> None:
    """Patch every known benchmarker (now, or when it is imported).  Idempotent.

    ``policy`` sets the process default (``read`` unless ``CLEANFLUSH`` names
    another).  ``CLEANFLUSH`` is set in ``os.environ`` so that child processes, such as
    Inductor's autotuning workers, autoload cleanflush with the same policy.
    """
    global _hooks_registered
    if policy is not None:
        _policy.set_default(policy)
    with LOCK:
        if not STATE.installed:
            STATE.installed = True
            STATE.source = source
            STATE.env_before_install = os.environ.get(ENV_VAR)
        os.environ[ENV_VAR] = _policy.default()
        first_install, _hooks_registered = not _hooks_registered, True
    # Hooks run outside our lock: they may fire inside another thread's import.
    if first_install:
        if os.environ.get(REPORT_VAR):
            atexit.register(write_report, os.environ[REPORT_VAR])
        for target in TARGETS:
            for module in target.HOOKS:
                wrapt.register_post_import_hook(_on_import(target), module)  # fires now if imported
        return
    for target in TARGETS:
        if any(module in sys.modules for module in target.HOOKS):
            _on_import(target)(None)


def uninstall() -> None:
    """Restore every patched object exactly as it was.  Idempotent."""
    with LOCK:
        if not STATE.installed:
            return
        STATE.installed = False
        for target in TARGETS:
            target.revert()
        if STATE.env_before_install is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = STATE.env_before_install


def is_installed() -> bool:
    return STATE.installed


def status() -> list[TargetStatus]:
    """One row per target: installed version, patched or not, and why."""
    return [row for target in TARGETS for row in target.status()]


def flush_counts() -> dict[tuple[str, str], int]:
    """How many flushes ran through cleanflush, by (target, policy)."""
    return dict(STATE.flushes)


def _install_from_environ() -> None:
    try:
        chosen = _env.from_environ()
    except ValueError as exc:
        print(f"cleanflush: {exc}; benchmarks keep their stock L2 flush", file=sys.stderr)
        return
    if chosen is not None:
        autoloaded = getattr(sys.modules.get("_cleanflush_boot"), "booted", False)
        install(chosen, source="autoload" if autoloaded else "import")


_install_from_environ()
