"""Timing methods side by side, for the five one-row Llama 3.1 8B shapes.

Each of ``PROCESSES`` independent processes measures every shape with every method,
interleaved over ``ROUNDS`` rounds; the parent pools the per-call statistics and reports
their median and IQR.  Methods:

- ``do_bench stock``: triton.testing.do_bench with cleanflush uninstalled (zero_ 256 MiB).
- ``do_bench <policy>``: the same under each cleanflush policy (``write`` = stock through
  our wrapper, the A/B control).
- ``Inductor stock`` / ``Inductor cleanflush``: InductorBenchmarker.benchmark_gpu (min).
- ``read-flush event loop``: a 256 MiB read, start event, call, end event (central mean).
- ``rotating-weight graph``: a CUDA graph over > 5 x L2 of weight copies (cold, no gaps).
- ``do_bench_cudagraph``: Triton's graph timer; no flush at all (warm L2).

do_bench and the event loop keep the mean of the central 80% of samples (CUDA events tick
in ~1 us steps on H200, so a median of samples is quantised).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import LLAMA_SHAPES, Results, central_mean, progress, quartiles, run_under

PROCESSES = 5
ROUNDS = 2
METHODS = [
    "do_bench stock",
    "do_bench write",
    "do_bench write-read",
    "do_bench read",
    "Inductor stock",
    "Inductor cleanflush",
    "read-flush event loop",
    "rotating-weight graph",
    "do_bench_cudagraph",
]


def methods_for(fn: Callable[[], Any], n: int, k: int, device: Any, inductor: Any) -> dict[str, Callable[[], float]]:
    """Each method, timing the GEMM ``fn`` (ms)."""
    import triton.testing

    import cleanflush
    from cleanflush import _measure

    def do_bench() -> float:
        return central_mean(triton.testing.do_bench(fn, return_mode="all"))

    measures: dict[str, Callable[[], float]] = {
        "do_bench stock": lambda: run_under("stock", do_bench),
        "Inductor stock": lambda: run_under("stock", lambda: inductor.benchmark_gpu(fn)),
        "Inductor cleanflush": lambda: inductor.benchmark_gpu(fn),
        "read-flush event loop": lambda: central_mean(_measure.read_flush_reference(fn, 300, device)) / 1e3,
        "rotating-weight graph": lambda: statistics.median(
            _measure.rotating_weight_graph(n, k, device=device, replays=10)
        ),
        "do_bench_cudagraph": lambda: triton.testing.do_bench_cudagraph(fn, return_mode="median"),
    }
    for policy in cleanflush.POLICIES:
        measures[f"do_bench {policy}"] = lambda policy=policy: run_under(policy, do_bench)
    return measures


def worker(shapes: list[tuple[int, int]], rounds: int) -> None:
    """One process: print one JSON line per measurement on stdout."""
    import torch
    from torch._inductor.runtime import benchmarking

    from cleanflush import _measure

    device = torch.device("cuda", torch.cuda.current_device())
    inductor = benchmarking.InductorBenchmarker()

    first = True
    for n, k in shapes:
        fn, _, _ = _measure.one_row_gemm(n, k, device=device)
        _measure.warm_up(fn, 1.5 if first else 0.3)
        first = False
        measures = methods_for(fn, n, k, device, inductor)
        for r in range(rounds):
            for method in METHODS:
                us = measures[method]() * 1e3
                print(
                    json.dumps({"shape": f"{n}x{k}", "n": n, "k": k, "round": r, "method": method, "us": us}),
                    flush=True,
                )
        torch.cuda.empty_cache()


def run(
    out: Path, shapes: list[tuple[int, int]] | None = None, processes: int = PROCESSES, rounds: int = ROUNDS
) -> Path:
    shapes = shapes or LLAMA_SHAPES
    results = Results(out, "methods")
    arg = ",".join(f"{n}x{k}" for n, k in shapes)
    for p in range(processes):
        progress(
            f"methods: process {p + 1}/{processes} ({len(shapes)} shapes x {len(METHODS)} methods x {rounds} rounds)"
        )
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks", "methods", "--worker", "--shapes", arg, "--rounds", str(rounds)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=Path(__file__).parent.parent,
        )
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                results.add(process=p, **json.loads(line))
        if proc.returncode != 0:
            raise RuntimeError(f"methods worker {p} exited {proc.returncode}")
    summary = summarise(results.rows)
    for shape, methods in summary.items():
        ref = methods["rotating-weight graph"]["median"]
        progress(
            f"  {shape}: " + ", ".join(f"{m} {v['median']:.2f}" for m, v in methods.items()) + f" (graph {ref:.2f})"
        )
    return results.write(
        processes=processes,
        rounds=rounds,
        methods=METHODS,
        summary=summary,
        statistic="do_bench and event loop: central 80% mean per call; Inductor: its min; "
        "graphs: median of replays; then median and IQR over processes x rounds",
    )


def summarise(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    """shape -> method -> median, p25, p75, n and ratios to the read-flush event loop."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for shape in dict.fromkeys(r["shape"] for r in rows):
        per = {m: [r["us"] for r in rows if r["shape"] == shape and r["method"] == m] for m in METHODS}
        ref = quartiles(per["read-flush event loop"])[1]
        out[shape] = {}
        for method, xs in per.items():
            if xs:
                p25, med, p75 = quartiles(xs)
                out[shape][method] = {"median": med, "p25": p25, "p75": p75, "n": len(xs), "vs_event_loop": med / ref}
    return out
