"""The harnesses' own timers on the one-row 4096 x 4096 BF16 GEMM, stock against patched,
each beside verify's plain read-loop reference timed right after it, 5 interleaved rounds.

KernelBench and DeepEP are not on the package index and their packages need builds this
script does not: put their real timing files on PYTHONPATH (not part of this repository),
KernelBench's src/kernelbench/timing.py as kernelbench/timing.py and DeepEP's
deep_ep/utils/testing.py as deep_ep/utils/testing.py, with empty __init__.py files; run
on a GPU with CLEANFLUSH=1 (the autoload patches them as they are imported):

    PYTHONPATH=ext CLEANFLUSH=1 python benchmarks/harness_timing.py

Run on the H200 with KernelBench 423217d and DeepEP dd758ca:
results/h200/2026-11-30-harnesses-kernelbench-deepep.txt.
"""
import statistics

import deep_ep.utils.testing as dep
import kernelbench.timing as kb

import cleanflush
from cleanflush import _measure
from cleanflush._stats import central_mean

fn, _, _ = _measure.one_row_gemm(4096, 4096)
_measure.warm_up(fn, 1.5)
print("patched:", [r.target for r in cleanflush.status() if r.patched and r.package in ("kernelbench", "deep-ep")])
harnesses = {
    "KernelBench time_execution_with_cuda_event": lambda: central_mean(
        kb.time_execution_with_cuda_event(fn, [], num_warmup=3, num_trials=200, verbose=False)) * 1e3,
    "DeepEP bench": lambda: dep.bench(fn, num_warmups=20, num_tests=200)[0] * 1e6,
}
rows = {}
for r in range(5):
    for name, measure in harnesses.items():
        for policy in ("write", "write-read", "read"):
            with cleanflush.policy(policy):
                t = measure()
            ref = central_mean(_measure.read_flush_reference(fn, 300))
            rows.setdefault((name, policy), []).append((t, ref))
# one row per harness and flush: medians over rounds of its time, of the reference, and of
# their ratio (paired per round)
print(f"{'harness':44s} {'flush':10s} {'median us':>9s} {'ref us':>7s} {'vs ref':>7s}")
for (name, policy), pairs in rows.items():
    t = statistics.median(p[0] for p in pairs); ref = statistics.median(p[1] for p in pairs)
    ratio = statistics.median(p[0] / p[1] for p in pairs)
    print(f"{name:44s} {policy:10s} {t:9.2f} {ref:7.2f} {ratio - 1:+7.1%}")
for name in harnesses:
    stock = statistics.median(p[0] / p[1] for p in rows[(name, "write")])
    for policy in ("write-read", "read"):
        clean = statistics.median(p[0] / p[1] for p in rows[(name, policy)])
        print(f"{name}: {policy} removed {(stock - clean) / (stock - 1):.0%} of the stock penalty")
print(sorted(cleanflush.flush_counts().items()))
