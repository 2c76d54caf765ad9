"""Study: the truth ``cleanflush ab``'s prices are held against.  Every config a run timed for a
Triton ``@autotune`` decision, timed again with a rotating CUDA graph: a graph of ``COPIES``
launches, each on its own copy of the call's tensors (together far larger than L2, so every
launch reads cold data and no flush of any kind runs), replayed and timed with CUDA events.
No cleanflush flush or timing code: only the record of the call (``_calls``), to make it again.
Each launch is the config's pre-hook and the kernel, without the autotuner's own hooks
(``restore_value``, ``reset_to_zero``): their clones would read the kernel's data into L2 just
before it runs (the kernel then runs as it does outside tuning, on what the previous replay
left).

Reads what ``cleanflush ab --keep DIR --json AB.json`` left: DIR/run*/decisions.jsonl, DIR/calls,
and the ab record.  Per decision: every config's truth (us per launch, median over ``ROUNDS``
replays), the picks' prices and truths, and whether ab's class holds by the truth: a real change
is every stock pick slower than every clean pick by more than the floor, by the truth.

    python -m benchmarks.truth DIR AB.json OUT.json
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys
from typing import Any

COPIES = 12
ROUNDS = 7
MAX_CONFIGS = 64


def rotating_us(call: Any, label: str, copies: int = COPIES, rounds: int = ROUNDS) -> dict[str, float]:
    """The kernel's own time (us, median over every launch of the replays: CUPTI inside the
    graph) and the time per launch (the graph's time over its launches, hooks and gaps
    included) of ``call`` under config ``label``, from a CUDA graph over ``copies`` copies."""
    import torch

    made = [call] + [_copy(call) for _ in range(copies - 1)]
    launches = [m.launch(label, tuning_hooks=False) for m in made]
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for launch in launches:  # compiled and warm outside the graph
            launch()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for launch in launches:
                launch()
    times = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for _ in range(rounds):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e3 / copies)
    name = call.tuner.base_fn.__name__
    kernels = [e.time_range.elapsed_us() for e in profile.events() if e.name == name]
    return {"us": statistics.median(kernels) if kernels else float("nan"), "per_launch_us": statistics.median(times)}


def _copy(call: Any) -> Any:
    """The same call on copies of its tensors (a descriptor's tensor copied, its layout kept)."""
    import copy

    import torch

    def clone(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.clone()
        base = getattr(value, "base", None)
        if isinstance(base, torch.Tensor):  # a TensorDescriptor
            twin = copy.copy(value)
            twin.base = base.clone()
            return twin
        return value

    return type(call)(
        call.tuner,
        [clone(a) for a in call.args],
        {k: clone(v) for k, v in call.kwargs.items()},
        call.grid,
        call.grids,
        call.grid_names,
        call.configs,
    )


def decisions_of(keep: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(op, key) -> a Triton decision's labels (every config a run timed) and its call file."""
    from cleanflush._ab import read_decisions

    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(glob.glob(os.path.join(keep, "run*", "decisions.jsonl"))):
        for d in read_decisions(path)[0]:
            if d["kind"] != "triton":
                continue
            entry = found.setdefault((d["op"], d["key"]), {"labels": set(), "file": None})
            entry["labels"] |= set(d["timings_ms"])
            entry["file"] = entry["file"] or (d.get("call") or {}).get("file")
    return found


def main(argv: list[str] | None = None) -> int:
    keep, ab_path, out_path = argv if argv is not None else sys.argv[1:]
    import torch

    from cleanflush._calls import Call

    with open(ab_path, encoding="utf-8") as f:
        ab = json.load(f)
    judged = {(d["op"], d["key"]): d for d in ab["comparison"]["decisions"]}
    device = torch.device("cuda", torch.cuda.current_device())
    results = []
    for (op, key), entry in decisions_of(keep).items():
        row: dict[str, Any] = {"op": op, "key": key}
        try:
            call = Call.load(os.path.join(keep, "calls", entry["file"]), device)
            labels = sorted(entry["labels"])[:MAX_CONFIGS]
            timed = {label: rotating_us(call, label) for label in labels}
            row["truth_us"] = {label: t["us"] for label, t in timed.items()}
            row["per_launch_us"] = {label: t["per_launch_us"] for label, t in timed.items()}
        except Exception as exc:  # a study reports what it could not measure, and goes on
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        row.update(_held_against(judged.get((op, key)), row.get("truth_us"), ab["comparison"]["min_effect"]))
        results.append(row)
        print(f"truth: {op} {key}: {row.get('verdict', row.get('error'))}", file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"copies": COPIES, "rounds": ROUNDS, "decisions": results}, f, indent=1)
    return 0


def _held_against(d: dict[str, Any] | None, truth: dict[str, float] | None, floor: float) -> dict[str, Any]:
    """ab's class of a decision against the truth: a real change, a missed one, or neither;
    and how far ab's prices of the picks are from their truths."""
    if d is None or not truth:
        return {}
    stock, clean = set(d["stock_winners"]), set(d["clean_winners"])
    if not stock | clean <= set(truth):
        return {"verdict": "picks not in the truth"}
    gap = min(truth[p] for p in stock) / max(truth[p] for p in clean) - 1
    real = gap > floor
    found = {"ab_class": d["class"], "truth_gap": gap, "real_change": real}
    found["verdict"] = {
        (True, True): "changed, and real",
        (True, False): "changed, not real",
        (False, True): "real change missed",
        (False, False): "no change, none real",
    }[(d["class"] == "changed", real)]
    if "prices_us" in d:
        found["price_over_truth"] = {p: d["prices_us"][p]["us"] / truth[p] for p in d["prices_us"]}
    best = min(truth, key=truth.__getitem__)
    found["truth_best"] = {"label": best, "us": truth[best]}
    return found


if __name__ == "__main__":
    sys.exit(main())
