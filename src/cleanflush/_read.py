"""The clean read on each device: its buffer, its kernels, and their launch.

One float32 buffer of ``buffer_bytes`` per device, a scalar the sum goes to, and the kernels
that read it (``_sweep``: named ``cleanflush_l2_sweep`` so that timers which pick kernels by
name never take it for the kernel under test; torch's sum where it cannot be built, and on
CPU), made once by ``prepare`` before any capture or timed loop.  Nothing here decides what a
flush does (``_flush``) or when a read holds the stream (``_hold``).

A read buffer that a CUDA graph captured stays allocated after ``release``: the graph may be
replayed later, and its kernels read the buffer and the pinned handshake.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from . import _hold
from ._state import TargetStatus, on_reset, warn_once

if TYPE_CHECKING:
    import torch

    from ._sweep import HeldSweep, Sweep, WriteRead

READ_KERNEL = "cleanflush_l2_sweep"  # the read's kernel name on CUDA (``_sweep``), for name filters
MiB = 1 << 20
STOCK_FLUSH_BYTES = 256 * MiB  # Triton's zero_ buffer: the GPU-busy time a flush must keep


class ReadUnavailable(RuntimeError):
    """The read cannot run on a device (said once, not retried)."""


def l2_bytes(device: torch.device) -> int:
    """The device's L2 size in bytes, 0 when the device does not report one (CPU)."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    return 0


def read_bytes(l2: int, written: int, held: bool = False) -> int:
    """Bytes the read must cover after ``written`` bytes of write: 2 x L2, which evicts every
    dirty line.  Where the read cannot hold the stream (``held`` False), also the rest of the
    stock write's bytes, which keep the GPU busy while the host queues; where it can, the
    hold does that (``_hold``) and the read is no longer than eviction needs."""
    return 2 * l2 if held else max(2 * l2, STOCK_FLUSH_BYTES - written)


def buffer_bytes(l2: int) -> int:
    """Size of the read buffer: enough for every read ``read_bytes`` can ask for."""
    return read_bytes(l2, 0)


class Views:
    """The views a flush takes, made once instead of on every call (a flush's host time is
    what a benchmark loop on a fast GPU waits for): the read buffer's spans by size, and the
    owned head of the last cache flushed, kept while that cache object lives."""

    MAX_SPANS = 64  # read sizes seen on one device are few; a caller varying them is not kept

    def __init__(self) -> None:
        self._spans: dict[int, torch.Tensor] = {}
        self._cache: weakref.ref[torch.Tensor] | None = None
        self._head: torch.Tensor | None = None

    def span(self, buffer: torch.Tensor, count: int) -> torch.Tensor:
        """``buffer[:count]``."""
        found = self._spans.get(count)
        if found is None:
            found = buffer[:count]
            if len(self._spans) < self.MAX_SPANS:
                self._spans[count] = found
        return found

    def head(self, cache: torch.Tensor, count: int) -> torch.Tensor:
        """The first ``count`` elements of the contiguous ``cache``, as a tensor on its storage
        (not a view of the tensor: that would keep the cache object, and its memory, alive
        once its owner let go of it)."""
        kept = self._head if self._cache is not None and self._cache() is cache else None
        if kept is not None and kept.numel() == count and kept.data_ptr() == cache.data_ptr():
            return kept
        storage, offset = cache.untyped_storage(), cache.storage_offset()
        head: torch.Tensor = cache.new_empty(0).set_(storage, offset, (count,), (1,))
        self._cache, self._head = weakref.ref(cache, self._forget), head
        return head

    def _forget(self, ref: weakref.ref[torch.Tensor]) -> None:
        if self._cache is ref:  # the cache is gone: its storage goes with it
            self._cache = self._head = None


@dataclass(eq=False)
class ReadBuffer:
    """What one device reads with, made once by ``prepare``."""

    buffer: torch.Tensor  # float32, ``buffer_bytes(l2)`` long
    sink: torch.Tensor  # float32 scalar the sum goes to
    l2: int  # L2 bytes, 0 when the device reports none
    sweep: Sweep | None = None  # the named kernel; None: torch's sum
    held: HeldSweep | None = None  # the sweep holding the stream; None: no hold here
    handshake: _hold.Handshake | None = None  # the host's side of the kernel's signal
    views: Views = field(default_factory=Views)
    write_read: WriteRead | str | None = None  # the one-kernel write-read, why it cannot be, or not built yet
    captured: bool = False  # a CUDA graph captured a read of it

    @property
    def can_hold(self) -> bool:
        """Whether a read here can hold the stream until the host's next flush (``_hold``)."""
        return self.held is not None

    def read_bytes(self, written: int | None) -> int:
        """Bytes a read covers after ``written`` bytes of write (None: one L2 of it)."""
        return read_bytes(self.l2, self.l2 if written is None else written, held=self.can_hold)

    def region(self, nbytes: int) -> torch.Tensor:
        """The float32 elements of this buffer a read of ``nbytes`` sums."""
        return self.views.span(self.buffer, nbytes // 4)

    def owned_head(self, cache: torch.Tensor, nbytes: int) -> torch.Tensor | None:
        """The first ``nbytes`` of ``cache``, as a tensor on its storage (``Views.head``); None
        where the cache is not one contiguous tensor larger than that."""
        count = nbytes // cache.element_size()
        if not cache.is_contiguous() or not 0 < count < cache.numel():
            return None
        return self.views.head(cache, count)

    def read(self, data: torch.Tensor, hold_ns: int, capturing: bool) -> None:
        """Enqueue a float32 sum of ``data`` (a part of this buffer) into ``sink`` on the
        current stream: one kernel, no allocation, no host sync.  The call lets a held read
        before it go; with ``hold_ns``, this one holds the stream until the next call, that
        long at most, where the device has a hold."""
        import torch

        if capturing:
            self.captured = True
        handshake = self.handshake
        call = handshake.call() if handshake is not None else 0
        if hold_ns and self.held is not None:
            self.held(data, self.sink, call, hold_ns)
        elif self.sweep is not None:
            self.sweep(data, self.sink, call)
        else:
            torch.sum(data, dim=0, out=self.sink)
        if handshake is not None:
            handshake.left()


@dataclass
class _Reads:
    """The read buffers of this process, and what could not be made (shown by status)."""

    buffers: dict[torch.device, ReadBuffer] = field(default_factory=dict)
    kept: list[ReadBuffer] = field(default_factory=list)  # released, but a captured graph may read them
    # (what, device) -> why it could not be made there: the buffer ("read buffer"), the
    # named kernel ("read kernel"), its hold ("read kernel's hold")
    unavailable: dict[tuple[str, str], str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


READS = _Reads()
BUFFER, KERNEL, HOLD = "read buffer", "read kernel", "read kernel's hold"


def prepare(device: torch.device) -> ReadBuffer:
    """The read buffer of ``device``, allocated on first use (once, also under threads); call
    it outside graph capture.  A device whose buffer failed raises ReadUnavailable from then on."""
    entry = READS.buffers.get(device)
    if entry is not None:
        return entry
    with READS.lock:
        entry = READS.buffers.get(device)  # another thread made it meanwhile
        if entry is not None:
            return entry
        failed = READS.unavailable.get((BUFFER, str(device)))
        if failed is not None:
            raise ReadUnavailable(failed)
        if _hold.capturing(device):  # not recorded: the next flush outside capture may still allocate it
            raise ReadUnavailable("the read buffer cannot be allocated during CUDA graph capture")
        try:
            l2 = l2_bytes(device)
            buffer, sink = _allocate_outside_pools(device, buffer_bytes(l2) // 4)
        except (
            RuntimeError,
            AssertionError,
            ValueError,
            MemoryError,
        ) as exc:  # out of memory, no such device: not retried
            reason = READS.unavailable[(BUFFER, str(device))] = f"the read buffer could not be allocated ({exc})"
            raise ReadUnavailable(reason) from exc
        entry = READS.buffers[device] = _with_kernels(ReadBuffer(buffer, sink, l2))
        return entry


def _with_kernels(entry: ReadBuffer) -> ReadBuffer:
    """``entry`` with the read kernel, its handshake and its hold, where they can be built
    (CUDA); what cannot be is kept for status."""
    device = entry.buffer.device
    if device.type != "cuda":
        return entry
    kernel = _built(KERNEL, device, lambda: _sweep_of(entry))
    if kernel is not None:
        entry.handshake, entry.sweep = kernel
        entry.held = _built(HOLD, device, lambda: _held_of(entry))
    return entry


def _sweep_of(entry: ReadBuffer) -> tuple[_hold.Handshake, Sweep]:
    from . import _sweep

    handshake = _hold.Handshake()
    device = entry.buffer.device
    return handshake, _sweep.build(entry.buffer, entry.sink, handshake.signal, _sweep.programs_for(device))


def _held_of(entry: ReadBuffer) -> HeldSweep:
    from . import _sweep

    assert entry.handshake is not None
    device = entry.buffer.device
    return _sweep.build_held(entry.buffer, entry.sink, entry.handshake.signal, _sweep.programs_for(device))


T = TypeVar("T")


def _attempt(build: Callable[[], T]) -> tuple[T | None, str | None]:
    """(``build()``, None), or (None, why it failed, in one line)."""
    try:
        return build(), None
    except Exception as exc:  # no triton, no pinned memory, a compiler error, a wrong sum, no %globaltimer
        return None, one_line(exc)


def _built(what: str, device: torch.device, build: Callable[[], T]) -> T | None:
    """``build()``, or None where it fails: why is kept for status, and said once where it
    changes what users see (a read kernel that cannot be built is read by torch's sum, whose
    name timers can mistake for the kernel under test; a missing hold is a status row only)."""
    built, failed = _attempt(build)
    if failed is None:
        return built
    READS.unavailable[(what, str(device))] = failed
    if what == KERNEL:
        warn_once(
            f"sweep:{device}",
            f"the read kernel {READ_KERNEL} could not be built on {device} ({failed}); the read runs as "
            "torch's sum, which timers that pick kernels by name can mistake for the kernel under test",
        )
    return None


def one_line(exc: BaseException) -> str:
    """An exception as status and warnings show it: its type and first line, 200 characters at most."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def _allocate_outside_pools(device: torch.device, numel: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(read buffer, scalar sink), allocated from a thread of their own.

    Inductor's CUDA-graph trees route every allocation of the *calling thread* into a graph's
    private memory pool while they warm up or record, and autotuning can run right then (the
    first flush of a max-autotune run).  A buffer of ours in that pool is "not tracked as an
    output" and fails the user's compiled function; a fresh thread allocates from the normal
    pool.  The thread waits for the fill to finish, so the calling stream can use it at once.
    """
    import torch

    made: list[tuple[torch.Tensor, torch.Tensor] | BaseException] = []

    def allocate() -> None:
        try:
            buffer = torch.zeros(numel, dtype=torch.float32, device=device)
            sink = torch.zeros((), dtype=torch.float32, device=device)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            made.append((buffer, sink))
        except BaseException as exc:  # handed to the calling thread, which raises it there
            made.append(exc)

    thread = threading.Thread(target=allocate, name="cleanflush-prepare", daemon=True)
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]


def write_read_kernel(entry: ReadBuffer) -> WriteRead:
    """The one-kernel write-read of ``entry``'s CUDA device, built (compiled and checked) on
    first use; raises ReadUnavailable where it cannot be (no triton, a wrong result), every time."""
    with READS.lock:
        if entry.write_read is None:
            built, failed = _attempt(lambda: _write_read_of(entry))
            entry.write_read = built if failed is None else failed
    kernel = entry.write_read
    if kernel is None or isinstance(kernel, str):
        raise ReadUnavailable(kernel or "the one-kernel write-read was not built")
    return kernel


def _write_read_of(entry: ReadBuffer) -> WriteRead:
    from . import _sweep

    return _sweep.build_write_read(entry.buffer, entry.sink, _sweep.programs_for(entry.buffer.device))


def release() -> None:
    """Drop the read buffers (uninstall calls this): the memory goes back to the caller once
    every device that used it has finished with it.  A buffer a CUDA graph captured is kept."""
    with READS.lock:
        used = [device for device in READS.buffers if device.type == "cuda"]
        if used:
            import torch

            for device in used:  # no flush still reading a buffer we let go, on any device
                torch.cuda.synchronize(device)
        READS.kept += [entry for entry in READS.buffers.values() if entry.captured]
        READS.buffers.clear()


def status_rows() -> list[TargetStatus]:
    """One row per device where the read, its kernel or its hold could not be made."""
    detail = {
        BUFFER: "{reason}: every flush on {device} runs the stock write",
        KERNEL: "the read kernel could not be built ({reason}): the read runs as torch's sum, after the whole "
        "stock write",
        HOLD: "the hold could not be built ({reason}): write-read writes the whole cache, and reads last as long "
        "as their bytes, also where the GPU has caught up with the host",
    }
    return [
        TargetStatus("cleanflush", f"{what} on {device}", None, "failed", detail[what].format(reason=r, device=device))
        for (what, device), r in sorted(READS.unavailable.items())
    ]


@on_reset
def _forget_failures() -> None:
    READS.unavailable.clear()


def _after_fork_in_child() -> None:
    # The parent's buffers are CUDA memory the child cannot use, and their handshake is pinned
    # host memory the child does not have (touching it would crash, not raise); another thread
    # may have held the lock at the fork.
    READS.buffers, READS.kept, READS.lock = {}, [], threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
