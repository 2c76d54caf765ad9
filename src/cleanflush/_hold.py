"""The hold: a read that keeps the GPU busy until the host has queued the timed call.

Why.  Where the GPU has caught up with the host (the benchmark synchronized before the flush,
or do_bench runs on a host slower per call than the GPU), the host records the start event
and launches the timed call while the GPU runs nothing but the flush.  A flush that ends
first leaves the GPU idle between the start event and the kernel, and the timer charges that
launch latency to the kernel.  So the read kernel (``_sweep``), after its sum, spins on
``%globaltimer`` until the host's next flush call, within a bound.  What it hides and costs
is measured in benchmarks/synced.py and benchmarks/budget.py (docs/policies.md).

How.

* Whether to hold (``hold_ns``): the GPU has caught up where the stream is empty
  (``stream_empty``) or where the GPU has started the read of the host's last flush call (the
  handshake).  Never during graph capture (a captured call number is stale at replay), never
  on CPU.
* The handshake (``Handshake``): two int64 of pinned host memory that the kernel reads and
  writes over the bus, no sync.  The host numbers its read calls in [0]; the kernel writes
  the call it starts in [1], and while it holds it polls [0]: the host's next read call lets
  the held read go.
* How long at most: ``HOLD_PACE`` times the host's time from queuing its last read to coming
  to this flush (it queues as much after this read: the start event, the timed call, the end
  event, the loop), never over its bound (``HOLD_NS``, longer in a queued loop, below),
  which is also how long where that time is not known.  So the last flush of a loop, which
  no call follows, holds about as long as its loop's pace, not the whole bound.
* A longer bound inside a queued loop (``queued_loop``: triton's ``do_bench``, which queues
  every call and synchronizes once): there the host is never waiting for the hold, so a
  hold costs no wall time beyond the host's own, and ``QUEUED_HOLD_NS`` covers a host that
  takes longer per call than ``HOLD_NS`` (restore hooks, kernels with many arguments:
  docs/limits.md).  A timed call that synchronizes waits out each hold before it: the host
  then comes back to a flush more than the whole bound after its last read in that loop, at
  two flushes in a row (one such gap alone is do_bench's warm-up, its calls unflushed), and
  from there on the loop holds as any loop does (``HOLD_NS``), having paid the long bound
  twice.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# The longest a read holds: what a benchmark that synchronizes before each flush waits, and
# beyond which a slower host's time still shows in the timing (benchmarks/synced.py).
HOLD_NS = 120_000
# A hold lasts up to this many times the host's time between its last read and this flush:
# enough to cover the timed call's queuing on a host whose time varies from call to call.
HOLD_PACE = 2
# The bound inside a queued loop (``queued_loop``), where a host slower per call than the GPU
# is not waiting for the hold: long enough for a timed call whose host time is many times
# the hold's (docs/limits.md).
QUEUED_HOLD_NS = 1_000_000
# A queued loop falls back to HOLD_NS after this many flushes in a row that the host came to
# more than its whole bound after its last read: one such gap is do_bench's warm-up.
WAITED_TO_FALL_BACK = 2


class _QueuedLoop:
    """One queued loop (a do_bench call): its bound, which falls back to ``HOLD_NS`` once its
    host is seen waiting for the GPU."""

    def __init__(self) -> None:
        self.bound_ns = QUEUED_HOLD_NS
        self.waited = 0  # flushes in a row the host came to after a whole bound


_LOOP: ContextVar[_QueuedLoop | None] = ContextVar("cleanflush_queued_loop", default=None)


@contextlib.contextmanager
def queued_loop() -> Iterator[None]:
    """The flushes of this block (this thread or task) are a loop that queues its timed calls
    without waiting for the GPU: their reads may hold up to ``QUEUED_HOLD_NS``."""
    token = _LOOP.set(_QueuedLoop())
    try:
        yield
    finally:
        _LOOP.reset(token)


def queued_note() -> str:
    """What the status row of a patched queued loop says of its bound."""
    bound_us = QUEUED_HOLD_NS // 1000
    return f"its loop queues every call, so its reads may hold the GPU up to {bound_us} us for a host slower per call"


def bound_ns() -> int:
    """The longest a read may hold here: ``HOLD_NS``, or the queued loop's bound."""
    loop = _LOOP.get()
    return HOLD_NS if loop is None else loop.bound_ns


class Handshake:
    """Where the host and the read kernel of one device are, told each other without a sync
    (pinned memory; tests hand in any two int64 of host memory), and the host's pace."""

    def __init__(self, signal: torch.Tensor | None = None, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        import torch

        self.signal = torch.zeros(2, dtype=torch.int64, pin_memory=True) if signal is None else signal
        self._slots = (ctypes.c_int64 * 2).from_address(self.signal.data_ptr())
        self._clock = clock
        self._left_ns: int | None = None  # when the host had queued its last read
        self._arrived_ns: int | None = None  # when the host came to its last flush
        self._left_in: _QueuedLoop | None = None  # the queued loop the last read was in

    def arrived(self) -> None:
        """The host has come to a flush."""
        self._arrived_ns = self._clock()

    def call(self) -> int:
        """Number a new read call, which lets the held read before it go."""
        number: int = self._slots[0] + 1
        self._slots[0] = number
        return number

    def left(self) -> None:
        """The host has queued the read of its last call."""
        self._left_ns = self._clock()
        self._left_in = _LOOP.get()

    def caught_up(self) -> bool:
        """Whether the GPU has started the read of the host's last call."""
        return bool(self._slots[1] >= self._slots[0])

    def pace_ns(self) -> int:
        """``HOLD_PACE`` times the host's time from queuing its last read to coming to this
        flush, the bound (``bound_ns``) at most and where that time is not known."""
        loop = _LOOP.get()
        left, arrived = self._left_ns, self._arrived_ns
        if left is None or arrived is None or arrived <= left:  # no flush come to since the last read
            return bound_ns()
        if loop is not None and self._left_in is loop:
            # the host waited out this loop's holds (a timed call that synchronizes)
            loop.waited = loop.waited + 1 if arrived - left > loop.bound_ns else 0
            if loop.waited >= WAITED_TO_FALL_BACK:
                loop.bound_ns = HOLD_NS
        return min(bound_ns(), HOLD_PACE * (arrived - left))


def capturing(device: torch.device) -> bool:
    """Whether this thread's current stream on ``device`` is capturing a CUDA graph (True
    where it cannot tell; False on CPU).  Every flush asks this once."""
    if device.type != "cuda":
        return False
    import torch

    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except (RuntimeError, AssertionError):  # a device that went away, a torch without CUDA: as if capturing
        return True


def hold_ns(device: torch.device, handshake: Handshake | None, capturing: bool) -> int:
    """How long the read of the flush the host has come to now holds the stream: 0 where the
    GPU has not caught up with the host, during capture, or where the device has no handshake
    (no read kernel to hold).  Asked before the flush's write, which fills the stream; the
    pinned mark first: where it answers, no stream query."""
    if handshake is None:
        return 0
    handshake.arrived()
    if capturing or not (handshake.caught_up() or stream_empty(device)):
        return 0
    return handshake.pace_ns()


def stream_empty(device: torch.device) -> bool:
    """Whether ``device``'s current stream has nothing queued (the benchmark synchronized
    before this flush); False where the device went away.  Not to be asked during capture."""
    import torch

    try:
        return bool(torch.cuda.current_stream(device).query())
    except (RuntimeError, AssertionError):  # a device that went away, a torch without CUDA: no hold
        return False
