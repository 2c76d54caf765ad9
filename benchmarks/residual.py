"""Study: what a flush leaves the timed kernel, call by call.

The one-row GEMM at 28672 x 4096 runs ~4% slower after the default write-read than after a
read alone, with no dirty line left for it to write back (Nsight Compute) and no transient
(a busy wait after the flush keeps it).  This study looks for the cause with flushes that
differ in one thing each, interleaved *call by call* in a shuffled order, so a slow state of
the machine that lasts longer than one call lands on every flush alike:

  steps: ``W n`` zero_ n MiB of Triton's cache; ``R n`` cleanflush's read kernel over n MiB
  of its own buffer; ``D n`` discard the first n MiB of the cache from L2 (PTX
  ``discard.global.L2``: the dirty lines are dropped, nothing reaches DRAM); ``S us`` a
  busy wait that touches no memory; ``T n`` a plain torch ``sum()`` of n MiB (the
  reference, sharing no code with the others).

The GEMM is timed alone (start event after the flush, while the GPU is still busy with it),
so launch latency is not in these numbers.  Each time is also kept with the flush *before*
the previous call, which tells a state left for one call from one that lasts longer.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import MiB, Results, progress, spread

ROUNDS = 2
CALLS = 100  # calls per flush, shape and round
BATCH = 10  # cycles queued between two syncs


def mechanism(l2_mib: int) -> dict[str, list[tuple[str, int]]]:
    """Flushes that differ in one thing each: what a write leaves, and what does not clear it."""
    two = 2 * l2_mib
    return {
        "T256 (reference)": [("T", 256)],
        "R256 (read)": [("R", 256)],
        f"R{two} (2 x L2)": [("R", two)],
        "R512": [("R", 512)],
        "W256 (stock)": [("W", 256)],
        f"W256 R{two} (write-read)": [("W", 256), ("R", two)],
        f"W{l2_mib} R{two}": [("W", l2_mib), ("R", two)],
        f"W8 R{two}": [("W", 8), ("R", two)],
        f"W8 D8 R{two}": [("W", 8), ("D", 8), ("R", two)],
        f"W256 D256 R{two}": [("W", 256), ("D", 256), ("R", two)],
        f"W256 S1000 R{two}": [("W", 256), ("S", 1000), ("R", two)],
        f"W256 R{two} S1000": [("W", 256), ("R", two), ("S", 1000)],
        "R256 S1000": [("R", 256), ("S", 1000)],
    }


def sizes(l2_mib: int) -> dict[str, list[tuple[str, int]]]:
    """How much may be written before a 2 x L2 read (fractions of L2), and how much a read
    after the stock write (Inductor's, inline) or Kineto's 8 GB write must cover."""
    two = 2 * l2_mib
    out: dict[str, list[tuple[str, int]]] = {"T256 (reference)": [("T", 256)], "R256 (read)": [("R", 256)]}
    for eighths in (0, 1, 2, 3, 4, 6, 8, 16):
        written = max(1, l2_mib * eighths // 8) if eighths else 1
        out[f"W{written} R{two} (L2 x {eighths / 8:g})"] = [("W", written), ("R", two)]
    for read in (two, 2 * two, 512, 1024):
        out[f"W256 R{read}"] = [("W", 256), ("R", read)]
    out[f"W{l2_mib} R{256 - l2_mib} (Inductor)"] = [("W", l2_mib), ("R", 256 - l2_mib)]
    out[f"W8192 R{two} (Kineto)"] = [("W", 8192), ("R", two)]
    out["W8192 (Kineto stock)"] = [("W", 8192)]
    return out


def _discard_kernel() -> Callable[[Any, Any], None]:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def cleanflush_probe_discard(ptr, n_lines, sink, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        line = tl.where(i < n_lines, i, 0).to(tl.int64)
        done = tl.inline_asm_elementwise(
            "discard.global.L2 [$1], 128;\n\tmov.u32 $0, 1;",
            "=r,l",
            [ptr + line * 32],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )
        tl.atomic_add(sink, tl.sum(done, axis=0))

    def discard(words: Any, sink: Any) -> None:
        lines = words.numel() // 32
        cleanflush_probe_discard[(triton.cdiv(lines, 1024),)](words, lines, sink, BLOCK=1024)

    check = torch.zeros(4096, dtype=torch.int32, device="cuda")
    count = torch.zeros((), dtype=torch.int32, device="cuda")
    discard(check, count)
    if int(count) < 4096 // 32:
        raise RuntimeError(f"discard ran on {int(count)} lines")
    return discard


def make_flush(steps: list[tuple[str, int]], parts: dict[str, Any]) -> Callable[[], None]:
    import torch

    cache, buffer, reference, sweep, sink, discard, cycles_per_us = (
        parts[k] for k in ("cache", "buffer", "reference", "sweep", "sink", "discard", "cycles_per_us")
    )
    ops: list[Callable[[], Any]] = []
    for kind, n in steps:
        words = n * MiB // 4
        if kind == "W":
            ops.append(cache[:words].zero_)
        elif kind == "R":
            ops.append(lambda data=buffer[:words]: sweep(data, sink, 0))
        elif kind == "T":
            ops.append(reference[:words].sum)
        elif kind == "D":
            if discard is None:
                raise RuntimeError("no discard kernel")
            ops.append(lambda data=cache[:words]: discard(data, sink.view(torch.int32)))
        elif kind == "S":
            ops.append(lambda cycles=int(n * cycles_per_us): torch.cuda._sleep(cycles))

    def flush() -> None:
        for op in ops:
            op()

    return flush


def run(out: Path, shapes: list[tuple[int, int]] | None = None, rounds: int = ROUNDS) -> Path:
    import torch

    import cleanflush
    from cleanflush import _measure, _sweep

    from .common import LLAMA_SHAPES, ClockLog, flush_time_us, spin_cycles_per_us

    cleanflush.uninstall()  # the flushes are built here; the reference is plain torch
    device = torch.device("cuda", torch.cuda.current_device())
    l2_mib = -(-_measure.l2_bytes(device) // MiB)
    signal = torch.zeros(2, dtype=torch.int64, pin_memory=True)
    buffer = torch.ones(1024 * MiB // 4, dtype=torch.float32, device=device)
    sink = torch.zeros((), dtype=torch.float32, device=device)
    try:
        discard: Any = _discard_kernel()
    except Exception as exc:  # a study reports what it could not measure, and goes on
        progress(f"residual: no discard kernel ({exc}); its flushes are left out")
        discard = None
    parts = {
        "cache": torch.empty(8192 * MiB // 4, dtype=torch.int32, device=device),  # Kineto's 8 GB; Triton's is its head
        "buffer": buffer,
        "reference": torch.ones(256 * MiB // 4, dtype=torch.float32, device=device),
        "sweep": _sweep.build(buffer, sink, signal, _sweep.programs_for(device)),
        "sink": sink,
        "discard": discard,
        "cycles_per_us": spin_cycles_per_us(),
    }
    results = Results(out, "residual")
    summary: dict[str, Any] = {}
    plan = [("sizes", sizes(l2_mib), shapes or LLAMA_SHAPES)]
    if shapes is None:  # --shapes: the size sweep alone, on those shapes
        plan.insert(0, ("mechanism", mechanism(l2_mib), [(28672, 4096), (4096, 4096), (128256, 4096)]))
    for study, steps, study_shapes in plan:
        usable = {name: s for name, s in steps.items() if discard is not None or all(k != "D" for k, _ in s)}
        flushes = {name: make_flush(s, parts) for name, s in usable.items()}
        for flush in flushes.values():  # first launches load kernels: keep them out
            flush()
        cost = {name: flush_time_us(flush, 20) for name, flush in flushes.items()}
        for n, k in study_shapes:
            progress(f"residual {study}: {n}x{k}, {len(flushes)} flushes x {rounds} rounds x {CALLS} calls")
            fn, _, _ = _measure.one_row_gemm(n, k)
            _measure.warm_up(fn, 1.0)
            with ClockLog() as clocks:
                rows = interleaved(flushes, fn, rounds, parts["cycles_per_us"])
            for row in rows:
                results.add(study=study, shape=f"{n}x{k}", **row)
            summary.setdefault(study, {})[f"{n}x{k}"] = table = summarize(rows, list(flushes), cost)
            table["clocks"] = clocks.window(0, float("inf"))
            for name in flushes:
                r = table[name]
                print(
                    f"{study:9} {n}x{k:<6} {name:30} cost {r['flush_us']:7.1f}  {r['median_us']:8.2f} us  "
                    f"x{r['ratio']:.3f} (rounds {r['ratio_min']:.3f}..{r['ratio_max']:.3f})  "
                    f"after ref x{r['after_reference_ratio']:.3f}",
                    flush=True,
                )
    ncu = ncu_counters(l2_mib) if shapes is None else "not run (--shapes)"
    path = results.write(summary=summary, l2_mib=l2_mib, ncu=ncu)
    cleanflush.install()
    return path


def interleaved(
    flushes: dict[str, Callable[[], None]], fn: Callable[[], Any], rounds: int, cycles_per_us: float
) -> list[dict[str, Any]]:
    """Each flush then the timed GEMM, ``CALLS`` times per flush and round, in an order
    shuffled anew every cycle; one row per call with the flush before the previous call."""
    import torch

    names = list(flushes)
    rng = random.Random(0)
    rows: list[dict[str, Any]] = []
    previous = names[0]
    for r in range(rounds):
        for _ in range(0, CALLS, BATCH):
            order = [name for _ in range(BATCH) for name in rng.sample(names, len(names))]
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in order]
            torch.cuda.synchronize()
            torch.cuda._sleep(int(200 * cycles_per_us))  # the host queues ahead of the GPU from the start
            for name, (start, end) in zip(order, events):
                flushes[name]()
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
            for name, (start, end) in zip(order, events):
                rows.append({"round": r, "flush": name, "before": previous, "us": start.elapsed_time(end) * 1e3})
                previous = name
    return rows


def summarize(rows: list[dict[str, Any]], names: list[str], cost: dict[str, float]) -> dict[str, Any]:
    """Per flush: median time, its ratio to the reference's (the first flush), the ratio in
    each round (their spread is the noise a difference must exceed), and the ratio over the
    calls whose previous call was flushed by the reference (a state a flush leaves for longer
    than one call shows as a difference between the two)."""
    reference = names[0]
    ref = statistics.median(row["us"] for row in rows if row["flush"] == reference)
    rounds = sorted({row["round"] for row in rows})
    per_round = {
        r: statistics.median(row["us"] for row in rows if row["flush"] == reference and row["round"] == r)
        for r in rounds
    }
    out: dict[str, Any] = {}
    for name in names:
        mine = [row["us"] for row in rows if row["flush"] == name]
        ratios = [
            statistics.median(row["us"] for row in rows if row["flush"] == name and row["round"] == r) / per_round[r]
            for r in rounds
        ]
        after_ref = [row["us"] for row in rows if row["flush"] == name and row["before"] == reference]
        times = spread(mine)
        out[name] = {
            "flush_us": cost[name],
            "median_us": times["median_us"],
            "ratio": times["median_us"] / ref,
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
            "p10_us": times["p10_us"],
            "p90_us": times["p90_us"],
            "after_reference_ratio": statistics.median(after_ref) / ref if after_ref else float("nan"),
            "calls": len(mine),
        }
    return out


def _median_or_none(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


NCU_FLUSHES = ("T256 (reference)", "W256 R{two} (write-read)", "W8 D8 R{two}", "R512")
NCU_COUNTERS = (
    "gpu__time_duration.sum",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "lts__t_sectors_srcunit_ltcfabric.sum",
    "lts__t_sectors_lookup_hit.sum",
    "lts__t_sectors_lookup_miss.sum",
)
NCU_PROGRAM = """
import sys, torch, triton
sys.path.insert(0, {root!r})
from benchmarks import residual
from benchmarks.common import MiB, spin_cycles_per_us
from cleanflush import _measure, _sweep
import cleanflush
cleanflush.uninstall()
device = torch.device("cuda", 0)
buffer = torch.ones(512 * MiB // 4, dtype=torch.float32, device=device)
sink = torch.zeros((), dtype=torch.float32, device=device)
signal = torch.zeros(2, dtype=torch.int64, pin_memory=True)
parts = dict(cache=torch.empty(256 * MiB // 4, dtype=torch.int32, device=device), buffer=buffer,
    reference=torch.ones(256 * MiB // 4, dtype=torch.float32, device=device),
    sweep=_sweep.build(buffer, sink, signal, _sweep.programs_for(device)), sink=sink,
    discard=residual._discard_kernel(), cycles_per_us=spin_cycles_per_us())
steps = residual.mechanism({l2_mib})
fn, _, _ = _measure.one_row_gemm({n}, {k})
_measure.warm_up(fn, 0.5)
flushes = [residual.make_flush(steps[name], parts) for name in {names!r}]
for flush in flushes:
    flush()
torch.cuda.synchronize()
torch.cuda.profiler.start()
for flush in flushes:
    for _ in range({calls}):
        flush()
        torch.cuda.nvtx.range_push("timed")
        fn()
        torch.cuda.nvtx.range_pop()
torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def ncu_counters(l2_mib: int, n: int = 28672, k: int = 4096, calls: int = 3) -> dict[str, Any] | str:
    """Nsight Compute counters of the GEMM after a few of the flushes (bytes, microseconds,
    sectors; each call's), the cache and clocks left alone; or why they could not be read."""
    import shutil

    from cleanflush import _measure

    if shutil.which("ncu") is None:
        return "ncu is not on PATH"
    names = [name.format(two=2 * l2_mib) for name in NCU_FLUSHES]
    program = NCU_PROGRAM.format(
        root=str(Path(__file__).resolve().parent.parent), l2_mib=l2_mib, n=n, k=k, names=names, calls=calls
    )
    progress(f"residual: Nsight Compute counters of {n}x{k} after {len(names)} flushes")
    try:
        per = [values for _, values in _measure.ncu_metrics(["-c", program], NCU_COUNTERS, timeout=300)]
    except Exception as exc:
        return f"ncu failed: {exc}"
    # the GEMM may be more than one kernel per call
    if not per or len(per) % len(names):
        return f"ncu saw {len(per)} kernels for {len(names)} flushes: {per[:2]}"
    each = len(per) // len(names)
    out = {name: per[i * each : (i + 1) * each] for i, name in enumerate(names)}
    for name, values in out.items():
        print(f"ncu {name}: {values[len(values) // 2]}", flush=True)
    return out
