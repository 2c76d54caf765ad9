"""The one seam in the flush, owned by ``cleanflush verify``: what the read sums.

verify's negative controls (``_verify.controls``) break the read through it the way a bug
would (a region too small, the dirty lines themselves, a read that raises), so that the rest
of the flush, its counting and its fallback run as they do for users.  The flush asks
``chosen()`` on every read and does as it says; nothing but verify and its tests sets it.

Where a region is chosen, a flush of a cache cleanflush owns writes all of it (``_flush``):
a broken read is judged after the whole stock write, where it does the most harm.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# (the cache just written or None, the region cleanflush chose, the device's L2 bytes) -> what to sum
Region = Callable[[Any, "torch.Tensor", int], "torch.Tensor"]
_chosen: ContextVar[Region | None] = ContextVar("cleanflush_read_region", default=None)


@contextmanager
def read_region(choose: Region) -> Iterator[None]:
    """Within the block (this context only), every read sums ``choose(cache, region, l2)``."""
    token = _chosen.set(choose)
    try:
        yield
    finally:
        _chosen.reset(token)


def chosen() -> Region | None:
    """The region chooser set for this context, or None (the flush's own region)."""
    return _chosen.get()
