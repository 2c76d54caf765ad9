"""Which flush policy is active, and the one writer of ``CLEANFLUSH`` in ``os.environ``.

A process default plus the ``policy()`` blocks open in the current context.  The blocks of
a context live in a ContextVar holding an immutable tuple, so nested blocks, threads and
asyncio tasks each see their own, and one ``policy`` object can be entered by many of them
at once: the state of an entry is never kept on the instance.  An entry is closed wherever
its block ends, so a block in a generator that another thread or task finalises ends for the
context that entered it too.

Child processes cannot see a ContextVar, so this module also writes ``CLEANFLUSH``: a *base*
value that install/uninstall set, and, while cleanflush is installed, an overlay naming the
newest block still open in any thread.  A child started inside a block autoloads cleanflush
(``cleanflush.pth``) with the block's policy; a process where cleanflush is off never turns
it on in its children.
"""

from __future__ import annotations

import os
import threading
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType

from . import _env
from ._env import POLICY_VAR
from ._policies import DEFAULT_POLICY, POLICIES
from ._state import STATE, on_reset

__all__ = ["DEFAULT_POLICY", "POLICIES", "check", "current_policy", "default", "export", "policy", "set_default"]


class _Entry:
    """One entering of a ``policy`` block."""

    __slots__ = ("owner", "name", "thread", "open")

    def __init__(self, owner: policy, name: str) -> None:
        self.owner, self.name = owner, name
        self.thread = threading.get_ident()
        self.open = True


_open_here: ContextVar[tuple[_Entry, ...]] = ContextVar("cleanflush_blocks", default=())


@dataclass
class _Process:
    """The policy's process-wide side."""

    default: str = DEFAULT_POLICY
    open_blocks: list[_Entry] = field(default_factory=list)  # open in any thread, oldest first
    exporting: bool = False  # whether blocks show in CLEANFLUSH (while installed)
    base: str | None = None  # CLEANFLUSH with no block open
    # for the environment and the blocks; reentrant: a signal handler may open a block while this
    # thread holds it
    lock: threading.RLock = field(default_factory=threading.RLock)


PROCESS = _Process()


def check(name: str) -> str:
    """The policy ``name`` stands for (case and spaces ignored); a ValueError naming the
    valid ones otherwise."""
    text = name.strip().lower() if isinstance(name, str) else name
    if text not in POLICIES:
        raise ValueError(f"unknown cleanflush policy {name!r}; valid policies: {', '.join(POLICIES)}")
    return text


def current_policy() -> str:
    """The policy a flush started now, in this context, would run: ``write`` (the stock
    flush) while cleanflush is not installed."""
    if not STATE.installed:
        return "write"
    return selected()


def selected() -> str:
    """The policy the blocks open in this context select, else the process default."""
    for entry in reversed(_open_here.get()):
        if entry.open:
            return entry.name
    return PROCESS.default


def default() -> str:
    """The process default policy."""
    return PROCESS.default


def set_default(name: str) -> None:
    PROCESS.default = check(name)


@on_reset
def _forget_default() -> None:
    PROCESS.default = DEFAULT_POLICY


def open_blocks() -> list[str]:
    """The policies of the blocks open in any thread now, oldest first."""
    return [entry.name for entry in PROCESS.open_blocks]


def export(installed: bool, base: str | None) -> None:
    """Set what ``CLEANFLUSH`` says when no block is open (install/uninstall call this)."""
    with PROCESS.lock:
        PROCESS.exporting, PROCESS.base = installed, base
        _write_env()


def _write_env() -> None:
    """Called under the lock.  While uninstalled, blocks leave the environment alone."""
    blocks = PROCESS.open_blocks
    _env.export(POLICY_VAR, blocks[-1].name if PROCESS.exporting and blocks else PROCESS.base)


def _forget_other_threads() -> None:
    """In a forked child: only the forking thread lives on, so the blocks other threads had
    open are closed, and the lock one of them may have held is new."""
    PROCESS.lock = threading.RLock()
    me = threading.get_ident()
    gone = [e for e in PROCESS.open_blocks if e.thread != me]
    for entry in gone:
        entry.open = False
        PROCESS.open_blocks.remove(entry)
    if gone and PROCESS.exporting:
        _write_env()


os.register_at_fork(after_in_child=_forget_other_threads)


class policy:
    """Select the flush policy for a block::

        with cleanflush.policy("read"):
            triton.testing.do_bench(fn)

    Blocks nest; each thread and asyncio task sees its own; one object may be shared and
    entered from several at once; processes started inside the block inherit the policy
    through ``CLEANFLUSH``.  An unknown name raises ValueError listing the valid ones.
    """

    def __init__(self, name: str) -> None:
        self.name = check(name)

    # Both ends change the state first, by operations that add no Python frame (a recursion
    # limit hit in them leaves no block open), and write CLEANFLUSH after: where that write
    # fails at the limit, the next block's end writes it again.

    def __enter__(self) -> str:
        entry = _Entry(self, self.name)
        try:
            _open_here.set(_open_here.get() + (entry,))
            with PROCESS.lock:
                PROCESS.open_blocks.append(entry)
                if PROCESS.exporting:
                    _write_env()
        except BaseException:  # the block did not open (a RecursionError at the limit): nothing of it stays
            entry.open = False
            with PROCESS.lock:
                if entry in PROCESS.open_blocks:
                    PROCESS.open_blocks.remove(entry)
            raise
        return self.name

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        blocks = _open_here.get()
        entry = None
        for candidate in reversed(blocks):  # the newest entry of this block open in this context
            if candidate.owner is self and candidate.open:
                entry = candidate
                break
        here = entry is not None
        with PROCESS.lock:
            if entry is None:
                # ended in another thread or task than it began in (a generator finalised
                # there): the newest open entry of this block anywhere
                for candidate in reversed(PROCESS.open_blocks):
                    if candidate.owner is self and candidate.open:
                        entry = candidate
                        break
            if entry is not None:
                entry.open = False
                if entry in PROCESS.open_blocks:
                    PROCESS.open_blocks.remove(entry)
            if PROCESS.exporting:
                _write_env()
        if here:
            _open_here.set(tuple(e for e in blocks if e.open))

    def __repr__(self) -> str:
        return f"cleanflush.policy({self.name!r})"
