"""The flushes ``cleanflush verify`` can time do_bench under: stock, a policy, or a
deliberately broken flush (a negative control) that the verdict must judge FAIL.

Each control breaks the flush the way a real bug would, and leaves the rest of the
evidence as that bug would leave it:

* ``control: stock write``: the ``write`` policy; nothing is cleaned.
* ``control: read of the zeroed tail``: writes, then reads back the last half-L2 of the
  buffer it just zeroed.  Those lines are still in L2 and dirty; a hit leaves them dirty.
  It counts itself as ``write-read``, so only the timing and Nsight Compute can catch it.
* ``control: read of half the L2``: the real write-read flush with its read cut to L2 / 2,
  too little to evict the dirty lines; counted as ``write-read`` too.
* ``control: read that falls back``: the real ``read`` policy whose read raises; it runs
  the stock write and is counted as ``write`` (so the flush evidence must catch it).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, Iterator

import cleanflush

from .. import _flush
from .._state import count_flush

STOCK = "stock"
CONTROLS = (
    "control: stock write",
    "control: read of the zeroed tail",
    "control: read of half the L2",
    "control: read that falls back",
)
# which policy each control says it ran (what a bug of that kind would report)
CLAIMS = {
    "control: stock write": "write",
    "control: read of the zeroed tail": "write-read",
    "control: read of half the L2": "write-read",
    "control: read that falls back": "read",
}


@contextlib.contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


def _tail_read_flush(cache: Any, write: Callable[[], Any], target: str) -> Any:
    import torch

    result = write()
    l2 = _flush.l2_bytes(cache.device)
    tail = cache.view(torch.float32)[-(l2 // 2 // 4):]
    tail.sum()
    count_flush(target, "write-read")
    return result


def _failing_read(device: Any, nbytes: int) -> None:
    raise RuntimeError("negative control: the read fails")


@contextlib.contextmanager
def flushing(name: str) -> Iterator[None]:
    """Run the block with do_bench flushing as ``name`` says."""
    if name == STOCK or name == "control: stock write":
        with cleanflush.policy("write"):
            yield
    elif name in cleanflush.POLICIES:
        with cleanflush.policy(name):
            yield
    elif name == "control: read of the zeroed tail":
        with cleanflush.policy("write-read"), _replaced(_flush, "flush", _tail_read_flush):
            yield
    elif name == "control: read of half the L2":
        with cleanflush.policy("write-read"), _replaced(_flush, "read_bytes", lambda l2, written: l2 // 2):
            yield
    elif name == "control: read that falls back":
        with cleanflush.policy("read"), _replaced(_flush, "read", _failing_read), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback warning is the point here, not news
            yield
    else:
        raise ValueError(f"unknown flush {name!r}; valid: {STOCK}, {', '.join(cleanflush.POLICIES + CONTROLS)}")
