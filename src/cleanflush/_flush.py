"""The flush itself: the one place that decides what runs between two timed calls.

Why a read: a write (``zero_``) leaves L2 full of dirty lines, and the timed kernel pays
for writing them back to HBM.  Reading a region that is disjoint from those lines and at
least 2 x L2 evicts them before the timer starts and leaves only clean lines behind.

Rules the code below keeps (measured on an H200, docs/policies.md):

* The read sums a float32 buffer of our own.  Summing the int32 flush buffer would widen
  it to int64 through a temporary that dirties L2 again, and re-reading the lines just
  zeroed keeps them dirty.  On CUDA the sum is a kernel named ``cleanflush_l2_sweep``
  (``_sweep``), so that timers which pick kernels by name never take it for the kernel
  under test; torch's sum where that kernel cannot be built, and on CPU.
* Where cleanflush owns the write (Triton's ``clear_cache``, the cache tensors it hands
  out) and the read can hold the stream, write-read writes only the cache's first
  ``owned_write_bytes``: a larger write leaves the next large memory-bound kernel a few
  percent slower however much is read after it, and a small one does not
  (benchmarks/residual.py).  Everywhere else write plus read cover at least the bytes of
  Triton's stock 256 MiB ``zero_``, so the GPU stays busy while the host queues the start
  event and the timed call; a shorter flush lets launch latency into the timing.  Where the
  GPU has caught up with the host (it has started the last read, or the stream is empty),
  the read holds the stream until the host's next read call, at most twice the host's
  time between its last flush and this one, never over ``HOLD_NS`` (``caught_up``, ``Calls``).
* Cheap on the host: in a loop on a fast GPU the host's time per flush is what the loop
  waits for, so the views a flush takes are made once per cache (``Views``).
* Capture-safe: one allocation per device, made before any capture where we can (see
  ``prepare``); each flush is at most two views and one reduction into a preallocated scalar.
  No device sync, nothing copied back: the host asks two int64 of pinned memory that the
  kernel writes through.
* Never breaks a benchmark: on any surprise the stock write runs, a warning is given once,
  and the flush is counted as the write it was.
* Works on CPU tensors as well, so CI can check the exact sequence of tensor operations.
"""

from __future__ import annotations

import ctypes
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from ._policy import current_policy
from ._state import STATE, count_flush, warn_once

if TYPE_CHECKING:
    import torch

T = TypeVar("T")

MiB = 1 << 20
READ_KERNEL = "cleanflush_l2_sweep"  # the read's kernel name on CUDA (_sweep), for name filters
STOCK_FLUSH_BYTES = 256 * MiB  # Triton's zero_ buffer: the GPU-busy time a flush must keep
# How long a read lasts at most when it holds the stream for its host (``caught_up``: the GPU
# has caught up with the host, so the host queues the start event and the timed call while
# the GPU runs only the flush).  It lets go at the host's next read call, which comes after
# the timed call; this bound is what a benchmark that synchronizes before each flush waits,
# and what a host slower than that still leaks (benchmarks/synced.py).
HOLD_NS = 120_000
# Within that bound a read holds HOLD_PACE times what the host took between its last flush
# and this one (``Calls.hold_ns``): enough to cover the queuing of the timed call that comes
# next, without making the last flush of a loop, after which no call comes, wait out
# HOLD_NS (do_bench sizes its loop from five calls; with that wait it took 6-34% fewer
# samples than under the stock flush: benchmarks/budget.py).
HOLD_PACE = 2
# Where cleanflush owns the write, write-read writes L2 / OWNED_WRITE_SHARE of the cache (see
# ``owned_write_bytes``): the largest share measured to leave the next kernel nothing (a
# quarter of the L2 left +4% at 28672 x 4096 on an H200: benchmarks/residual.py).
OWNED_WRITE_SHARE = 8


class ReadBuffer(NamedTuple):
    """What one device reads with, made once by ``prepare``."""

    buffer: torch.Tensor  # float32, ``buffer_bytes(l2)`` long
    sink: torch.Tensor  # float32 scalar the sum goes to
    l2: int  # L2 bytes, 0 when the device reports none
    sweep: Callable[[torch.Tensor, torch.Tensor, int], None] | None  # the named kernel; None: torch's sum
    held: Callable[[torch.Tensor, torch.Tensor, int, int], None] | None  # the sweep holding the stream
    calls: Calls | None  # the host's side of the kernel's signal; None where there is no kernel
    views: Views  # the views a flush on this device reuses


class Views:
    """The views a flush takes, made once instead of on every call: a flush's host time is
    what a benchmark loop on a fast GPU waits for.  The spans of the read buffer by size,
    and the owned head of the last cache flushed, kept while that cache object lives."""

    MAX_SPANS = 64  # read sizes seen on one device are few; a caller varying them is not kept

    def __init__(self) -> None:
        self._spans: dict[int, torch.Tensor] = {}
        self._cache: weakref.ref[Any] | None = None
        self._head: torch.Tensor | None = None

    def span(self, buffer: torch.Tensor, count: int) -> torch.Tensor:
        """``buffer[:count]``."""
        found = self._spans.get(count)
        if found is None:
            found = buffer[:count]
            if len(self._spans) < self.MAX_SPANS:
                self._spans[count] = found
        return found

    def head(self, cache: Any, count: int) -> torch.Tensor:
        """The first ``count`` elements of the contiguous ``cache``, as a tensor on its storage
        (not a view of the tensor: that would keep the cache object, and so this entry,
        alive once its owner let go of it)."""
        kept = self._head if self._cache is not None and self._cache() is cache else None
        if kept is not None and kept.numel() == count and kept.data_ptr() == cache.data_ptr():
            return kept
        head: torch.Tensor = cache.new_empty(0).set_(cache.untyped_storage(), cache.storage_offset(), (count,))
        self._cache, self._head = weakref.ref(cache, self._forget), head
        return head

    def _forget(self, ref: weakref.ref[Any]) -> None:
        if self._cache is ref:  # the cache is gone: its storage goes with it
            self._cache = self._head = None


class Calls:
    """Where the host and the read kernel are, told each other without a sync: two int64 in
    pinned host memory that the kernel reads and writes over the bus.  [0]: the host's read
    calls on the device so far (the host writes it: a held read lets go once it passes the
    read's own call); [1]: the last call whose read the GPU has started (the kernel writes it).
    And how long the host spends between two flushes, which bounds a hold (``hold_ns``)."""

    def __init__(self, signal: torch.Tensor | None = None, clock: Callable[[], int] = time.perf_counter_ns) -> None:
        import torch

        # pinned by default; any two int64 of host memory will do (tests use plain CPU memory)
        self.signal = torch.zeros(2, dtype=torch.int64, pin_memory=True) if signal is None else signal
        self._slots = (ctypes.c_int64 * 2).from_address(self.signal.data_ptr())
        self._clock = clock
        self._left_ns: int | None = None  # when the host had queued its last read
        self._arrived_ns: int | None = None  # when the host came to its last flush

    def arrived(self) -> None:
        """The host has come to a flush."""
        self._arrived_ns = self._clock()

    def next(self) -> int:
        """Number a new read call, which lets the held read before it go."""
        call: int = self._slots[0] + 1
        self._slots[0] = call
        return call

    def left(self) -> None:
        """The host has queued the read of its last call."""
        self._left_ns = self._clock()

    def caught_up(self) -> bool:
        """Whether the GPU has started the read of the host's last call."""
        return bool(self._slots[1] >= self._slots[0])

    def hold_ns(self) -> int:
        """How long the read of a flush the host has come to may hold the stream:
        ``HOLD_PACE`` times the host's time from queuing the last read to coming to this
        flush (the start event, the timed call, the end event, the loop: what it queues
        after this read too), ``HOLD_NS`` at most and where that time is not known."""
        left, arrived = self._left_ns, self._arrived_ns
        if left is None or arrived is None or arrived <= left:  # no flush come to since the last read
            return HOLD_NS
        return min(HOLD_NS, HOLD_PACE * (arrived - left))


class ReadUnavailable(RuntimeError):
    """The read buffer for a device could not be prepared (said once, not retried)."""


def l2_bytes(device: torch.device) -> int:
    """The device's L2 size in bytes, 0 when the device does not report one (CPU)."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    return 0


def read_bytes(l2: int, written: int, owned: bool = False) -> int:
    """Bytes the read must cover after ``written`` bytes of write: 2 x L2, which evicts every
    dirty line, and after a stock write also the rest of the stock write's bytes, which keep
    the GPU busy while the host queues.  After a write cleanflush shrank (``owned``) the
    read's hold does that instead."""
    return 2 * l2 if owned else max(2 * l2, STOCK_FLUSH_BYTES - written)


def owned_write_bytes(l2: int) -> int:
    """How much of the cache a write-read writes where cleanflush owns the write: one
    ``OWNED_WRITE_SHARE`` of the L2."""
    return l2 // OWNED_WRITE_SHARE


def buffer_bytes(l2: int) -> int:
    """Size of the read buffer: enough for every read ``read_bytes`` can ask for."""
    return read_bytes(l2, 0)


def prepare(device: torch.device) -> ReadBuffer:
    """Allocate (once per device, also under threads) the read buffer; call it outside
    graph capture.  A device whose buffer failed raises ReadUnavailable from then on."""
    entry: ReadBuffer | None = STATE.buffers.get(device)
    if entry is not None:
        return entry
    with STATE.buffer_lock:
        again: ReadBuffer | None = STATE.buffers.get(device)  # another thread made it meanwhile
        if again is not None:
            return again
        if str(device) in STATE.read_unavailable:
            raise ReadUnavailable(STATE.read_unavailable[str(device)])
        import torch

        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # not recorded: the next flush outside capture may still allocate it
            raise ReadUnavailable("the read buffer cannot be allocated during CUDA graph capture")
        try:
            l2 = l2_bytes(device)
            buffer, sink = _allocate_outside_pools(device, buffer_bytes(l2) // 4)
        except Exception as exc:  # out of memory, a device that went away: said once, not retried
            with STATE.lock:
                STATE.read_unavailable[str(device)] = f"the read buffer could not be allocated ({exc})"
            raise ReadUnavailable(STATE.read_unavailable[str(device)]) from exc
        sweep, calls = _build_sweep(buffer, sink)
        held = _build_held(buffer, sink, calls) if calls is not None else None
        entry = STATE.buffers[device] = ReadBuffer(buffer, sink, l2, sweep, held, calls, Views())
        return entry


def _build_sweep(
    buffer: torch.Tensor, sink: torch.Tensor
) -> tuple[Callable[[torch.Tensor, torch.Tensor, int], None] | None, Calls | None]:
    """The named read kernel for a CUDA buffer and its signal; (None, None) (torch's sum) on
    CPU, or, said once and shown by status, where it cannot be built."""
    if buffer.device.type != "cuda":
        return None, None
    try:
        from . import _sweep

        calls = Calls()
        return _sweep.build(buffer, sink, calls.signal, _sweep.programs_for(buffer.device)), calls
    except Exception as exc:  # no triton, no pinned memory, a compiler error, a wrong sum: torch's sum reads instead
        _unbuilt(
            STATE.sweep_unavailable,
            "sweep",
            f"the read kernel {READ_KERNEL}",
            buffer.device,
            exc,
            "the read runs as torch's sum, which timers that pick kernels by name can mistake for the kernel "
            "under test",
        )
        return None, None


def _build_held(
    buffer: torch.Tensor, sink: torch.Tensor, calls: Calls
) -> Callable[[torch.Tensor, torch.Tensor, int, int], None] | None:
    """The read kernel with its hold, on a CUDA buffer; None, said once and shown by status,
    where it cannot be built (reads then last as long as their bytes)."""
    try:
        from . import _sweep

        return _sweep.build_held(buffer, sink, calls.signal, _sweep.programs_for(buffer.device))
    except Exception as exc:  # a compiler error, a GPU without %globaltimer, a signal it cannot see: no hold
        _unbuilt(
            STATE.hold_unavailable,
            "hold",
            "the read kernel's hold",
            buffer.device,
            exc,
            "write-read writes the whole cache, and where the GPU catches up with the host, host time after the "
            "read can show in the timing",
        )
        return None


def _unbuilt(
    unavailable: dict[str, str], key: str, what: str, device: torch.device, exc: Exception, consequence: str
) -> None:
    """A kernel that could not be built on ``device``: why, kept in ``unavailable`` for
    status, and said once."""
    reason = _one_line(exc)
    with STATE.lock:
        unavailable[str(device)] = reason
    warn_once(f"{key}:{device}", f"{what} could not be built on {device} ({reason}); {consequence}")


def _one_line(exc: BaseException) -> str:
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

    made: list[Any] = []

    def allocate() -> None:
        try:
            buffer = torch.zeros(numel, dtype=torch.float32, device=device)
            sink = torch.zeros((), dtype=torch.float32, device=device)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            made.append((buffer, sink))
        except BaseException as exc:  # handed to the caller, who says it once
            made.append(exc)

    thread = threading.Thread(target=allocate, name="cleanflush-prepare", daemon=True)
    thread.start()
    thread.join()
    if isinstance(made[0], BaseException):
        raise made[0]
    buffer, sink = made[0]
    return buffer, sink


def release() -> None:
    """Drop the read buffers (uninstall calls this): the memory goes back to the caller."""
    with STATE.buffer_lock:
        if any(device.type == "cuda" for device in STATE.buffers):
            import torch

            torch.cuda.synchronize()  # no flush still reading a buffer we let go
        STATE.buffers.clear()
        STATE.write_read_kernels.clear()


# What the read sums, given (the cache just written or None, the region cleanflush chose, the
# device's L2 bytes).  The one seam in the flush: ``verify --controls`` breaks the read through
# it the way a bug would (a region too small, the dirty lines themselves, a read that raises).
Region = Callable[[Any, "torch.Tensor", int], "torch.Tensor"]
_region: ContextVar[Region | None] = ContextVar("cleanflush_read_region", default=None)


@contextmanager
def read_region(choose: Region) -> Iterator[None]:
    """Within the block (this context only), every read sums ``choose(cache, region, l2)``."""
    token = _region.set(choose)
    try:
        yield
    finally:
        _region.reset(token)


def read(device: torch.device, nbytes: int, cache: Any = None, hold: bool = False) -> None:
    """Enqueue a float32 sum over ``nbytes`` of the read buffer on ``device``'s current stream:
    one kernel, no allocation, no host sync.  The call lets a held read before it go;
    ``hold``: this one holds the stream until the next call, ``Calls.hold_ns`` at most."""
    import torch

    entry = prepare(device)
    data = _read_data(entry, nbytes, cache)
    calls = entry.calls
    call = calls.next() if calls is not None else 0
    if hold and entry.held is not None:
        entry.held(data, entry.sink, call, HOLD_NS if calls is None else calls.hold_ns())
    elif entry.sweep is not None:
        entry.sweep(data, entry.sink, call)
    else:
        torch.sum(data, dim=0, out=entry.sink)
    if calls is not None:
        calls.left()


def caught_up(device: torch.device) -> bool:
    """Whether the GPU has caught up with this flush's host, so that the host queues the start
    event and the timed call while the GPU runs only the flush: the stream is empty
    (``found_idle``: a benchmark that synchronized), or the GPU has started the last read
    (do_bench on a host slower per call than the GPU: at most the last timed call is still
    queued).  False on CPU and during graph capture.  The pinned mark is asked first: where it
    answers, no stream query and one capture query, on the host's way to the timed call.
    Every flush asks this first, so it also notes that the host has come to one (``Calls``)."""
    entry: ReadBuffer | None = STATE.buffers.get(device)
    calls = entry.calls if entry is not None else None
    if calls is None:
        return found_idle(device)
    calls.arrived()
    if not calls.caught_up():
        return found_idle(device)
    import torch

    try:
        return not torch.cuda.is_current_stream_capturing()  # a captured call number is stale at replay
    except Exception:  # a device that went away: the flush as it was
        return False


def found_idle(device: torch.device) -> bool:
    """Whether ``device``'s current stream has nothing queued: the benchmark synchronized
    before this flush, so its host queues the start event and the timed call only after the
    flush, while the GPU runs nothing else.  False on CPU and during graph capture."""
    if device.type != "cuda":
        return False
    import torch

    try:
        if torch.cuda.is_current_stream_capturing():
            return False
        return bool(torch.cuda.current_stream(device).query())
    except Exception:  # a device that went away: the flush as it was
        return False


def _read_data(entry: ReadBuffer, nbytes: int, cache: Any) -> torch.Tensor:
    """The float32 elements a read of ``nbytes`` sums (through ``read_region`` where one is set)."""
    count = nbytes // 4
    data = entry.views.span(entry.buffer, count)
    choose = _region.get()
    return data if choose is None else choose(cache, data, entry.l2)


def _read_after(
    device: torch.device,
    written: int | None,
    label: str,
    cache: Any = None,
    hold: bool = False,
    owned: bool = False,
) -> bool:
    """The clean read after ``written`` bytes of write (``None``: one L2 of it; ``owned``: a
    write cleanflush shrank); False, with one warning, when it could not run."""
    try:
        l2 = prepare(device).l2
        read(device, read_bytes(l2, l2 if written is None else written, owned), cache, hold)
        return True
    except Exception as exc:  # the read must never break the benchmark: the stock write stands in
        _said(
            label,
            f"the clean read could not run on {device} ({exc})",
            f"the clean read could not run in {label} on {device} ({exc}); these flushes fall back to the stock write",
            key=f"read:{label}:{device}",
        )
        return False


def _said(label: str, why: str, message: str, key: str) -> None:
    """A fallback, said once and kept for ``cleanflush status``."""
    warn_once(key, message)
    with STATE.lock:
        STATE.fallbacks.setdefault(label, why)


def fall_back(label: str, why: str, stock: Callable[[], T], counted: bool = True) -> T:
    """The stock code after a surprise: said once, shown by ``cleanflush status``, and counted
    under ``label`` as the write it was (``counted=False`` where ``stock`` is a whole
    benchmark, not one flush)."""
    _said(label, why, f"{label}: {why}; its stock flush runs", key=f"stock:{label}:{why}")
    result = stock()
    if counted:
        count_flush(label, "write")
    return result


def flush(
    cache: Any, write: Callable[[], Any], label: str, write_head: Callable[[torch.Tensor], Any] | None = None
) -> Any:
    """Flush L2 before a timed call under the active policy; return what ``write`` returns.

    ``write`` is the benchmarker's own stock flush (it writes ``cache``); ``label`` names
    the patched site in the counters.  ``write_head(head)``, where cleanflush owns the
    write: the same write on a view of the cache's first bytes (see ``owned_head``).
    """
    try:
        device = cache.device
        written = cache.numel() * cache.element_size()
    except AttributeError as exc:  # not a tensor: nothing to read next to
        return fall_back(label, f"it flushed an unexpected cache object ({exc})", write)
    return around(write, device, written, label, cache, write_head)


def around(
    write: Callable[[], Any],
    device: torch.device,
    written: int,
    label: str,
    cache: Any = None,
    write_head: Callable[[torch.Tensor], Any] | None = None,
) -> Any:
    """The active policy around a stock write of ``written`` bytes on ``device``, for
    benchmarkers that call their write as a function we can run or skip (``write_head``:
    see ``flush``)."""
    policy = current_policy()
    if policy == "write":
        result = write()
        count_flush(label, "write")
        return result
    hold = caught_up(device)  # before the write, which fills the stream
    head = owned_head(cache, device) if policy == "write-read" and write_head is not None else None
    if head is not None and write_head is not None:
        result = write_head(head)
        written = head.numel() * head.element_size()
    else:
        result = write() if policy == "write-read" else None
    if _read_after(device, written if policy == "write-read" else 0, label, cache, hold, owned=head is not None):
        count_flush(label, policy)
        return result
    if policy == "read" or head is not None:
        result = write()  # no read after no write, or after its head, would leave L2 unflushed: the stock write
    count_flush(label, "write")
    return result


def owned_head(cache: Any, device: torch.device, needs_hold: bool = True) -> torch.Tensor | None:
    """The part of ``cache`` a write-read writes where cleanflush owns the write: its first
    ``owned_write_bytes``, as a tensor on its storage (``Views.head``).  None (the whole stock
    write) where the read cannot hold the stream (``needs_hold``: then only the stock write's
    bytes keep the GPU busy while the host queues), where a read region is chosen
    (``verify --controls`` breaks the read after the whole stock write, where a broken read
    does the most harm), or where the cache is not one contiguous tensor larger than that."""
    if cache is None or _region.get() is not None:
        return None
    try:
        entry = prepare(device)
        if (needs_hold and entry.held is None) or not cache.is_contiguous():
            return None
        count = owned_write_bytes(entry.l2) // cache.element_size()
        if not 0 < count < cache.numel():
            return None
        head = entry.views.head(cache, count)
    except Exception:  # a read that cannot run says so itself, after the stock write
        return None
    return head


def after_write(device: torch.device, written: int | None, label: str) -> None:
    """The read half alone, for benchmarkers whose stock write is inline in their code.

    ``written`` is the size of that write, ``None`` for one L2.  The write cannot be
    skipped, so the ``read`` policy runs as ``write-read`` here and is counted so.
    """
    if current_policy() == "write" or not _read_after(device, written, label, hold=caught_up(device)):
        count_flush(label, "write")
    else:
        count_flush(label, "write-read")


def flushing_tensor(cache: torch.Tensor, target: str, write: str = "zero_", one_kernel: bool = False) -> torch.Tensor:
    """``cache`` as a tensor whose ``write()`` (``zero_`` unless named: ThunderKittens
    flushes with ``random_``) is the flush, for harnesses that write their cache tensor inline
    (triton 3.0-3.2's do_bench, tritonbench, Helion's pretuned timers, TileLang, FlashInfer):
    same storage, counted under ``target``.  ``one_kernel``: write-read as the one kernel of
    ``write_read`` (a zeroing cache only).  After ``uninstall()`` a tensor already handed out
    writes stock."""
    key = (target, write, one_kernel)
    cls = STATE.tensor_classes.get(key)
    if cls is None:
        import torch

        def flushing_write(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            plain = self.as_subclass(torch.Tensor)
            stock = getattr(plain, write)
            if not STATE.installed:
                stock(*args, **kwargs)
            elif one_kernel and not args and not kwargs:
                write_read(plain, target)
            else:
                flush(
                    plain,
                    lambda: stock(*args, **kwargs),
                    target,
                    lambda head: getattr(head, write)(*args, **kwargs),
                )
            return self

        # no __torch_function__: every other op sees, and returns, a plain tensor
        cls = STATE.tensor_classes.setdefault(
            key,
            type(
                "CleanFlushCache",
                (torch.Tensor,),
                {
                    "__torch_function__": torch._C._disabled_torch_function_impl,
                    write: flushing_write,
                    "__module__": __name__,
                    "target": target,
                    "_cleanflush_flushing": True,
                },
            ),
        )
    flushing: torch.Tensor = plain_tensor(cache).as_subclass(cls)
    return flushing


def write_read(cache: torch.Tensor, label: str) -> None:
    """``cache.zero_()`` under the active policy, write-read as one kernel (``_sweep``'s
    ``cleanflush_l2_write_read``: the zeros, then the read), for timers that subtract the
    device span of a range around the flush (TileLang's CUPTI timer): two kernels leave the
    gap between them in that span, and the timer takes it off the kernel under test.  Where
    that kernel cannot run, the two kernels of ``flush``, said once."""
    if current_policy() != "write-read" or cache.device.type != "cuda":  # no device timeline to see a gap on
        flush(cache, cache.zero_, label)
        return
    import torch

    try:
        kernel = write_read_kernel(cache.device)
        # a CUPTI timer takes the kernel's own time: no host time to cover, no hold needed
        head = owned_head(cache, cache.device, needs_hold=False)
        words = cache if head is None else head
        written = words.numel() * words.element_size()
        if not words.is_contiguous() or written % 4:
            raise ReadUnavailable("its cache is not a contiguous whole number of 4-byte words")
        entry = prepare(cache.device)
        data = _read_data(entry, read_bytes(entry.l2, written, owned=head is not None), cache)
        kernel(words.view(-1).view(torch.int32), data, entry.sink)
    except Exception as exc:  # the two kernels of flush() do the same work, with a gap the timer sees
        reason = _one_line(exc)
        _said(
            label,
            f"write-read runs as two kernels ({reason})",
            f"{label}: write-read could not run as one kernel on {cache.device} ({reason}); it runs as "
            "two, and a timer that subtracts the flush's range takes the gap between them off the kernel's time",
            key=f"write-read:{label}:{cache.device}",
        )
        flush(cache, cache.zero_, label)
        return
    count_flush(label, "write-read")


def write_read_kernel(device: torch.device) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]:
    """The one-kernel write-read for CUDA ``device``, built (compiled and checked) on first
    use; raises ReadUnavailable where it cannot be (no triton, a wrong result), every time."""
    entry = prepare(device)
    with STATE.buffer_lock:
        if device not in STATE.write_read_kernels:
            try:
                from . import _sweep

                built: Any = _sweep.build_write_read(entry.buffer, entry.sink, _sweep.programs_for(device))
            except Exception as exc:  # no triton, a compiler error, a wrong result
                built = _one_line(exc)
            STATE.write_read_kernels[device] = built
        kernel = STATE.write_read_kernels[device]
    if isinstance(kernel, str):
        raise ReadUnavailable(kernel)
    return kernel  # type: ignore[no-any-return]


def plain_tensor(cache: Any) -> Any:
    """The plain tensor behind a flushing one (anything else as it is)."""
    if vars(type(cache)).get("_cleanflush_flushing", False):
        import torch

        return cache.as_subclass(torch.Tensor)
    return cache
