"""Study: the clean flush at the stock flush's price, and what its hold costs do_bench.

Every flush runs through Triton's ``driver.active.clear_cache``, as do_bench calls it:

  stock                      cleanflush uninstalled: zero_ 256 MiB
  write-read                 the default: L2 / 8 of the cache zeroed, then 2 x L2 read, the read
                             holding the stream where the GPU has caught up (the handshake)
  write-read, spin only      the same with the simpler hold (``common.write_read_held``)
  write-read, 120 us in do_bench
                             the same with the hold's bound in do_bench's queued loop kept at
                             120 us (``common.SHORT_BOUND``): what the 1 ms bound costs samples
  read                       2 x L2 read, nothing written, holding as write-read does
  reference                  a plain float32 ``sum()`` of a 256 MiB buffer of its own in place of
                             ``clear_cache`` (cleanflush uninstalled): shares no code with the others
  reference again            the same, measured as a candidate of its own: how far two runs of
                             one flush differ is the noise a difference must exceed

Per shape (the five Llama 3.1 8B projections), in rounds interleaved over the candidates:

* ``loop_us``: the event loop do_bench runs (flush, start event, call, end event), central
  mean of 200 calls;
* ``do_bench_us`` and ``samples``: do_bench's central mean and how many samples it took;
* ``kernel_us``: the GEMM's own kernels after the flush (CUPTI, torch.profiler), per call;
* ``flush_us`` (once per shape): one flush's GPU time, 50 back to back.

``ncu``: the DRAM bytes the 28672 x 4096 GEMM writes after each candidate (Nsight Compute),
where that shape is run.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .common import (
    LLAMA_SHAPES,
    SHORT_BOUND,
    MiB,
    Results,
    central_mean,
    flush_time_us,
    flushing,
    progress,
    write_read_held,
)

ROUNDS = 4
SHORT = "write-read, 120 us in do_bench"
CANDIDATES = ("stock", "write-read", "write-read, spin only", SHORT, "read", "reference", "reference again")
NCU_SHAPE = (28672, 4096)
REFERENCE_BYTES = 256 * MiB


def contexts() -> dict[str, Callable[[], contextlib.AbstractContextManager[Any]]]:
    """candidate -> the context in which ``driver.active.clear_cache(cache)`` runs it."""
    import torch
    import triton

    buffer = torch.ones(REFERENCE_BYTES // 4, dtype=torch.float32, device="cuda")

    @contextlib.contextmanager
    def reference() -> Iterator[None]:
        cls = type(triton.runtime.driver.active)
        with flushing("stock"):
            stock = vars(cls)["clear_cache"]
            cls.clear_cache = lambda self, cache: buffer.sum()  # type: ignore[method-assign]
            try:
                yield
            finally:
                cls.clear_cache = stock  # type: ignore[method-assign]

    out: dict[str, Callable[[], contextlib.AbstractContextManager[Any]]] = {
        name: (lambda name=name: flushing(name)) for name in ("stock", "write-read", "read")
    }
    out["write-read, spin only"] = lambda: write_read_held("spin only")
    out[SHORT] = lambda: write_read_held(SHORT_BOUND)
    out["reference"] = out["reference again"] = reference
    return {name: out[name] for name in CANDIDATES}


def kernel_us(flush: Callable[[], None], fn: Callable[[], Any], calls: int = 40) -> float:
    """The GEMM's own kernels per call after ``flush`` (every kernel that is not a flush's)."""
    import torch

    flushes = ("cleanflush_l2_sweep", "FillFunctor", "reduce_kernel")
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush()
            fn()
        torch.cuda.synchronize()
    total = sum(
        e.device_time
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
        and not e.name.startswith("Memset")
        and not any(f in e.name for f in flushes)
    )
    return total / calls


def run(out: Path, shapes: list[tuple[int, int]] | None = None, rounds: int = ROUNDS) -> Path:
    # Kineto keeps CUPTI attached after a profiling session unless told otherwise
    # (pytorch/pytorch#144455); every later launch is then slower, and the event loops time
    # the host.  Set before torch loads Kineto; the profiling also runs after the timing.
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    import torch
    import triton
    import triton.testing

    from cleanflush import _measure

    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    candidates = contexts()

    def flush() -> None:
        driver.clear_cache(cache)

    results = Results(out, "budget")
    for n, k in shapes or LLAMA_SHAPES:
        fn, _, _ = _measure.one_row_gemm(n, k)
        _measure.warm_up(fn, 1.5)
        cost = {}
        for name, context in candidates.items():  # first launches load kernels: keep them out
            with context():
                flush()
                cost[name] = flush_time_us(flush, 50)
        progress(f"budget: {n}x{k}, {rounds} rounds x {len(candidates)} flushes")
        rows = []
        for r in range(rounds):
            for name, context in candidates.items():
                with context():
                    loop = central_mean(_measure.timed_loop(flush, fn, 200))
                    samples = [x * 1e3 for x in triton.testing.do_bench(fn, return_mode="all")]
                rows.append(
                    {
                        "shape": f"{n}x{k}",
                        "round": r,
                        "flush": name,
                        "flush_us": cost[name],
                        "loop_us": loop,
                        "do_bench_us": central_mean(samples),
                        "samples": len(samples),
                    }
                )
        for row in rows:  # profiled last: a profiler session can slow later launches
            with candidates[row["flush"]]():
                row["kernel_us"] = kernel_us(flush, fn)
            results.add(**row)
        del fn
        torch.cuda.empty_cache()
    summary = summarize(results.rows)
    ncu = write_bytes(*NCU_SHAPE) if NCU_SHAPE in (shapes or LLAMA_SHAPES) else "not measured (its shape not run)"
    path = results.write(summary=summary, ncu_write_mb=ncu)
    print(table(summary, ncu))
    return path


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """shape -> flush -> medians over rounds; the timings also as ratios to the reference,
    and the spread of each candidate's rounds (what a difference must exceed)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for shape in dict.fromkeys(row["shape"] for row in rows):
        mine = [row for row in rows if row["shape"] == shape]
        ref = {
            key: statistics.median(row[key] for row in mine if row["flush"] == "reference")
            for key in ("loop_us", "kernel_us", "do_bench_us")
        }
        out[shape] = {}
        for name in CANDIDATES:
            of = [row for row in mine if row["flush"] == name]
            medians = {
                key: statistics.median(row[key] for row in of)
                for key in ("flush_us", "loop_us", "kernel_us", "do_bench_us", "samples")
            }
            medians.update({f"{key}/ref": medians[key] / ref[key] for key in ref})
            medians["do_bench_range/ref"] = (
                max(r["do_bench_us"] for r in of) - min(r["do_bench_us"] for r in of)
            ) / ref["do_bench_us"]
            out[shape][name] = medians
    return out


def table(summary: dict[str, dict[str, dict[str, float]]], ncu: dict[str, float] | str) -> str:
    lines = [
        f"{'shape':13} {'flush':31} {'cost us':>8} {'samples':>7} {'do_bench/ref':>12} {'range':>6} "
        f"{'loop/ref':>8} {'kernel/ref':>10}"
    ]
    for shape, flushes in summary.items():
        for name, m in flushes.items():
            lines.append(
                f"{shape:13} {name:31} {m['flush_us']:8.1f} {m['samples']:7.0f} {m['do_bench_us/ref']:12.3f} "
                f"{m['do_bench_range/ref']:6.3f} {m['loop_us/ref']:8.3f} {m['kernel_us/ref']:10.3f}"
            )
    lines.append(f"ncu, MB the 28672x4096 GEMM writes after each: {ncu}")
    return "\n".join(lines)


NCU_PROGRAM = """
import sys, torch, triton
sys.path.insert(0, {root!r})
import cleanflush
from benchmarks.budget import contexts
from cleanflush import _measure
fn, _, _ = _measure.one_row_gemm({n}, {k})
driver = triton.runtime.driver.active
cache = driver.get_empty_cache_for_benchmark()
candidates = contexts()
_measure.warm_up(fn, 1.0)
for context in candidates.values():
    with context():
        driver.clear_cache(cache)
torch.cuda.synchronize()
torch.cuda.profiler.start()
for context in candidates.values():
    with context():
        for _ in range({calls}):
            driver.clear_cache(cache)
            torch.cuda.nvtx.range_push("timed")
            fn()
            torch.cuda.nvtx.range_pop()
        torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def write_bytes(n: int, k: int, calls: int = 3) -> dict[str, float] | str:
    """MB the GEMM writes to DRAM per call after each candidate, or why Nsight Compute could
    not tell."""
    import shutil

    from cleanflush import _measure

    if shutil.which("ncu") is None:
        return "ncu is not on PATH"
    root = str(Path(__file__).resolve().parent.parent)
    try:
        kernels = _measure.ncu_write_bytes(["-c", NCU_PROGRAM.format(root=root, n=n, k=k, calls=calls)])
        per_call = _measure.split_phases(kernels, calls, len(CANDIDATES))
    except Exception as exc:  # a study reports what it could not measure, and goes on
        return f"ncu failed: {exc}"
    return {name: round(b / 1e6, 3) for name, b in zip(CANDIDATES, per_call)}
