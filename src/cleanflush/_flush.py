"""The flush: what runs between two timed calls, and the one way into it, ``flush``.

Why a read: a write (``zero_``) leaves L2 full of dirty lines, and the timed kernel pays for
writing them back to HBM.  Reading a region that is disjoint from those lines and at least
2 x L2 evicts them before the timer starts and leaves only clean lines behind.

Every patch hands ``flush`` the harness's stock write (or says the harness writes inline and
has written), and ``flush`` runs the active policy around it:

* ``write``: the stock write alone.
* ``write-read``: the write, then the read (``_read``).  Where cleanflush owns the write
  (Triton's ``clear_cache``, the cache tensors it hands out) and the read can hold the stream
  (``_hold``), only the cache's first ``owned_write_bytes`` are written: a larger write leaves
  the next large memory-bound kernel a few percent slower however much is read after it
  (benchmarks/residual.py).  Elsewhere write and read together cover at least the bytes of
  Triton's stock 256 MiB write, so the GPU stays busy while the host queues the start event
  and the timed call.
* ``read``: the read alone, of the stock write's bytes.  A write inline in the harness cannot
  be skipped: there ``read`` runs, and is counted, as ``write-read``.

Under a policy that reads, the flush first asks ``_persist`` to give back any part of L2 set
aside for persisting lines, which no write or read evicts (``_persist`` says when and how).

Rules it keeps (docs/policies.md): the read sums a float32 buffer of our own (summing the
int32 flush buffer would widen it to int64 through a temporary that dirties L2 again);
capture-safe (after ``prepare``, a flush allocates nothing, syncs nothing, copies nothing
back); cheap on the host (in a loop on a fast GPU the host's time per flush is what the loop
waits for, so views are made once per cache); never breaks a benchmark: on any surprise the
stock write runs, is said once, shown by ``cleanflush status`` and counted as the write it
was.  Works on CPU tensors too, so CI checks the exact sequence of tensor operations.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import _hold, _persist, _policies, _read, _seam
from ._policy import current_policy
from ._state import TargetStatus, count_flush, on_reset, warn_once

if TYPE_CHECKING:
    import torch

# Where cleanflush owns the write, write-read writes L2 / OWNED_WRITE_SHARE of the cache: the
# largest share measured to leave the next kernel nothing (benchmarks/residual.py).
OWNED_WRITE_SHARE = 8

# label -> why its flushes ran the stock code after a surprise (said once, shown by status)
FALLBACKS: dict[str, str] = {}
_fallbacks_lock = threading.Lock()


def owned_write_bytes(l2: int) -> int:
    """How much of the cache a write-read writes where cleanflush owns the write."""
    return l2 // OWNED_WRITE_SHARE


def flush(
    label: str,
    *,
    write: Callable[[], Any] | None = None,
    cache: Any = None,
    device: torch.device | None = None,
    written: int | None = None,
    write_part: Callable[[torch.Tensor], Any] | None = None,
    one_kernel: bool = False,
) -> Any:
    """Flush L2 before a timed call under the active policy; return what ``write`` returns
    (None where it did not run).

    ``label``: the site, as counters and status name it.  ``write``: the harness's stock
    write; None where the harness writes inline and has written.  ``cache``: the tensor it
    writes (device and bytes are its own); else ``device`` and ``written`` (None: one L2).
    ``write_part(head)``: the same write on the cache's first bytes, where cleanflush owns
    the write.  ``one_kernel``: write-read as one kernel, for timers that subtract a range
    around the flush (TileLang's CUPTI timer: two kernels leave a gap in it).
    """
    policy = _policies.get(current_policy())
    if not policy.reads:
        return _counted(label, policy, write)
    if cache is not None:
        found = _size_of(cache)
        if isinstance(found, str):
            return fall_back(label, f"it flushed {found}", write or _nothing)
        device, written = found
    if device is None:
        return fall_back(label, "it flushed with no device to read on", write or _nothing)
    try:
        entry = _read.prepare(device)
        capturing = _hold.capturing(device)
        _persist.before_flush(device, capturing)  # before the write: persisting lines must be evictable
        if one_kernel and policy.writes and _one_kernel(label, entry, cache, capturing):
            return None
        hold = _hold.hold_ns(device, entry.handshake, capturing)  # before the write, which fills the stream
        head = _owned_head(entry, cache) if policy.shrinks_owned_write and write_part is not None else None
    except Exception as exc:  # our own preparation must never break the benchmark: the stock write
        return _without_read(label, device, exc, write)
    result, written = _write(policy, write, write_part, head, written)
    try:
        entry.read(_region(entry, entry.read_bytes(written), cache), hold, capturing)
    except Exception as exc:  # the read must never break the benchmark: the stock write stands in
        whole = policy.writes and head is None and write is not None  # the stock write ran whole
        return _without_read(label, device, exc, None if whole else write, result)
    # a write inline in the harness has run whatever the policy: what ran is a write-read
    count_flush(label, policy.name if write is not None else _policies.WRITE_READ.name)
    return result


def _write(
    policy: _policies.Policy,
    write: Callable[[], Any] | None,
    write_part: Callable[[torch.Tensor], Any] | None,
    head: torch.Tensor | None,
    written: int | None,
) -> tuple[Any, int | None]:
    """The write before the read, as ``policy`` says: (what it returned, the bytes written)."""
    if head is not None and write_part is not None:
        return write_part(head), head.numel() * head.element_size()
    if policy.writes or write is None:  # an inline write has run: the read follows it
        return (write() if write is not None else None), written
    return None, 0  # nothing written


def prepare(device: torch.device, one_kernel: bool = False) -> str | None:
    """Make what flushes on ``device`` read with now, before any CUDA-graph capture or timed
    loop (patches call it where the harness makes its cache).  Returns why the read cannot
    run there as the named kernel ``_read.READ_KERNEL``, or None."""
    if device.type == "cuda" and _policies.get(current_policy()).reads and not _hold.capturing(device):
        _persist.before_flush(device, capturing=False, fresh=True)  # a reset's drain here, before the harness's loop
    try:
        entry = _read.prepare(device)
    except _read.ReadUnavailable as exc:  # the flush that cannot read says so, once
        return f"no read buffer ({exc})"
    if one_kernel and device.type == "cuda":
        try:
            _read.write_read_kernel(entry)
        except _read.ReadUnavailable:  # the flush that cannot use it says so, once
            pass
    if device.type == "cuda" and entry.sweep is None:
        return (
            f"the read kernel {_read.READ_KERNEL} is unavailable, and torch's sum, which reads instead, "
            "would be picked by kernel-name filters"
        )
    return None


def _nothing() -> None:
    """The stock write of a harness that writes inline: it has run already."""


def _counted(label: str, policy: _policies.Policy, write: Callable[[], Any] | None) -> Any:
    """A flush that does not read: the write where the policy writes; a write inline in the
    harness (``write`` None) has run whatever the policy, and counts as the write it was."""
    result = write() if write is not None and policy.writes else None
    count_flush(label, policy.name if write is not None else _policies.WRITE.name)
    return result


def _size_of(cache: Any) -> tuple[torch.device, int] | str:
    """(device, bytes) of a cache tensor, or what it is instead."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(cache, torch.Tensor):
        return f"a {type(cache).__name__}, not a tensor"
    return cache.device, cache.numel() * cache.element_size()


def _owned_head(entry: _read.ReadBuffer, cache: Any, needs_hold: bool = True) -> torch.Tensor | None:
    """The part of ``cache`` a write-read writes where cleanflush owns the write: its first
    ``owned_write_bytes``.  None (the whole stock write) where the read cannot hold the stream
    (``needs_hold``: then only the stock write's bytes keep the GPU busy while the host
    queues), where verify's seam chooses the read region, or where the cache has no such head."""
    if cache is None or _seam.chosen() is not None or (needs_hold and not entry.can_hold):
        return None
    return entry.owned_head(cache, owned_write_bytes(entry.l2))


def _region(entry: _read.ReadBuffer, nbytes: int, cache: Any) -> torch.Tensor:
    """The float32 elements a read of ``nbytes`` sums (what verify's seam says, where it is set)."""
    data = entry.region(nbytes)
    choose = _seam.chosen()
    return data if choose is None else choose(cache, data, entry.l2)


def _one_kernel(label: str, entry: _read.ReadBuffer, cache: Any, capturing: bool) -> bool:
    """Write-read of a zeroing CUDA ``cache`` as the one kernel ``_read.write_read_kernel``;
    False (said once) where it cannot run: the flush then runs as two kernels."""
    if cache is None or cache.device.type != "cuda":
        return False  # no device timeline to see a gap on
    import torch

    try:
        kernel = _read.write_read_kernel(entry)
        entry.captured |= capturing
        # a CUPTI timer takes the kernel's own time: no host time to cover, no hold needed
        head = _owned_head(entry, cache, needs_hold=False)
        words = cache if head is None else head
        written = words.numel() * words.element_size()
        if not words.is_contiguous() or written % 4:
            raise _read.ReadUnavailable("its cache is not a contiguous whole number of 4-byte words")
        # after the head alone, 2 x L2 (a CUPTI timer has no host time to cover); after the
        # whole cache, the read tops up to the stock write's bytes as it does without a hold
        data = _region(entry, _read.read_bytes(entry.l2, written, held=head is not None), cache)
        kernel(words.view(-1).view(torch.int32), data, entry.sink)
    except Exception as exc:  # the two kernels of a flush do the same work, with a gap the timer sees
        reason = _read.one_line(exc)
        _said(
            label,
            f"write-read runs as two kernels ({reason})",
            f"{label}: write-read could not run as one kernel on {cache.device} ({reason}); it runs as "
            "two, and a timer that subtracts the flush's range takes the gap between them off the kernel's time",
            key=f"write-read:{label}:{cache.device}",
        )
        return False
    count_flush(label, _policies.WRITE_READ.name)
    return True


def _without_read(
    label: str, device: torch.device, exc: Exception, write: Callable[[], Any] | None, result: Any = None
) -> Any:
    """After a read that could not run: ``write`` (the stock write, where it has not run
    whole), said once and counted as the write it was."""
    _said(
        label,
        f"the clean read could not run on {device} ({exc})",
        f"the clean read could not run in {label} on {device} ({exc}); these flushes fall back to the stock write",
        key=f"read:{label}:{device}",
    )
    if write is not None:
        result = write()
    count_flush(label, _policies.WRITE.name)
    return result


def _said(label: str, why: str, message: str, key: str) -> None:
    """A fallback, said once and kept for ``cleanflush status``."""
    warn_once(key, message)
    with _fallbacks_lock:
        FALLBACKS.setdefault(label, why)


def fall_back(label: str, why: str, stock: Callable[[], Any], counted: bool = True) -> Any:
    """The stock code after a surprise: said once per ``label`` (its first reason is what
    ``cleanflush status`` shows), and counted as the write it was (``counted=False`` where
    ``stock`` is a whole benchmark, not one flush)."""
    _said(label, why, f"{label}: {why}; its stock flush runs", key=f"stock:{label}")
    result = stock()
    if counted:
        count_flush(label, _policies.WRITE.name)
    return result


def release() -> None:
    """Drop the read buffers, and give back the persisting L2 a reset took (uninstall calls this)."""
    _read.release()
    _persist.release()


def status_rows() -> list[TargetStatus]:
    """Rows for the flush itself: devices whose read could not be made, flushes that fell back."""
    with _fallbacks_lock:
        fallbacks = sorted(FALLBACKS.items())
    flushes = [
        TargetStatus("cleanflush", f"flushes in {label}", None, "failed", f"{why}: those flushes ran the stock code")
        for label, why in fallbacks
    ]
    return _read.status_rows() + _persist.status_rows() + flushes


@on_reset
def _forget_fallbacks() -> None:
    with _fallbacks_lock:
        FALLBACKS.clear()
