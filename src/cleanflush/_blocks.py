"""A choice that a block can change for its context and that child processes inherit: the
flush policy (``_policy``) and the pick rule (``_pick``) are each one ``Choice``.

A process default plus the blocks open in the current context.  The blocks of a context live
in a ContextVar holding an immutable tuple, so nested blocks, threads and asyncio tasks each
see their own, and one block object can be entered by many of them at once: the state of an
entry is never kept on the instance.  An entry is closed wherever its block ends, so a block
in a generator that another thread or task finalises ends for the context that entered it too.

Child processes cannot see a ContextVar, so a choice also writes its variable: a *base* value
that install/uninstall set, and, while cleanflush is installed, an overlay naming the newest
block still open in any thread.  A child started inside a block autoloads cleanflush
(``cleanflush.pth``) with the block's choice; a process where cleanflush is off never turns
it on in its children.
"""

from __future__ import annotations

import os
import threading
from contextvars import ContextVar
from types import TracebackType
from typing import ClassVar

from . import _env


class _Entry:
    """One entering of a block."""

    __slots__ = ("owner", "name", "thread", "open")

    def __init__(self, owner: Block, name: str) -> None:
        self.owner, self.name = owner, name
        self.thread = threading.get_ident()
        self.open = True


class Choice:
    """One choice among ``names``: its process default, the blocks open now, and its variable."""

    def __init__(self, variable: str, names: tuple[str, ...], default: str, what: str, plural: str) -> None:
        self.variable, self.names, self.what, self.plural = variable, names, what, plural
        self.default = default
        self.blocks: ContextVar[tuple[_Entry, ...]] = ContextVar(f"cleanflush_{variable}_blocks", default=())
        self.open_blocks: list[_Entry] = []  # open in any thread, oldest first
        self.exporting = False  # whether blocks show in the variable (while installed)
        self.base: str | None = None  # the variable with no block open
        # for the environment and the blocks; reentrant: a signal handler may open a block while
        # this thread holds it
        self.lock = threading.RLock()
        os.register_at_fork(after_in_child=self._forget_other_threads)

    def check(self, name: str) -> str:
        """The name ``name`` stands for (case and spaces ignored); a ValueError naming the valid ones otherwise."""
        text = name.strip().lower() if isinstance(name, str) else name
        if text not in self.names:
            raise ValueError(f"unknown cleanflush {self.what} {name!r}; valid {self.plural}: {', '.join(self.names)}")
        return text

    def selected(self) -> str:
        """The choice of the blocks open in this context, else the process default."""
        for entry in reversed(self.blocks.get()):
            if entry.open:
                return entry.name
        return self.default

    def set_default(self, name: str) -> None:
        self.default = self.check(name)

    def open_names(self) -> list[str]:
        """The choices of the blocks open in any thread now, oldest first."""
        return [entry.name for entry in self.open_blocks]

    def export(self, installed: bool, base: str | None) -> None:
        """Set what the variable says when no block is open (install/uninstall call this)."""
        with self.lock:
            self.exporting, self.base = installed, base
            self.write_env()

    def write_env(self) -> None:
        """Called under the lock.  While uninstalled, blocks leave the environment alone."""
        blocks = self.open_blocks
        _env.export(self.variable, blocks[-1].name if self.exporting and blocks else self.base)

    def _forget_other_threads(self) -> None:
        """In a forked child: only the forking thread lives on, so the blocks other threads had
        open are closed, and the lock one of them may have held is new."""
        self.lock = threading.RLock()
        me = threading.get_ident()
        gone = [e for e in self.open_blocks if e.thread != me]
        for entry in gone:
            entry.open = False
            self.open_blocks.remove(entry)
        if gone and self.exporting:
            self.write_env()


class Block:
    """A block that selects ``choice`` for its context (``policy``, ``pick``): blocks nest;
    each thread and asyncio task sees its own; one object may be shared and entered from
    several at once; processes started inside inherit the name through the variable."""

    choice: ClassVar[Choice]

    def __init__(self, name: str) -> None:
        self.name = self.choice.check(name)

    # Both ends change the state first, by operations that add no Python frame (a recursion
    # limit hit in them leaves no block open), and write the variable after: where that write
    # fails at the limit, the next block's end writes it again.

    def __enter__(self) -> str:
        choice = self.choice
        entry = _Entry(self, self.name)
        opened = False
        try:
            choice.blocks.set(choice.blocks.get() + (entry,))
            with choice.lock:
                choice.open_blocks.append(entry)
                if choice.exporting:
                    choice.write_env()
            opened = True
        finally:
            if not opened:  # the block did not open (a RecursionError at the limit): nothing of it stays
                entry.open = False
                with choice.lock:
                    if entry in choice.open_blocks:
                        choice.open_blocks.remove(entry)
        return self.name

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        choice = self.choice
        blocks = choice.blocks.get()
        entry = None
        for candidate in reversed(blocks):  # the newest entry of this block open in this context
            if candidate.owner is self and candidate.open:
                entry = candidate
                break
        here = entry is not None
        with choice.lock:
            if entry is None:
                # ended in another thread or task than it began in (a generator finalised
                # there): the newest open entry of this block anywhere
                for candidate in reversed(choice.open_blocks):
                    if candidate.owner is self and candidate.open:
                        entry = candidate
                        break
            if entry is not None:
                entry.open = False
                if entry in choice.open_blocks:
                    choice.open_blocks.remove(entry)
            if choice.exporting:
                choice.write_env()
        if here:
            choice.blocks.set(tuple(e for e in blocks if e.open))

    def __repr__(self) -> str:
        return f"cleanflush.{type(self).__name__}({self.name!r})"
