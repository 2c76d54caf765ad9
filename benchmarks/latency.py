"""Launch latency: is each flush long enough to hide the host's enqueue of the timed call?

An event loop like do_bench's (flush through Triton's ``clear_cache``, start event, call, end
event), for a cuBLAS GEMM and for a Triton kernel launched from Python.  Each flush is timed
twice: as it is, and with the GPU held busy after it (``torch.cuda._sleep``, ~100 us, which
touches no memory) so that the host has queued the start event and the call long before
the GPU reaches them.  The difference is launch latency leaking into the timed region.

Flushes: stock (cleanflush uninstalled), each policy, and two controls that are not
policies: a read of 2 x L2 alone (short: the first fix tried) and the stock
flush followed by a host synchronize (the GPU idles while the host enqueues).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import (
    WHOLE_WRITE,
    Results,
    central_mean,
    flush_time_us,
    flushing,
    progress,
    quartiles,
    read_alone,
    spin_cycles_per_us,
)

ROUNDS = 3
ITERS = 300
BUSY_US = 300


def run(out: Path, rounds: int = ROUNDS) -> Path:
    import torch
    import triton

    import cleanflush
    from cleanflush import _measure, _read

    from .int8_gemv import Layer

    device = torch.device("cuda", torch.cuda.current_device())
    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    gemm, _, _ = _measure.one_row_gemm(4096, 4096, device=device)
    layer = Layer(4096, 4096, device)
    kernels: dict[str, Callable[[], Any]] = {
        "cuBLAS BF16 GEMM 4096x4096": gemm,
        "Triton INT8 GEMV 4096x4096 (BN16 BK512 w8)": layer.call({"BLOCK_N": 16, "BLOCK_K": 512, "num_warps": 8}),
    }
    l2 = _read.l2_bytes(device)
    _read.prepare(device)

    def clear_cache() -> None:
        driver.clear_cache(cache)

    def stock_then_sync() -> None:
        cache.zero_()
        torch.cuda.synchronize()

    # name -> (context the loop runs in, flush); the stock rows run with cleanflush uninstalled
    flushes: dict[str, tuple[Callable[[], Any], Callable[[], None]]] = {
        name: (functools.partial(flushing, name), clear_cache) for name in ("stock", *cleanflush.POLICIES, WHOLE_WRITE)
    }
    flushes["control: read 2 x L2 only"] = (contextlib.nullcontext, lambda: read_alone(device, 2 * l2))
    flushes["control: stock, then synchronize"] = (contextlib.nullcontext, stock_then_sync)

    # cycles for BUSY_US at the clock the GPU runs at (torch.cuda._sleep spins on clock64)
    _measure.warm_up(gemm, 1.5)
    busy_cycles = int(spin_cycles_per_us() * BUSY_US)
    for fn in kernels.values():
        fn()
    for context, flush in flushes.values():
        with context():
            flush()
    torch.cuda.synchronize()

    results = Results(out, "latency")
    for r in range(rounds):
        progress(f"latency: round {r + 1}/{rounds}")
        for kname, fn in kernels.items():
            for fname, (context, flush) in flushes.items():
                with context():
                    flush_us = flush_time_us(flush, 20)  # the sync control's syncs count: they are its cost
                    host_us = _host_iteration(torch, flush, fn)
                    plain = _loop(flush, fn, None)
                    busy = _loop(flush, fn, busy_cycles)
                results.add(
                    kernel=kname,
                    flush=fname,
                    round=r,
                    flush_us=flush_us,
                    host_iteration_us=host_us,
                    timed_us=plain,
                    timed_busy_us=busy,
                    leak_us=plain - busy,
                )
    summary: dict[str, dict[str, float]] = {}
    for row in results.rows:
        key = f"{row['kernel']} | {row['flush']}"
        if key not in summary:
            mine = [x for x in results.rows if (x["kernel"], x["flush"]) == (row["kernel"], row["flush"])]
            summary[key] = {
                f: quartiles(x[f] for x in mine)[1]
                for f in ("flush_us", "host_iteration_us", "timed_us", "timed_busy_us", "leak_us")
            }
            summary[key]["leak_us_max"] = max(x["leak_us"] for x in mine)
            s = summary[key]
            progress(
                f"  {key:70s} flush {s['flush_us']:6.1f}  host/iter {s['host_iteration_us']:5.1f}  "
                f"timed {s['timed_us']:6.2f}  busy {s['timed_busy_us']:6.2f}  "
                f"leak {s['leak_us']:+.2f} (max {s['leak_us_max']:+.2f})"
            )
    return results.write(rounds=rounds, iters=ITERS, busy_us=BUSY_US, busy_cycles=busy_cycles, summary=summary)


def _host_iteration(torch: Any, flush: Callable[[], None], fn: Callable[[], Any], count: int = 8) -> float:
    """Host time (us) to enqueue one whole iteration (flush, start, call, end), from a burst
    short enough that the launch queue never fills and holds the host back."""
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(count)]
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for s, e in pairs:
        flush()
        s.record()
        fn()
        e.record()
    host = time.perf_counter() - t0
    torch.cuda.synchronize()
    return host / count * 1e6


def _loop(flush: Callable[[], None], fn: Callable[[], Any], busy_cycles: int | None) -> float:
    """Central mean (us) of the timed region over ITERS iterations, the GPU held busy for
    ``busy_cycles`` after each flush when given."""
    import torch

    from cleanflush import _measure

    between = (lambda: torch.cuda._sleep(busy_cycles)) if busy_cycles else None
    return central_mean(_measure.timed_loop(flush, fn, ITERS, between))
