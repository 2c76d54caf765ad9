"""Which config an autotuner picks, under each timer.

A Triton GEMV with an INT8 weight and one scale per row (benchmarks/int8_gemv.py) over a
sweep of block sizes and warps, against cuBLAS BF16 on the same layer.  Every config is
first checked against a float64 dequantized reference on fresh inputs.  Each config and
cuBLAS is then timed, interleaved over rounds, by:

- stock do_bench (cleanflush uninstalled: zero_ 256 MiB before each call),
- do_bench under each cleanflush policy that flushes differently (write-read, read), and
  write-read as it ran before cleanflush shrank the write it owns (the whole stock write),
- a second truth: the kernel's own time (CUPTI) after a plain float32 read of 256 MiB,
- the ground truth: a CUDA graph cycling through enough weight copies to exceed 5 x L2
  (every call reads a cold weight; no flush, no launch gaps).

Reported per layer and timer: how many configs beat cuBLAS, the winning config and what it
costs under the ground truth, and the rank agreement with the ground truth and with the
second truth (Spearman, Kendall tau-b) over all configs plus cuBLAS.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import WHOLE_WRITE, Results, central_mean, kendall_tau, progress, run_under, spearman

LAYERS = [(4096, 4096), (28672, 4096)]
ROUNDS = 2
TRUTH_B = "kernel after a plain read (CUPTI)"
TIMERS = [
    "do_bench stock",
    f"do_bench {WHOLE_WRITE}",
    "do_bench write-read",
    "do_bench read",
    TRUTH_B,
    "ground truth (rotating graph)",
]
CUBLAS = "cuBLAS BF16"


def run(out: Path, shapes: list[tuple[int, int]] | None = None, rounds: int = ROUNDS) -> Path:
    import torch
    import triton.testing

    from cleanflush import _measure

    from . import int8_gemv
    from .budget import REFERENCE_BYTES, kernel_us

    device = torch.device("cuda", torch.cuda.current_device())
    results = Results(out, "autotune")
    summary: dict[str, Any] = {}
    for n, k in shapes or LAYERS:
        layer = int8_gemv.Layer(n, k, device)
        progress(f"autotune: {n}x{k}, checking {len(int8_gemv.configs())} configs against a float64 reference")
        configs, rejected = [], {}
        for config in int8_gemv.configs():
            err = layer.error(config)
            (configs.append(config) if err < 1e-2 else rejected.__setitem__(int8_gemv.name(config), err))
        if rejected:
            progress(f"  rejected (relative error >= 1e-2): {rejected}")

        gemm, x, _ = _measure.one_row_gemm(n, k, device=device)
        copies = _measure.rotating_copies(n * k, device)  # the INT8 weight: one byte per element
        weights = [layer.w.clone() for _ in range(copies)]
        candidates: dict[str, tuple[Callable[[], Any], Callable[[], float]]] = {}
        for config in configs:
            calls = [layer.call(config, w) for w in weights]
            candidates[int8_gemv.name(config)] = (
                layer.call(config),
                lambda calls=calls: statistics.median(_measure.graph_per_call(calls, replays=5)),
            )
        candidates[CUBLAS] = (
            gemm,
            lambda n=n, k=k: statistics.median(_measure.rotating_weight_graph(n, k, device=device, replays=5)),
        )

        def do_bench(fn: Callable[[], Any]) -> float:
            return central_mean(triton.testing.do_bench(fn, return_mode="all"))

        plain = torch.ones(REFERENCE_BYTES // 4, dtype=torch.float32, device=device)

        timers: dict[str, Callable[[Callable[[], Any], Callable[[], float]], float]] = {
            "do_bench stock": lambda fn, truth: run_under("stock", lambda: do_bench(fn)),
            f"do_bench {WHOLE_WRITE}": lambda fn, truth: run_under(WHOLE_WRITE, lambda: do_bench(fn)),
            "do_bench write-read": lambda fn, truth: run_under("write-read", lambda: do_bench(fn)),
            "do_bench read": lambda fn, truth: run_under("read", lambda: do_bench(fn)),
            TRUTH_B: lambda fn, truth, plain=plain: kernel_us(plain.sum, fn) / 1e3,
            "ground truth (rotating graph)": lambda fn, truth: truth(),
        }
        _measure.warm_up(gemm, 1.5)
        for r in range(rounds):
            progress(f"autotune: {n}x{k}, round {r + 1}/{rounds}, {len(candidates)} candidates x {len(timers)} timers")
            for cname, (fn, truth) in candidates.items():
                for tname, timer in timers.items():
                    results.add(layer=f"{n}x{k}", round=r, candidate=cname, timer=tname, us=timer(fn, truth) * 1e3)
        del weights
        torch.cuda.empty_cache()
        summary[f"{n}x{k}"] = decide([row for row in results.rows if row["layer"] == f"{n}x{k}"])
        summary[f"{n}x{k}"]["rejected"] = rejected
        summary[f"{n}x{k}"]["configs"] = len(configs)
        for tname, s in summary[f"{n}x{k}"]["timers"].items():
            progress(
                f"  {tname:30s} winner {s['winner']:18s} (truth {s['winner_truth_us']:.2f} us, "
                f"+{s['regret_pct']:.1f}%)  beat cuBLAS {s['beat_cublas']:2d}  "
                f"spearman {s['spearman']:.3f}  kendall {s['kendall']:.3f} / {s.get('kendall_b', float('nan')):.3f}  "
                f"wrong side {s['wrong_side']} / {s.get('wrong_side_b', -1)}"
            )
    return results.write(rounds=rounds, timers=TIMERS, summary=summary)


def decide(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What an autotuner would conclude under each timer (median over rounds per candidate)."""
    times: dict[str, dict[str, float]] = {}
    for timer in dict.fromkeys(r["timer"] for r in rows):
        per: dict[str, list[float]] = {}
        for r in rows:
            if r["timer"] == timer:
                per.setdefault(r["candidate"], []).append(r["us"])
        times[timer] = {c: statistics.median(xs) for c, xs in per.items()}
    truth = times[TIMERS[-1]]
    second = times.get(TRUTH_B)
    names = list(truth)
    best_truth = min(truth.values())
    out: dict[str, Any] = {"timers": {}, "truth_winner": min(truth, key=truth.__getitem__)}
    for timer, t in times.items():
        winner = min(t, key=t.__getitem__)
        out["timers"][timer] = {
            "winner": winner,
            "winner_us": t[winner],
            "winner_truth_us": truth[winner],
            "regret_pct": (truth[winner] / best_truth - 1) * 100,
            "cublas_us": t[CUBLAS],
            "beat_cublas": sum(1 for c, v in t.items() if c != CUBLAS and v < t[CUBLAS]),
            "spearman": spearman([t[c] for c in names], [truth[c] for c in names]),
            "kendall": kendall_tau([t[c] for c in names], [truth[c] for c in names]),
        }
        if second is not None:
            out["timers"][timer]["kendall_b"] = kendall_tau([t[c] for c in names], [second[c] for c in names])
            out["timers"][timer]["wrong_side_b"] = sum(
                1 for c in names if c != CUBLAS and (t[c] < t[CUBLAS]) != (second[c] < second[CUBLAS])
            )
        out["timers"][timer]["wrong_side"] = sum(
            1 for c in names if c != CUBLAS and (t[c] < t[CUBLAS]) != (truth[c] < truth[CUBLAS])
        )
    return out
