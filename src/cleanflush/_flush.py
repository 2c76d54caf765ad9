"""The flush itself: the one place that decides what runs between two timed calls.

Why a read: a write (``zero_``) leaves L2 full of dirty lines, and the timed kernel pays
for writing them back to HBM.  Reading a region that is disjoint from those lines and at
least 2 x L2 evicts them before the timer starts and leaves only clean lines behind.

Rules the code below keeps (measured on an H200, see README):

* The read sums a float32 buffer of our own.  Summing the int32 flush buffer would widen
  it to int64 through a temporary that dirties L2 again, and re-reading the lines just
  zeroed keeps them dirty.
* Write plus read cover at least the bytes of Triton's stock 256 MiB ``zero_``, so the GPU
  stays busy while the host queues the start event and the timed call; a shorter flush
  lets launch latency into the timing.
* Capture-safe: one allocation per device, made before any capture where we can (see
  ``prepare``); each flush is two views and one reduction into a preallocated scalar.
  No host sync, no host read.
* Works on CPU tensors as well, so CI can check the exact sequence of tensor operations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from ._policy import current_policy
from ._state import count_flush, warn_once

if TYPE_CHECKING:
    import torch

MiB = 1 << 20
STOCK_FLUSH_BYTES = 256 * MiB  # Triton's zero_ buffer: the GPU-busy time a flush must keep

# device -> (float32 read buffer, float32 scalar sink, L2 bytes or 0 when unknown)
_buffers: dict[Any, tuple[torch.Tensor, torch.Tensor, int]] = {}


def l2_bytes(device: torch.device) -> int:
    """The device's L2 size in bytes, 0 when the device does not report one (CPU)."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    return 0


def read_bytes(l2: int, written: int) -> int:
    """Bytes the read must cover after ``written`` bytes of stock write."""
    return max(2 * l2, STOCK_FLUSH_BYTES - written)


def prepare(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Allocate (once) the read buffer for ``device``; call it outside graph capture."""
    entry = _buffers.get(device)
    if entry is None:
        import torch

        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            raise RuntimeError("the read buffer cannot be allocated during CUDA graph capture")
        l2 = l2_bytes(device)
        size = max(2 * l2, STOCK_FLUSH_BYTES) // 4
        entry = (
            torch.zeros(size, dtype=torch.float32, device=device),
            torch.zeros((), dtype=torch.float32, device=device),
            l2,
        )
        _buffers[device] = entry
    return entry


def read(device: torch.device, written: int | None = 0) -> None:
    """Enqueue the clean read on ``device``'s current stream, after ``written`` bytes of
    stock write (``None``: one L2 of it)."""
    import torch

    buffer, sink, l2 = prepare(device)
    torch.sum(buffer[: read_bytes(l2, l2 if written is None else written) // 4], dim=0, out=sink)


def _read_or_warn(device: torch.device, written: int | None, target: str) -> bool:
    try:
        read(device, written)
        return True
    except Exception as exc:
        warn_once(f"read:{target}", f"the clean read failed in {target} ({exc}); "
                  "this flush falls back to the stock write")
        return False


def flush(cache: torch.Tensor, write: Callable[[], Any], target: str) -> None:
    """Flush L2 before a timed call under the active policy.

    ``write`` is the benchmarker's own stock flush (it writes ``cache``); ``target`` names
    the patched site in status and counters.
    """
    policy = current_policy()
    count_flush(target, policy)
    written = 0
    if policy != "read":
        write()
        written = cache.numel() * cache.element_size()
    if policy == "write":
        return
    if not _read_or_warn(cache.device, written, target) and policy == "read":
        write()  # neither read nor write would leave L2 unflushed: do the stock write


def after_write(device: torch.device, written: int | None, target: str) -> None:
    """The read half alone, for benchmarkers whose stock write is inline in their code.

    ``written`` is the size of that write, ``None`` for one L2.  The write cannot be
    skipped, so the ``read`` policy runs as ``write-read`` here and is counted so.
    """
    policy = current_policy()
    count_flush(target, "write" if policy == "write" else "write-read")
    if policy != "write":
        _read_or_warn(device, written, target)
