"""Study: a clean flush at the stock flush's price.

Where cleanflush owns the write (Triton's ``clear_cache``), nothing forces it to write the
whole 256 MiB before its read.  Each candidate below is built from plain torch calls and
cleanflush's read kernel (one launch form for every read, so the host cost of a read is the
same in every candidate); sizes follow the device's L2:

  stock        write 256 MiB
  write-read   write 256 MiB, read 2 x L2 of a separate buffer       (0.1.0's default)
  budget       write 256 MiB - 2 x L2, read 2 x L2                    (the stock bytes in total)
  half         write 128 MiB, read 128 MiB                            (the stock bytes in total)
  small        write 2 x L2, read 2 x L2                              (the stock flush's time)
  read         read 256 MiB                                           (the read policy)

The reference shares no code with any of them: a float32 ``sum()`` of a 256 MiB buffer of
its own.  Per shape, in rounds interleaved over the candidates:

* ``loop_us``: the event loop do_bench runs (flush, start event, call, end event), central
  mean of 200 calls;
* ``kernel_us``: the GEMM's own kernels after the flush (CUPTI, torch.profiler), per call;
* ``do_bench_us`` and ``samples``: do_bench with the driver's ``clear_cache`` set to the
  candidate (cleanflush uninstalled), its central mean and how many samples it took;
* ``flush_us`` (once per shape): one flush's GPU time, 50 back to back.

``ncu``: the DRAM bytes the 4096 x 4096 GEMM writes after each candidate (Nsight Compute).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import LLAMA_SHAPES, MiB, Results, central_mean, flush_time_us, progress

ROUNDS = 4
CANDIDATES = ("stock", "write-read", "budget", "half", "small", "read", "reference")
STOCK_BYTES = 256 * MiB


def sizes(l2: int) -> dict[str, tuple[int, int]]:
    """(bytes written, bytes read) of each candidate on a device with ``l2`` bytes of L2."""
    return {
        "stock": (STOCK_BYTES, 0),
        "write-read": (STOCK_BYTES, 2 * l2),
        "budget": (STOCK_BYTES - 2 * l2, 2 * l2),
        "half": (STOCK_BYTES // 2, STOCK_BYTES // 2),
        "small": (2 * l2, 2 * l2),
        "read": (0, STOCK_BYTES),
    }


def make_flushes(cache: Any, device: Any) -> dict[str, Callable[[], None]]:
    import torch

    from cleanflush import _sweep

    l2 = int(torch.cuda.get_device_properties(device).L2_cache_size)
    buffer = torch.ones(STOCK_BYTES // 4, dtype=torch.float32, device=device)
    sink = torch.zeros((), dtype=torch.float32, device=device)
    sweep = _sweep.build(buffer, sink, _sweep.programs_for(device))
    reference = torch.ones(STOCK_BYTES // 4, dtype=torch.float32, device=device)

    def flush(written: int, read: int) -> Callable[[], None]:
        def run() -> None:
            if written:
                cache[: written // 4].zero_()
            if read:
                sweep(buffer[: read // 4], sink)

        return run

    flushes = {name: flush(*nbytes) for name, nbytes in sizes(l2).items()}
    flushes["reference"] = reference.sum
    return flushes


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


def do_bench_with(flush: Callable[[], None], fn: Callable[[], Any]) -> list[float]:
    """do_bench's samples (us) with the active driver's clear_cache running ``flush``."""
    import triton
    import triton.testing

    cls = type(triton.runtime.driver.active)
    stock = vars(cls)["clear_cache"]
    cls.clear_cache = lambda self, cache: flush()  # type: ignore[method-assign]
    try:
        return [x * 1e3 for x in triton.testing.do_bench(fn, return_mode="all")]
    finally:
        cls.clear_cache = stock  # type: ignore[method-assign]


def run(out: Path, shapes: list[tuple[int, int]] | None = None, rounds: int = ROUNDS) -> Path:
    # Kineto keeps CUPTI attached after a profiling session unless told otherwise
    # (pytorch/pytorch#144455); every later launch is then slower, and the event loops time
    # the host.  Set before torch loads Kineto; the profiling also runs after the timing.
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    import torch
    import triton

    import cleanflush
    from cleanflush import _measure

    cleanflush.uninstall()  # the candidates are the flushes here; the reference is plain torch
    device = torch.device("cuda", torch.cuda.current_device())
    cache = triton.runtime.driver.active.get_empty_cache_for_benchmark()
    flushes = make_flushes(cache, device)
    results = Results(out, "budget")
    for n, k in shapes or LLAMA_SHAPES:
        fn, _, _ = _measure.one_row_gemm(n, k)
        _measure.warm_up(fn, 1.5)
        for flush in flushes.values():  # first launches load kernels: keep them out
            flush()
        cost = {name: flush_time_us(flush, 50) for name, flush in flushes.items()}
        progress(f"budget: {n}x{k}, {rounds} rounds x {len(flushes)} flushes")
        rows = []
        for r in range(rounds):
            for name, flush in flushes.items():
                loop = central_mean(_measure.timed_loop(flush, fn, 200))
                samples = do_bench_with(flush, fn)
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
            row["kernel_us"] = kernel_us(flushes[row["flush"]], fn)
            results.add(**row)
    summary = summarize(results.rows)
    ncu = write_bytes(4096, 4096)
    path = results.write(
        summary=summary,
        ncu_write_mb=ncu,
        sizes_mib={
            name: [b / MiB for b in nbytes]
            for name, nbytes in sizes(int(torch.cuda.get_device_properties(device).L2_cache_size)).items()
        },
    )
    print(table(summary, ncu))
    cleanflush.install()
    return path


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """shape -> flush -> medians over rounds; the timings also as ratios to the reference."""
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
            # the spread of the rounds: what a difference between candidates must exceed
            medians["do_bench_range/ref"] = (
                max(r["do_bench_us"] for r in of) - min(r["do_bench_us"] for r in of)
            ) / ref["do_bench_us"]
            out[shape][name] = medians
    return out


def table(summary: dict[str, dict[str, dict[str, float]]], ncu: dict[str, float] | str) -> str:
    lines = [
        f"{'shape':13} {'flush':10} {'cost us':>8} {'samples':>7} {'do_bench/ref':>12} {'range':>6} "
        f"{'loop/ref':>8} {'kernel/ref':>10}"
    ]
    for shape, flushes in summary.items():
        for name, m in flushes.items():
            lines.append(
                f"{shape:13} {name:10} {m['flush_us']:8.1f} {m['samples']:7.0f} {m['do_bench_us/ref']:12.3f} "
                f"{m['do_bench_range/ref']:6.3f} {m['loop_us/ref']:8.3f} {m['kernel_us/ref']:10.3f}"
            )
    lines.append(f"ncu, MB the 4096x4096 GEMM writes after each: {ncu}")
    return "\n".join(lines)


NCU_PROGRAM = """
import sys, torch, triton
sys.path.insert(0, {root!r})
from benchmarks.budget import make_flushes
from cleanflush import _measure
import cleanflush
cleanflush.uninstall()
fn, _, _ = _measure.one_row_gemm({n}, {k})
device = torch.device("cuda", torch.cuda.current_device())
flushes = make_flushes(triton.runtime.driver.active.get_empty_cache_for_benchmark(), device)
_measure.warm_up(fn, 1.0)
for flush in flushes.values():
    flush()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for name, flush in flushes.items():
    for _ in range({calls}):
        flush()
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
