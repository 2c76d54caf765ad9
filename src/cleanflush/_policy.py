"""Which flush policy is active, and the one writer of ``CLEANFLUSH`` in ``os.environ``: a
``Choice`` (``_blocks``: the process default, the ``policy()`` blocks open in each context,
and the variable that carries the newest one to child processes while cleanflush is installed).
"""

from __future__ import annotations

from ._blocks import Block, Choice
from ._env import POLICY_VAR
from ._policies import DEFAULT_POLICY, POLICIES
from ._state import STATE, on_reset

__all__ = ["DEFAULT_POLICY", "POLICIES", "check", "current_policy", "default", "export", "policy", "set_default"]

POLICY = Choice(POLICY_VAR, POLICIES, DEFAULT_POLICY, "policy", "policies")


def check(name: str) -> str:
    """The policy ``name`` stands for (case and spaces ignored); a ValueError naming the
    valid ones otherwise."""
    return POLICY.check(name)


def current_policy() -> str:
    """The policy a flush started now, in this context, would run: ``write`` (the stock
    flush) while cleanflush is not installed."""
    if not STATE.installed:
        return "write"
    return POLICY.selected()


def selected() -> str:
    """The policy the blocks open in this context select, else the process default."""
    return POLICY.selected()


def default() -> str:
    """The process default policy."""
    return POLICY.default


def set_default(name: str) -> None:
    POLICY.set_default(name)


@on_reset
def _forget_default() -> None:
    POLICY.default = DEFAULT_POLICY


def open_blocks() -> list[str]:
    """The policies of the blocks open in any thread now, oldest first."""
    return POLICY.open_names()


def export(installed: bool, base: str | None) -> None:
    """Set what ``CLEANFLUSH`` says when no block is open (install/uninstall call this)."""
    POLICY.export(installed, base)


class policy(Block):
    """Select the flush policy for a block::

        with cleanflush.policy("read"):
            triton.testing.do_bench(fn)

    Blocks nest; each thread and asyncio task sees its own; one object may be shared and
    entered from several at once; processes started inside the block inherit the policy
    through ``CLEANFLUSH``.  An unknown name raises ValueError listing the valid ones.
    """

    choice = POLICY
