"""Harnesses whose flush buffer is a local ``torch.empty`` inside the benchmark function
(FlashInfer's ``bench_gpu_time_with_cuda_event`` / ``_with_cupti``, triton 3.0-3.1's
``do_bench``): no name outside the function ever holds the tensor, so the only place to
reach it is its allocation.

While a wrapped benchmark waits for its buffer, ``torch.empty`` is a function of ours that
hands the waiting thread's first matching tensor out as a flushing tensor
(``_tensor.flushing_tensor``: same storage, ``zero_()`` is the flush).  ``torch.empty``
itself is swapped, not a module global of the harness, because triton's ``do_bench``
imports torch inside the function.  The swap lasts from the call's start until the buffer
is made (before any timed call), or until the call returns without one; other threads'
allocations pass through untouched.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import _patching
from .._state import Site, record, warn_once
from . import _tensor

Match = Callable[[Any], bool]  # is this freshly allocated tensor the harness's flush buffer?


class _Wait:
    __slots__ = ("match", "target", "write", "caught")

    def __init__(self, match: Match, target: str, write: str) -> None:
        self.match, self.target, self.write, self.caught = match, target, write, False


# .waits: this thread's benchmarks still waiting, innermost last
_local = threading.local()


@dataclass
class _Swap:
    """``torch.empty`` swapped for ``_empty`` while any thread's benchmark waits."""

    waiting: int = 0  # benchmarks waiting for their buffer, in all threads
    stock_empty: Callable[..., Any] | None = None  # torch.empty before the swap
    lock: threading.Lock = field(default_factory=threading.Lock)


SWAP = _Swap()


def _fresh_lock_in_child() -> None:
    SWAP.lock = threading.Lock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_fresh_lock_in_child)


def _empty(*args: Any, **kwargs: Any) -> Any:
    assert SWAP.stock_empty is not None  # set before the swap
    tensor = SWAP.stock_empty(*args, **kwargs)
    waits = getattr(_local, "waits", None)
    if waits and not waits[-1].caught:
        wait = waits[-1]
        try:
            matched = wait.match(tensor)
        except (AttributeError, TypeError, ValueError, RuntimeError):  # a tensor the match cannot read: not it
            matched = False
        if matched:
            wait.caught = True
            _release()
            return _tensor.flushing_tensor(tensor, wait.target, wait.write)
    return tensor


def _release() -> None:
    """One wait fewer; the last one puts the stock ``torch.empty`` back."""
    import torch

    with SWAP.lock:
        SWAP.waiting -= 1
        if SWAP.waiting == 0 and torch.empty is _empty:  # someone else's replacement stays
            torch.empty = SWAP.stock_empty  # type: ignore[assignment]


def waiting(target: str) -> bool:
    """Whether a benchmark of ``target`` on this thread is already waiting for its buffer
    (FlashInfer's CUPTI timer falls back to its event timer, which allocates it)."""
    return any(wait.target == target and not wait.caught for wait in getattr(_local, "waits", ()))


@contextmanager
def handing_out(match: Match, target: str, write: str = "zero_") -> Iterator[_Wait]:
    """Within the block, this thread's first ``torch.empty`` that ``match`` accepts comes
    back as a flushing tensor counted under ``target`` (its ``write`` method is the flush);
    ``caught`` says whether one did."""
    import torch

    wait = _Wait(match, target, write)
    with SWAP.lock:
        if SWAP.waiting == 0 and torch.empty is not _empty:
            SWAP.stock_empty = torch.empty
            torch.empty = _empty
        SWAP.waiting += 1
    waits = _local.__dict__.setdefault("waits", [])
    waits.append(wait)
    try:
        yield wait
    finally:
        waits.remove(wait)
        if not wait.caught:
            _release()


def run(call: Callable[[], Any], match: Match, target: str, where: str, write: str = "zero_") -> Any:
    """Run the benchmark ``call`` (the stock function ``where`` of target ``target``) handing
    out its buffer, whose ``write`` method is its flush; if it made none that ``match``
    accepts, its stock flush ran: said once, and in status."""
    if waiting(target):  # a nested call of the same harness: the outer one is waiting
        return call()
    with handing_out(match, target, write) as wait:
        result = call()
    if not wait.caught:
        why = "made no flush buffer of the shape cleanflush knows; its stock flush ran"
        warn_once(f"local-buffer:{where}", f"{where} {why}")
        record(target, Site(where, "unsupported", why))
    return result


class ScriptTimer:
    """A timer of a script's own top-level module (TileGym's ``bench_utils``, ThunderKittens'
    ``common``) whose flush buffer is local: wrapped in its module, where scripts bind it by
    name as the module finishes importing, so that its buffer is handed out while it runs.  A
    module of that name without the function is someone else's: left alone, with no row.  One
    instance per harness, giving its patch module ``apply`` and ``revert``."""

    def __init__(self, name: str, module: str, timer: str, match: Match, write: str, detail: str) -> None:
        self.name, self.module, self.timer, self.match, self.write = name, module, timer, match, write
        self.where = f"{module}.{timer}"
        self.detail = detail  # what its status row says when patched

    def _timer(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return run(lambda: wrapped(*args, **kwargs), self.match, self.name, self.where, self.write)

    def apply(self) -> list[Site]:
        module = sys.modules.get(self.module)
        if module is None or not callable(vars(module).get(self.timer)):
            return []
        _patching.patch_set(self.name).wrap(module, self.timer, self._timer)
        return [Site(self.where, "patched", self.detail)]

    def revert(self) -> None:
        _patching.patch_set(self.name).revert()
