"""cleanflush: make GPU kernel benchmarks start from a cold *and clean* L2.

Importing this package installs its patches (unless ``CLEANFLUSH=0``): every benchmarker
it knows then flushes L2 with its stock write followed by a float32 read of a separate
region of at least 2 x L2 (the ``write-read`` policy), so dirty lines are written back
before the timer starts instead of during the timed kernel.  ``cleanflush.policy("read")``
selects a read-only flush for a block, ``policy("write")`` the stock one; ``pick("stable")``
makes autotuners keep the same config among near-ties in every process, and the ranks of a
distributed job agree on every pick through the job's own store (``pick_store``).  Neither torch nor
triton is imported here: targets are patched when they are imported, or at once if they
already are.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from . import _env, _flush, _targets
from ._pick import PICKS, current_pick, pick
from ._policies import DEFAULT_POLICY, POLICIES
from ._policy import current_policy, policy
from ._state import STATE, TargetStatus

__all__ = [
    "DEFAULT_POLICY",
    "PICKS",
    "POLICIES",
    "TargetStatus",
    "current_pick",
    "current_policy",
    "flush_counts",
    "install",
    "is_installed",
    "pick",
    "pick_store",
    "policy",
    "status",
    "uninstall",
]


def __getattr__(name: str) -> str:
    """``__version__``, from the installed package's metadata (pyproject.toml is the one place
    it is written), looked up on first use: importlib.metadata costs start-up time."""
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("cleanflush")
        except PackageNotFoundError:  # a source tree on sys.path, not installed
            return "0+unknown"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def install(policy: str | None = None) -> bool:
    """Patch every known benchmarker (now, or when it is imported).  Idempotent.

    ``policy`` sets the process default (``write-read`` unless ``CLEANFLUSH`` names
    another).  ``CLEANFLUSH`` is set in ``os.environ`` so that child processes, such as
    Inductor's autotuning workers, autoload cleanflush with the same policy.  Returns False,
    and does nothing, where ``CLEANFLUSH`` is ``0`` (off for everything).
    """
    return _targets.install(policy, "install()")


def uninstall() -> None:
    """Restore every patched object exactly as it was, and free the read buffers (but those a
    captured CUDA graph may still read).  Idempotent."""
    _targets.uninstall()
    _flush.release()


def is_installed() -> bool:
    return STATE.installed


def status() -> list[TargetStatus]:
    """One row per place a benchmarker flushes: installed version, state, and why."""
    return _targets.status()


def pick_store(store: Any = None) -> None:
    """Agree on picks through ``store`` (a ``torch.distributed.Store`` every rank reaches); None:
    through the default process group's store, where ``torch.distributed`` runs several ranks
    (docs/pick.md)."""
    from . import _agree  # with the hooks it serves: loaded when first needed

    _agree.pick_store(store)


def flush_counts() -> dict[tuple[str, str], int]:
    """How many flushes ran through cleanflush in this process, by (target, policy that
    actually ran)."""
    return dict(STATE.flushes)


def _install_from_environ() -> None:
    try:
        chosen = _env.policy_from_environ()
    except ValueError as exc:
        if not _is_the_cleanflush_command():  # each command says what the value gives, in its own line
            print(f"cleanflush: {exc}; this process keeps its stock L2 flush", file=sys.stderr)
        return
    if chosen is not None:
        autoloaded = getattr(sys.modules.get("_cleanflush_boot"), "booted", False)
        _targets.install(chosen, "autoload" if autoloaded else "import")


def _is_the_cleanflush_command() -> bool:
    """Whether this process is the ``cleanflush`` command (its script, or ``python -m
    cleanflush``, while Python is still locating the module: ``sys.argv[0]`` is ``-m`` then)."""
    first = sys.argv[0] if getattr(sys, "argv", None) else ""
    return os.path.basename(first) == "cleanflush" or first == "-m"


_install_from_environ()
