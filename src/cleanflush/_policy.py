"""Which flush policy is active: a process default plus a per-context override.

The override lives in a ContextVar, so nested blocks, threads and asyncio tasks each see
their own.  Child processes cannot see a ContextVar, so a ``policy()`` block also sets
``CLEANFLUSH`` in ``os.environ`` while it is open: a child started inside it autoloads
cleanflush (``cleanflush.pth``) with the same policy.
"""

from __future__ import annotations

import os
import threading
from contextvars import ContextVar, Token
from types import TracebackType

from ._env import DEFAULT_POLICY, ENV_VAR, POLICIES

_override: ContextVar[str | None] = ContextVar("cleanflush_policy", default=None)
_default = DEFAULT_POLICY

# os.environ is one per process: it follows the newest block still open, in any thread.
_env_lock = threading.Lock()
_open_blocks: list[tuple[object, str]] = []
_env_before_blocks: str | None = None


def check(name: str) -> str:
    """Return ``name`` if it is a policy, else raise a ValueError naming the valid ones."""
    if name not in POLICIES:
        raise ValueError(f"unknown cleanflush policy {name!r}; valid policies: {', '.join(POLICIES)}")
    return name


def current_policy() -> str:
    """The policy a flush started now, in this context, would use."""
    return _override.get() or _default


def default() -> str:
    """The process default policy, which ``CLEANFLUSH`` carries to child processes."""
    return _default


def set_default(name: str) -> None:
    global _default
    _default = check(name)


class policy:
    """Select the flush policy for a block::

        with cleanflush.policy("read"):
            triton.testing.do_bench(fn)

    Blocks nest; each thread and asyncio task sees its own; processes started inside the
    block inherit the policy through ``CLEANFLUSH``.  An unknown name raises ValueError.
    """

    def __init__(self, name: str) -> None:
        self.name = check(name)
        self._tokens: list[tuple[Token[str | None], object]] = []

    def __enter__(self) -> str:
        key = object()
        self._tokens.append((_override.set(self.name), key))
        _push_env(key, self.name)
        return self.name

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, key = self._tokens.pop()
        _override.reset(token)
        _pop_env(key)

    def __repr__(self) -> str:
        return f"cleanflush.policy({self.name!r})"


def _push_env(key: object, name: str) -> None:
    global _env_before_blocks
    with _env_lock:
        if not _open_blocks:
            _env_before_blocks = os.environ.get(ENV_VAR)
        _open_blocks.append((key, name))
        os.environ[ENV_VAR] = name


def _pop_env(key: object) -> None:
    with _env_lock:
        _open_blocks[:] = [(k, n) for k, n in _open_blocks if k is not key]
        if _open_blocks:
            os.environ[ENV_VAR] = _open_blocks[-1][1]
        elif _env_before_blocks is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = _env_before_blocks
