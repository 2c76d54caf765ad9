"""Which flush policy is active, and the one owner of ``CLEANFLUSH`` in ``os.environ``.

A process default plus the ``policy()`` blocks open in the current context.  The open
blocks live in a ContextVar holding an immutable tuple, so nested blocks, threads and
asyncio tasks each see their own, and one ``policy`` object can be entered by many of
them at once: the state of an entry is never kept on the instance.

Child processes cannot see a ContextVar, so this module also owns ``CLEANFLUSH`` in
``os.environ``: a *base* value that install/uninstall set, and, while cleanflush is
installed, an overlay naming the newest block still open in any thread.  A child started
inside a block autoloads cleanflush (``cleanflush.pth``) with the block's policy; a process
where cleanflush is off never turns it on in its children.
"""

from __future__ import annotations

import os
import threading
from contextvars import ContextVar
from types import TracebackType

ENV_VAR = "CLEANFLUSH"
POLICIES = ("write-read", "read", "write")
# The specification's default: the stock write, then a clean read (see README, Policies,
# for the trade-off against `read`).
DEFAULT_POLICY = "write-read"


class _Entry:
    """One entering of a ``policy`` block."""

    __slots__ = ("owner", "name")

    def __init__(self, owner: policy, name: str) -> None:
        self.owner = owner
        self.name = name


_open_here: ContextVar[tuple[_Entry, ...]] = ContextVar("cleanflush_blocks", default=())
_default = DEFAULT_POLICY

_env_lock = threading.Lock()
_open_anywhere: list[_Entry] = []  # every open block, oldest first, in any thread
_exporting = False  # True while installed: only then do blocks show in the environment
_base: str | None = None  # CLEANFLUSH as install/uninstall want it (None: unset)


def check(name: str) -> str:
    """The policy ``name`` stands for (case and spaces ignored); a ValueError naming the
    valid ones otherwise."""
    text = name.strip().lower() if isinstance(name, str) else name
    if text not in POLICIES:
        raise ValueError(f"unknown cleanflush policy {name!r}; valid policies: {', '.join(POLICIES)}")
    return text


def current_policy() -> str:
    """The policy a flush started now, in this context, would use."""
    blocks = _open_here.get()
    return blocks[-1].name if blocks else _default


def default() -> str:
    """The process default policy."""
    return _default


def set_default(name: str) -> None:
    global _default
    _default = check(name)


def export(installed: bool, base: str | None) -> None:
    """Set what ``CLEANFLUSH`` says when no block is open (install/uninstall call this)."""
    global _exporting, _base
    with _env_lock:
        _exporting, _base = installed, base
        _write_env()


def _write_env() -> None:
    """Called under ``_env_lock``.  While uninstalled, blocks leave the environment alone."""
    value = _open_anywhere[-1].name if _exporting and _open_anywhere else _base
    if value is None:
        os.environ.pop(ENV_VAR, None)
    else:
        os.environ[ENV_VAR] = value


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

    def __enter__(self) -> str:
        entry = _Entry(self, self.name)
        _open_here.set(_open_here.get() + (entry,))
        with _env_lock:
            _open_anywhere.append(entry)
            if _exporting:
                _write_env()
        return self.name

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        blocks = _open_here.get()
        mine = [e for e in blocks if e.owner is self]
        with _env_lock:
            entry: _Entry | None
            if mine:
                entry = mine[-1]
            else:  # exited in another thread or task than it was entered in
                entry = next((e for e in reversed(_open_anywhere) if e.owner is self), None)
            if entry is not None and entry in _open_anywhere:
                _open_anywhere.remove(entry)
            if _exporting:
                _write_env()
        if mine:
            _open_here.set(tuple(e for e in blocks if e is not mine[-1]))

    def __repr__(self) -> str:
        return f"cleanflush.policy({self.name!r})"
