"""What each policy costs, and how steady one do_bench call is under it.

Per flush (stock = cleanflush uninstalled, then each policy), interleaved over rounds:

- the GPU time of one flush (50 back to back between two events);
- one whole do_bench call with its default budget (warmup 25 ms, rep 100 ms): the number of
  samples it took, its wall time, and the central mean of its samples;
- one event loop of the same flush with as many iterations as that call took, so that a
  spread which belongs to do_bench and not to the flush shows up as a difference;
- SM clock, memory clock, power, temperature and the clock-event reasons NVML reports
  during the call (sampled every 2 ms in a thread).

A second table (``readsize``) asks what the read after the stock write should cover: the same
event loop with plain tensor calls (no wrapper, so host cost is equal), the write followed by
reads of 2, 3 and 4 x L2 and of 256 MiB, by 2 x L2 and ~20 us of idle GPU (``torch.cuda._sleep``),
against the read alone and the write alone.  If the write-back of the evicted dirty lines is
still draining when a short read ends, the timed call pays for it, and a longer read or the
idle gap removes that.

A third table (``prices``) is each flush's GPU time through Triton's ``clear_cache``, 200
back to back queued behind a busy GPU (so the host's time per call, which a read's hold
would wait for, stays out: ``busy_gpu_time_us``), beside what bounds it, interleaved over
rounds in the same process: a plain float32 ``sum()`` of 2 x L2 of a buffer of its own (the
read a flush must do, by torch), the best read bandwidth a plain read reaches here (``sum()``
of 2 GiB, rotated so no line is an L2 hit), and the floor: 2 x L2 read, plus what write-read
writes and later writes back, at that bandwidth.

Sample histograms of every call go to the JSON: CUDA event times are quantised, and the
share of samples on each step is what moves a mean.
"""

from __future__ import annotations

import collections
import statistics
import time
from pathlib import Path
from typing import Any

from .common import (
    ClockLog,
    Results,
    central_mean,
    flush_time_us,
    flushing,
    progress,
    quartiles,
    read_alone,
    spin_cycles_per_us,
)

MiB = 1 << 20
SHAPES = [(4096, 4096), (28672, 4096)]
ROUNDS = 10
FLUSHES = ["stock", "write", "write-read", "read"]


def run(out: Path, shapes: list[tuple[int, int]] | None = None, rounds: int = ROUNDS) -> Path:
    import torch
    import triton
    import triton.testing

    from cleanflush import _measure

    shapes = shapes or SHAPES
    results = Results(out, "cost")
    histograms: dict[str, list[dict[str, int]]] = collections.defaultdict(list)
    driver = triton.runtime.driver.active

    with ClockLog() as clocks:
        for n, k in shapes:
            fn, _, _ = _measure.one_row_gemm(n, k)
            cache = driver.get_empty_cache_for_benchmark()
            _measure.warm_up(fn, 1.5)
            for flush in FLUSHES:  # first launches load the flush kernels: keep them out
                with flushing(flush):
                    driver.clear_cache(cache)
            torch.cuda.synchronize()
            progress(f"cost: {n}x{k}, {rounds} rounds x {len(FLUSHES)} flushes")
            for r in range(rounds):
                for flush in FLUSHES:
                    with flushing(flush):
                        flush_us = flush_time_us(lambda cache=cache: driver.clear_cache(cache), 50)

                        t0 = time.perf_counter()
                        samples = triton.testing.do_bench(fn, return_mode="all")
                        t1 = time.perf_counter()
                        window = clocks.window(t0, t1)

                        t2 = time.perf_counter()
                        loop = _measure.timed_loop(lambda cache=cache: driver.clear_cache(cache), fn, len(samples))
                        t3 = time.perf_counter()
                    us = [x * 1e3 for x in samples]
                    histograms[f"{n}x{k} {flush}"].append(dict(collections.Counter(f"{x:.3f}" for x in us)))
                    results.add(
                        shape=f"{n}x{k}",
                        round=r,
                        flush=flush,
                        flush_us=flush_us,
                        samples=len(samples),
                        wall_ms=(t1 - t0) * 1e3,
                        do_bench_us=central_mean(us),
                        do_bench_median_us=statistics.median(us),
                        event_loop_us=central_mean(loop),
                        event_loop_wall_ms=(t3 - t2) * 1e3,
                        **window,
                    )
            del cache
            torch.cuda.empty_cache()
    sizes = readsize(out, shapes, rounds)
    price_table = prices(rounds)
    summary = summarise(results.rows)
    for key, row in summary.items():
        progress(
            f"  {key:22s} flush {row['flush_us']:6.1f} us  samples {row['samples']:6.0f}  "
            f"wall {row['wall_ms']:6.1f} ms  do_bench {row['do_bench_us']:.2f} (sd {row['do_bench_sd']:.2f})  "
            f"event loop {row['event_loop_us']:.2f} (sd {row['event_loop_sd']:.2f})  "
            f"SM {row.get('sm_mhz_mean', float('nan')):.0f} MHz"
        )
    return results.write(
        rounds=rounds,
        summary=summary,
        readsize=sizes,
        prices=price_table,
        histograms=histograms,
        clock_event_reasons="NVML bits: 0x1 idle, 0x4 SW power cap, 0x8 HW slowdown, "
        "0x20 SW thermal, 0x40 HW thermal, 0x80 HW power brake",
    )


PRICE_CALLS = 200
BANDWIDTH_BYTES = 2048 * MiB


def busy_gpu_time_us(flush: Any, count: int, cycles_per_us: float) -> float:
    """GPU time of one flush, ``count`` of them between two events, all queued while the GPU
    still spins on a wait ahead of them: the GPU never catches up with the host, so no read
    holds the stream and the host's time per call is not in the number."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    flush()  # a policy's first flush may make its read buffer (syncs, a held check): not timed
    torch.cuda.synchronize()
    torch.cuda._sleep(int(count * 200 * cycles_per_us))  # longer than the host takes to queue them
    start.record()
    for _ in range(count):
        flush()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / count * 1e3


def prices(rounds: int) -> dict[str, Any]:
    """The ``prices`` table (see the module docstring): us per flush, and each over stock's."""
    import torch
    import triton

    from cleanflush import _flush

    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    l2 = int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)
    own = torch.ones(2 * l2 // 4, dtype=torch.float32, device="cuda")
    pool = torch.ones(4 * BANDWIDTH_BYTES // 4, dtype=torch.float32, device="cuda")
    regions = [pool[i * BANDWIDTH_BYTES // 4 : (i + 1) * BANDWIDTH_BYTES // 4] for i in range(4)]
    turn = iter(range(1 << 30))
    cycles_per_us = spin_cycles_per_us()
    clear = lambda: driver.clear_cache(cache)  # noqa: E731
    candidates: dict[str, Any] = {
        flush: (lambda: busy_gpu_time_us(clear, PRICE_CALLS, cycles_per_us)) for flush in FLUSHES
    }
    candidates["plain read of 2 x L2"] = lambda: busy_gpu_time_us(lambda: own.sum(), PRICE_CALLS, cycles_per_us)
    candidates["plain read of 2 GiB"] = lambda: busy_gpu_time_us(
        lambda: regions[next(turn) % 4].sum(), 20, cycles_per_us
    )
    times: dict[str, list[float]] = collections.defaultdict(list)
    progress(f"cost: prices, {rounds} rounds x {len(candidates)} flushes")
    for _ in range(rounds):
        for name, measure in candidates.items():
            with flushing(name if name in FLUSHES else "stock"):
                times[name].append(measure())
    us = {name: statistics.median(t) for name, t in times.items()}
    bandwidth = BANDWIDTH_BYTES / (us.pop("plain read of 2 GiB") * 1e-6)
    owned = _flush.owned_write_bytes(l2)
    table: dict[str, Any] = {
        name: {"us": t, "over_stock": t / us["stock"], "spread_us": max(times[name]) - min(times[name])}
        for name, t in us.items()
    }
    table["floor: read 2 x L2 at the best plain read"] = {"us": 2 * l2 / bandwidth * 1e6}
    table["floor: write-read's bytes at the best plain read"] = {"us": (2 * l2 + 2 * owned) / bandwidth * 1e6}
    for name, row in table.items():
        row.setdefault("over_stock", row["us"] / us["stock"])
        progress(f"  {name:50s} {row['us']:7.2f} us  {row['over_stock']:.3f} x stock")
    return {"best_plain_read_tb_per_s": bandwidth / 1e12, "l2_bytes": l2, "owned_write_bytes": owned, "us": table}


def readsize(out: Path, shapes: list[tuple[int, int]], rounds: int, iters: int = 300) -> dict[str, dict[str, float]]:
    """The read-size table (see the module docstring); writes readsize.csv."""
    import torch

    from cleanflush import _measure, _read

    MiB = 1 << 20
    device = torch.device("cuda", torch.cuda.current_device())
    zbuf = torch.empty(256 * MiB // 4, dtype=torch.int32, device=device)
    entry = _read.prepare(device)
    rbuf, sink, l2 = entry.buffer, entry.sink, entry.l2
    idle_cycles = int(20 * spin_cycles_per_us())  # ~20 us

    def read(nbytes: int) -> None:
        torch.sum(rbuf[: nbytes // 4], dim=0, out=sink)

    variants = {
        "read 256 MiB (read)": lambda: read(256 * MiB),
        "sweep 256 MiB (read, cleanflush_l2_sweep)": lambda: read_alone(device, 256 * MiB),
        "zero_ 256 MiB + read 2 x L2 (write-read)": lambda: (zbuf.zero_(), read(2 * l2)),
        "zero_ 256 MiB + sweep 2 x L2 (write-read, cleanflush_l2_sweep)": lambda: (
            zbuf.zero_(),
            read_alone(device, 2 * l2),
        ),
        "zero_ 256 MiB + read 2 x L2 + 20 us idle": lambda: (
            zbuf.zero_(),
            read(2 * l2),
            torch.cuda._sleep(idle_cycles),
        ),
        "zero_ 256 MiB + read 3 x L2": lambda: (zbuf.zero_(), read(3 * l2)),
        "zero_ 256 MiB + read 4 x L2": lambda: (zbuf.zero_(), read(4 * l2)),
        "zero_ 256 MiB + read 256 MiB": lambda: (zbuf.zero_(), read(256 * MiB)),
        "zero_ 256 MiB (stock)": lambda: zbuf.zero_(),
    }
    table = Results(out, "readsize")
    for n, k in shapes:
        fn, _, _ = _measure.one_row_gemm(n, k, device=device)
        _measure.warm_up(fn, 0.5)
        progress(f"readsize: {n}x{k}, {rounds} rounds x {len(variants)} flushes")
        for r in range(rounds):
            for name, flush in variants.items():
                us = sorted(_measure.timed_loop(flush, fn, iters))
                table.add(
                    shape=f"{n}x{k}",
                    round=r,
                    flush=name,
                    us=central_mean(us),
                    p5_us=us[len(us) // 20],
                    median_us=statistics.median(us),
                )
    table.write(rounds=rounds, iters=iters, idle_cycles=idle_cycles)
    summary: dict[str, dict[str, float]] = {}
    for key in dict.fromkeys((row["shape"], row["flush"]) for row in table.rows):
        mine = [row for row in table.rows if (row["shape"], row["flush"]) == key]
        summary[" | ".join(key)] = {
            "us": quartiles(x["us"] for x in mine)[1],
            "p5_us": quartiles(x["p5_us"] for x in mine)[1],
            "sd": statistics.pstdev(x["us"] for x in mine),
        }
        progress(
            f"  {' | '.join(key):58s} {summary[' | '.join(key)]['us']:7.2f} us "
            f"(p5 {summary[' | '.join(key)]['p5_us']:.2f}, sd over rounds {summary[' | '.join(key)]['sd']:.2f})"
        )
    return summary


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """shape + flush -> medians over rounds, and the call-to-call spread (sd)."""
    out: dict[str, dict[str, float]] = {}
    for key in dict.fromkeys((r["shape"], r["flush"]) for r in rows):
        mine = [r for r in rows if (r["shape"], r["flush"]) == key]
        row = {
            f: quartiles(r[f] for r in mine)[1]
            for f in ("flush_us", "samples", "wall_ms", "do_bench_us", "event_loop_us")
        }
        row["do_bench_sd"] = statistics.pstdev(r["do_bench_us"] for r in mine)
        row["event_loop_sd"] = statistics.pstdev(r["event_loop_us"] for r in mine)
        for f in ("sm_mhz_mean", "power_w_mean"):
            if all(f in r for r in mine):
                row[f] = statistics.fmean(r[f] for r in mine)
        out[" ".join(key)] = row
    return out
