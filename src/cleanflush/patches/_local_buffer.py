"""Harnesses whose flush buffer is a local ``torch.empty`` inside the benchmark function
(FlashInfer's ``bench_gpu_time_with_cuda_event`` / ``_with_cupti``, triton 3.0-3.1's
``do_bench``): no name outside the function ever holds the tensor, so the only place to
reach it is its allocation.

While a wrapped benchmark waits for its buffer, ``torch.empty`` is a function of ours that
hands the waiting thread's first matching tensor out as a flushing tensor
(``_flush.flushing_tensor``: same storage, ``zero_()`` is the flush).  ``torch.empty``
itself is swapped, not a module global of the harness, because triton's ``do_bench``
imports torch inside the function.  The swap lasts from the call's start until the buffer
is made (before any timed call), or until the call returns without one; other threads'
allocations pass through untouched.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from .. import _flush
from .._state import TargetStatus, record, warn_once

Match = Callable[[Any], bool]  # is this freshly allocated tensor the harness's flush buffer?


class _Wait:
    __slots__ = ("match", "target", "caught")

    def __init__(self, match: Match, target: str) -> None:
        self.match, self.target, self.caught = match, target, False


_lock = threading.Lock()
_local = threading.local()  # .waits: this thread's benchmarks still waiting, innermost last
_waiting = 0  # waits not yet caught, all threads
_stock_empty: Any = None  # torch.empty as it was when the swap began


def _empty(*args: Any, **kwargs: Any) -> Any:
    tensor = _stock_empty(*args, **kwargs)
    waits = getattr(_local, "waits", None)
    if waits and not waits[-1].caught:
        wait = waits[-1]
        try:
            matched = wait.match(tensor)
        except Exception:
            matched = False
        if matched:
            wait.caught = True
            _release()
            return _flush.flushing_tensor(tensor, wait.target)
    return tensor


def _release() -> None:
    """One wait fewer; the last one puts the stock ``torch.empty`` back."""
    global _waiting
    import torch

    with _lock:
        _waiting -= 1
        if _waiting == 0 and torch.empty is _empty:  # someone else's replacement stays
            torch.empty = _stock_empty


def waiting(target: str) -> bool:
    """Whether a benchmark of ``target`` on this thread is already waiting for its buffer
    (FlashInfer's CUPTI timer falls back to its event timer, which allocates it)."""
    return any(wait.target == target and not wait.caught for wait in getattr(_local, "waits", ()))


@contextmanager
def handing_out(match: Match, target: str) -> Iterator[_Wait]:
    """Within the block, this thread's first ``torch.empty`` that ``match`` accepts comes
    back as a flushing tensor counted under ``target``; ``caught`` says whether one did."""
    global _waiting, _stock_empty
    import torch

    wait = _Wait(match, target)
    with _lock:
        if _waiting == 0 and torch.empty is not _empty:
            _stock_empty = torch.empty
            torch.empty = _empty
        _waiting += 1
    waits = _local.__dict__.setdefault("waits", [])
    waits.append(wait)
    try:
        yield wait
    finally:
        waits.remove(wait)
        if not wait.caught:
            _release()


def run(call: Callable[[], Any], match: Match, target: str, where: str, package: str, version: str | None) -> Any:
    """Run the benchmark ``call`` (the stock function ``where``) handing out its buffer; if
    it made none that ``match`` accepts, its stock flush ran: said once, and in status."""
    if waiting(target):  # a nested call of the same harness: the outer one is waiting
        return call()
    with handing_out(match, target) as wait:
        result = call()
    if not wait.caught:
        why = "made no flush buffer of the shape cleanflush knows; its stock flush ran"
        warn_once(f"local-buffer:{where}", f"{where} {why}")
        record(TargetStatus(where, package, version, False, f"unsupported: {why}"))
    return result
