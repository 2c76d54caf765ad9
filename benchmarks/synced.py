"""Study: the hold against the simpler design, where the GPU has caught up with the host.

A loop that synchronizes before every flush (GPU MODE's eval.py, the CuTe DSL autotuner's
timer) hands the flush an idle GPU; its host then records the start event and launches the
timed call while the GPU runs only the flush, and host time beyond the flush's own GPU time
lands in the timed region.  do_bench queues its calls without synchronizing, so its flushes
hide host time until the host falls behind the GPU (a slower host, another process); from
then on every call starts on a GPU that has caught up.  Here the host waits X us (a
busy-wait) before the timed call, as a slower host or a heavier Python stack would:

* ``synced`` rows: flush, X us, start event, GEMM, end event, synchronize; the flush is
  ``_flush.flush`` on a one-L2 cache (the CuTe DSL's memset size), or ``plain read``, a
  float32 ``sum()`` of a 256 MiB buffer of its own (no cleanflush code);
* ``do_bench`` rows: triton's do_bench of the GEMM with X us before each call (central mean
  of its samples, and how many it took), its flush Triton's ``clear_cache`` (whose write
  cleanflush owns: L2 / 8 of it, then 2 x L2 read), stock or write-read;
* ``inductor`` rows: Inductor's ``InductorBenchmarker.benchmark_gpu``, a queued loop too (its
  inline one-L2 write, then cleanflush's read), stock or write-read: its timed loop's samples'
  minimum (what it returns, with its estimate's) and median.  Its memory warm-up's writes,
  queued at once, keep the GPU behind the host for its first few calls, so the minimum can be
  clean where most calls are not: the median says whether every call is.

write-read runs with each hold design of ``common.hold_design``: the hold as it is (the
pinned handshake; in a queued loop up to 1 ms), ``spin only`` (the simpler design: a
``%globaltimer`` spin bounded by the host's pace, only on an empty stream, never let go
early), and ``no hold``; the do_bench and inductor rows also with the handshake held to 120
us there (``SHORT_BOUND``, the bound before the queued loops had a longer one).

``hidden_us``: the largest X up to which every central mean stays within 5% of the one at
X = 0; ``samples_at_0``: do_bench's samples with no delay (the host as it is).  Two shapes:
the write-up's 4096 x 4096 and a 2048 x 2048 one-row GEMM (a 9 us kernel, where a slow host
falls behind first).  Candidates interleaved within each round and delay.
Run on a GPU, from the repository root:  python -m benchmarks synced
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import HOLDS, SHORT_BOUND, Results, central_mean, flushing, progress, write_read_held

ROUNDS = 3
ITERS = 150
DELAYS_US = (0, 20, 40, 60, 80, 120, 160, 300, 600)
SHAPES = ((4096, 4096), (2048, 2048))
# the loops the record's rows name (``quoted`` reads them)
SYNCED, DO_BENCH, INDUCTOR_MIN, INDUCTOR_MEDIAN = "synced", "do_bench", "inductor, min", "inductor, median"


def loop(flush: Callable[[], Any], fn: Callable[[], Any], delay_us: float, iters: int) -> list[float]:
    import torch

    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush()
        until = time.perf_counter() + delay_us * 1e-6
        while time.perf_counter() < until:
            pass
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return times


def slowed(fn: Callable[[], Any], delay_us: float) -> Callable[[], Any]:
    """``fn`` with the host waiting ``delay_us`` before each launch."""

    def slow() -> Any:
        until = time.perf_counter() + delay_us * 1e-6
        while time.perf_counter() < until:
            pass
        return fn()

    return slow


def queued_loop(fn: Callable[[], Any], delay_us: float) -> tuple[float, int]:
    """do_bench's central mean (us) of ``fn``, and its number of samples, the host waiting
    ``delay_us`` before each launch."""
    import triton.testing

    times = triton.testing.do_bench(slowed(fn, delay_us), return_mode="all")
    return central_mean(times) * 1e3, len(times)


def inductor_loop(fn: Callable[[], Any], delay_us: float) -> tuple[float, float]:
    """Inductor's benchmarker's samples of ``fn`` (its timed loop, not its estimate), the host
    waiting ``delay_us`` before each launch: their minimum and median (us)."""
    from torch._inductor.runtime.benchmarking import InductorBenchmarker

    times = InductorBenchmarker().benchmark_gpu(slowed(fn, delay_us), return_mode="all")
    return min(times) * 1e3, statistics.median(times) * 1e3


def hidden_us(medians: dict[int, float]) -> int:
    """The largest host delay up to which every value stays within 5% of the one without."""
    base, hidden = medians[0], 0
    for delay in sorted(medians):
        if medians[delay] > 1.05 * base:
            break
        hidden = delay
    return hidden


def run(out: Path, rounds: int = ROUNDS) -> Path:
    import torch
    import triton

    from cleanflush import _flush, _hold, _measure, _read

    device = torch.device("cuda", torch.cuda.current_device())
    l2 = _read.l2_bytes(device)
    plain = torch.ones(256 * 1024 * 1024 // 4, dtype=torch.float32, device=device)
    cache = torch.empty(l2 // 4, dtype=torch.int32, device=device)
    entry = _read.prepare(device)
    assert entry.held is not None, "the read kernel's hold was not built here"
    driver = triton.runtime.driver.active
    driver.get_empty_cache_for_benchmark()  # do_bench's cache made once: its read buffer is this one

    def clean() -> None:
        _flush.flush("synced", write=cache.zero_, cache=cache)

    # name -> (context the loop runs in, flush)
    synced: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {"plain read": (contextlib.nullcontext, plain.sum)}
    synced.update({f"write-read, {d}": (lambda d=d: write_read_held(d), clean) for d in HOLDS})
    # do_bench's own flush, through cleanflush's patch: the stock write, or write-read
    queued: dict[str, Callable[[], Any]] = {"stock": lambda: flushing("stock")}
    queued.update({f"write-read, {d}": lambda d=d: write_read_held(d) for d in (*HOLDS, SHORT_BOUND)})
    # Inductor's benchmarker, a queued loop too (its inline write, then cleanflush's read)
    inductor = {name: queued[name] for name in ("stock", "write-read, handshake", f"write-read, {SHORT_BOUND}")}

    results = Results(out, "synced")
    for n, k in SHAPES:
        shape = f"{n}x{k}"
        fn, _, _ = _measure.one_row_gemm(n, k, device=device)
        _measure.warm_up(fn, 1.0)
        for r in range(rounds):
            for delay in DELAYS_US:
                for name, (context, flush) in synced.items():
                    with context():
                        loop(flush, fn, delay, 5)
                        times = loop(flush, fn, delay, ITERS)
                    results.add(shape=shape, round=r, loop=SYNCED, flush=name, delay_us=delay, us=central_mean(times))
                for name, context in queued.items():
                    with context():
                        mean, samples = queued_loop(fn, delay)
                    results.add(
                        shape=shape, round=r, loop=DO_BENCH, flush=name, delay_us=delay, us=mean, samples=samples
                    )
                for name, context in inductor.items():
                    with context():
                        least, median = inductor_loop(fn, delay)
                    for loop_name, us in ((INDUCTOR_MIN, least), (INDUCTOR_MEDIAN, median)):
                        results.add(shape=shape, round=r, loop=loop_name, flush=name, delay_us=delay, us=us)
                progress(f"synced: {shape}, round {r + 1}/{rounds}, delay {delay} us")
    summary = summarize(results.rows)
    print(table(summary))
    return results.write(
        hold_ns=_hold.HOLD_NS,
        queued_hold_ns=_hold.QUEUED_HOLD_NS,
        hold_pace=_hold.HOLD_PACE,
        rounds=rounds,
        summary=summary,
    )


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per shape, loop and flush: the median over rounds at each delay, the host time hidden,
    and for do_bench its samples at no delay (median and the rounds' range)."""
    summary: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys((row["shape"], row["loop"], row["flush"]) for row in rows):
        mine = [row for row in rows if (row["shape"], row["loop"], row["flush"]) == key]
        means = {d: statistics.median(row["us"] for row in mine if row["delay_us"] == d) for d in DELAYS_US}
        found: dict[str, Any] = {"hidden_us": hidden_us(means), "us_by_delay": means}
        if key[1] == DO_BENCH:
            at_0 = [row["samples"] for row in mine if row["delay_us"] == 0]
            found.update(samples_at_0=statistics.median(at_0), samples_at_0_range=[min(at_0), max(at_0)])
        summary[" ".join((key[0], key[1] + ":", key[2]))] = found
    return summary


def table(summary: dict[str, dict[str, Any]]) -> str:
    lines = [f"{'case':64} {'hidden us':>9} {'us at 0':>8} {'samples at 0':>14}"]
    for name, m in summary.items():
        samples = f"{m['samples_at_0']:.0f} {m['samples_at_0_range']}" if "samples_at_0" in m else ""
        lines.append(f"{name:64} {m['hidden_us']:9d} {m['us_by_delay'][0]:8.2f} {samples:>14}")
    return "\n".join(lines)
