"""The flushes ``cleanflush verify`` can time do_bench under: stock, a policy, or a
deliberately broken flush (a negative control) that the verdict must judge FAIL.

Each control breaks the flush the way a real bug would, and leaves the rest of the
evidence as that bug would leave it:

* ``control: stock write``: the ``write`` policy; nothing is cleaned.
* ``control: read of the zeroed tail``: the real write-read flush whose read sums the last
  half-L2 of the buffer it just zeroed.  Those lines are still in L2 and dirty; a hit leaves
  them dirty.  It counts itself as ``write-read``, so only the timing and Nsight Compute can
  catch it.
* ``control: read of half the L2``: the real write-read flush with its read cut to L2 / 2,
  too little to evict the dirty lines; counted as ``write-read`` too.
* ``control: read that falls back``: the real ``read`` policy whose read raises; it runs
  the stock write and is counted as ``write`` (so the flush evidence must catch it).

Each breaks the read through the seam verify owns (``cleanflush._seam``), so the rest of the
flush, its counting and its fallback run as they do for users.  A chosen read region also
keeps the whole stock write where cleanflush would write only an eighth of the L2: the
controls judge a broken read where it does the most harm.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import cleanflush

from .._seam import read_region

UNINSTALLED = "stock"  # the candidate timed with cleanflush uninstalled (not the policy `write`)
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


def _zeroed_tail(cache: Any, region: Any, l2: int) -> Any:
    import torch

    return cache.view(torch.float32)[-(l2 // 2 // 4) :]


def _half_the_l2(cache: Any, region: Any, l2: int) -> Any:
    return region[: l2 // 2 // 4]


def _failing(cache: Any, region: Any, l2: int) -> Any:
    raise RuntimeError("negative control: the read fails")


@contextlib.contextmanager
def flushing(name: str) -> Iterator[None]:
    """Run the block with do_bench flushing as ``name`` says."""
    if name == UNINSTALLED or name == "control: stock write":
        with cleanflush.policy("write"):
            yield
    elif name in cleanflush.POLICIES:
        with cleanflush.policy(name):
            yield
    elif name == "control: read of the zeroed tail":
        with cleanflush.policy("write-read"), read_region(_zeroed_tail):
            yield
    elif name == "control: read of half the L2":
        with cleanflush.policy("write-read"), read_region(_half_the_l2):
            yield
    elif name == "control: read that falls back":
        with cleanflush.policy("read"), read_region(_failing), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the fallback warning is the point here, not news
            yield
    else:
        raise ValueError(f"unknown flush {name!r}; valid: {UNINSTALLED}, {', '.join(cleanflush.POLICIES + CONTROLS)}")
