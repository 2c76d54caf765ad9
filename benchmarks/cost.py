"""Study 3: what each policy costs, and how steady one do_bench call is under it.

Per flush (stock = cleanflush uninstalled, then each policy), interleaved over rounds:

- the GPU time of one flush (50 back to back between two events);
- one whole do_bench call with its default budget (warmup 25 ms, rep 100 ms): the number of
  samples it took, its wall time, and the central mean of its samples;
- one event loop of the same flush with as many iterations as that call took, so that a
  spread which belongs to do_bench and not to the flush shows up as a difference;
- SM clock, memory clock, power, temperature and the clock-event reasons NVML reports
  during the call (sampled every 2 ms in a thread).

Sample histograms of every call go to the JSON: CUDA event times are quantised, and the
share of samples on each step is what moves a mean.
"""

from __future__ import annotations

import collections
import statistics
import time
from pathlib import Path
from typing import Any

from .common import ClockLog, Results, central_mean, progress, quartiles, uninstalled

SHAPES = [(4096, 4096), (28672, 4096)]
ROUNDS = 10
FLUSHES = ["stock", "write", "write-read", "read"]


def run(out: Path, shapes: list[tuple[int, int]] | None = None, rounds: int = ROUNDS) -> Path:
    import torch
    import triton
    import triton.testing

    import cleanflush
    from cleanflush import _measure

    shapes = shapes or SHAPES
    results = Results(out, "cost")
    histograms: dict[str, list[dict[str, int]]] = collections.defaultdict(list)
    driver = triton.runtime.driver.active

    def under(flush: str) -> Any:
        return uninstalled() if flush == "stock" else cleanflush.policy(flush)

    with ClockLog() as clocks:
        for n, k in shapes:
            fn, _, _ = _measure.one_row_gemm(n, k)
            cache = driver.get_empty_cache_for_benchmark()
            _measure.warm_up(fn, 1.5)
            for flush in FLUSHES:  # first launches load the flush kernels: keep them out
                with under(flush):
                    driver.clear_cache(cache)
            torch.cuda.synchronize()
            progress(f"cost: {n}x{k}, {rounds} rounds x {len(FLUSHES)} flushes")
            for r in range(rounds):
                for flush in FLUSHES:
                    with under(flush):
                        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        start.record()
                        for _ in range(50):
                            driver.clear_cache(cache)
                        end.record()
                        torch.cuda.synchronize()
                        flush_us = start.elapsed_time(end) / 50 * 1e3

                        t0 = time.perf_counter()
                        samples = triton.testing.do_bench(fn, return_mode="all")
                        t1 = time.perf_counter()
                        window = clocks.window(t0, t1)

                        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                                 for _ in samples]
                        t2 = time.perf_counter()
                        for s, e in pairs:
                            driver.clear_cache(cache)
                            s.record()
                            fn()
                            e.record()
                        torch.cuda.synchronize()
                        t3 = time.perf_counter()
                        loop = [s.elapsed_time(e) for s, e in pairs]
                    us = [x * 1e3 for x in samples]
                    histograms[f"{n}x{k} {flush}"].append(dict(collections.Counter(f"{x:.3f}" for x in us)))
                    results.add(shape=f"{n}x{k}", round=r, flush=flush, flush_us=flush_us,
                                samples=len(samples), wall_ms=(t1 - t0) * 1e3,
                                do_bench_us=central_mean(us), do_bench_median_us=statistics.median(us),
                                event_loop_us=central_mean(x * 1e3 for x in loop),
                                event_loop_wall_ms=(t3 - t2) * 1e3, **window)
            del fn, cache
            torch.cuda.empty_cache()
    summary = summarise(results.rows)
    for key, row in summary.items():
        progress(f"  {key:22s} flush {row['flush_us']:6.1f} us  samples {row['samples']:6.0f}  "
                 f"wall {row['wall_ms']:6.1f} ms  do_bench {row['do_bench_us']:.2f} (sd {row['do_bench_sd']:.2f})  "
                 f"event loop {row['event_loop_us']:.2f} (sd {row['event_loop_sd']:.2f})  "
                 f"SM {row.get('sm_mhz_mean', float('nan')):.0f} MHz")
    return results.write(rounds=rounds, summary=summary, histograms=histograms,
                         clock_event_reasons="NVML bits: 0x1 idle, 0x4 SW power cap, 0x8 HW slowdown, "
                                             "0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake")


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """shape + flush -> medians over rounds, and the call-to-call spread (sd)."""
    out: dict[str, dict[str, float]] = {}
    for key in dict.fromkeys((r["shape"], r["flush"]) for r in rows):
        mine = [r for r in rows if (r["shape"], r["flush"]) == key]
        row = {f: quartiles(r[f] for r in mine)[1]
               for f in ("flush_us", "samples", "wall_ms", "do_bench_us", "event_loop_us")}
        row["do_bench_sd"] = statistics.pstdev(r["do_bench_us"] for r in mine)
        row["event_loop_sd"] = statistics.pstdev(r["event_loop_us"] for r in mine)
        for f in ("sm_mhz_mean", "power_w_mean"):
            if all(f in r for r in mine):
                row[f] = statistics.fmean(r[f] for r in mine)
        out[" ".join(key)] = row
    return out
