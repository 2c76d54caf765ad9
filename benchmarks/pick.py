"""Study: the stable pick rule against the autotuners' own (``fastest``) on real jobs, each in
fresh processes, both under the clean flush: ``cleanflush ab --compare pick --runs 4``.

Per job: how many decisions each rule picked alike in all runs (by pick, and by the
independent price), what the stable picks cost against the fastest by that price (each
decision and the job, weighted by calls), the wall time each rule's runs took; and, for the
band's floor, how much one config's time moves between fresh processes: for every config
within 5% of a decision's fastest, the spread of the time each fastest run's autotuner
measured for it (max / min - 1), and of that time over its run's fastest (max - min).

    python -m benchmarks.pick [--runs N] [OUT_DIR [JOB ...]]      (needs a GPU and each job's library)

``--runs`` (default 4) is for a job whose runs take longer than one sitting allows (the Llama
decode compiles for a minute a run); each entry records its own.

The record (OUT_DIR/pick.json) keeps the jobs of an earlier call that this one did not run;
with ``CLEANFLUSH_PICK_FLOOR`` set, a job's entry is named with that floor.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cleanflush import _env, _pick

from .common import RESULTS, machine, progress

JOBS = ("gemlite_decode", "liger_swiglu", "fla_gdn", "llama_decode")
RUNS = 4
NEAR = 0.05  # the configs whose spread between processes the band must cover: this close to the fastest


def rule(floor: str | None) -> dict[str, Any]:
    """The stable rule's settings a job ran under, so an entry says which rule it measured."""
    settings = {k.lower(): getattr(_pick, k) for k in ("FLOOR", "WINDOW", "ROUNDS", "MOST_TIMED_AGAIN")}
    return {**settings, "floor": _env.parse_floor(floor, _pick.FLOOR)}


def run_job(job: str, work: str, runs: int = RUNS) -> dict[str, Any]:
    keep, record = os.path.join(work, f"ab-{job}"), os.path.join(work, f"ab-{job}.json")
    command = [sys.executable, "-m", "cleanflush", "ab", "--compare", "pick", "--runs", str(runs)]
    command += ["--keep", keep, "--json", record, "--", sys.executable, "-m", f"benchmarks.jobs.{job}"]
    started = time.monotonic()
    ab = subprocess.run(command, capture_output=True, text=True)
    found: dict[str, Any] = {"ab_exit": ab.returncode, "ab_wall_s": time.monotonic() - started}
    found["report"] = ab.stdout.split("cleanflush ab: ", 1)[-1].splitlines()
    if not os.path.exists(record):
        return {**found, "error": ab.stderr[-2000:]}
    with open(record, encoding="utf-8") as f:
        result = json.load(f)
    picks = result["picks"]
    found.update(
        agreement=picks["agreement"],
        total=picks["total"],
        wall_s=picks["wall_s"],
        decisions=[_decision(d) for d in picks["decisions"]],
        spread=_spread(keep),
        pricing_s=result["pricing_s"],
    )
    return found


def _decision(d: dict[str, Any]) -> dict[str, Any]:
    """What the record keeps of one decision: each side's picks, the bands, and the price ratio."""
    kept = {k: d[k] for k in ("kind", "op", "key", "fastest_winners", "stable_winners", "bands", "calls", "priced")}
    kept["candidates"] = len(d["candidates"])
    for k in ("stable_over_fastest", "noise", "not_priced"):
        if k in d:
            kept[k] = d[k]
    return kept


def _spread(keep: str) -> dict[str, Any]:
    """One config's time between fresh processes, as the fastest runs' autotuners measured it."""
    runs: list[list[dict[str, Any]]] = []
    for name in sorted(os.listdir(keep)):
        path = os.path.join(keep, name, "decisions.jsonl")
        if name.endswith("-fastest") and os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                lines = [json.loads(line) for line in f if line.strip()]
            runs.append([d for d in lines if d.get("kind") != "calls" and d.get("timings_ms")])
    times: dict[tuple[str, str, str, str], list[float]] = {}
    ratios: dict[tuple[str, str, str, str], list[float]] = {}
    for run in runs:
        for d in run:
            finite = {c: t for c, t in d["timings_ms"].items() if isinstance(t, (int, float)) and 0 < t < float("inf")}
            if not finite:
                continue
            best = min(finite.values())
            for config, t in finite.items():
                if t <= best * (1 + NEAR):
                    times.setdefault((d["kind"], d["op"], d["key"], config), []).append(t)
                    ratios.setdefault((d["kind"], d["op"], d["key"], config), []).append(t / best)
    return {
        # the time itself, and the time over its run's fastest (what a pick compares): the
        # first moves with the GPU's state between processes, the second is what the band covers
        "time": _quantiles([max(ts) / min(ts) - 1 for ts in times.values() if len(ts) == len(runs) > 1]),
        "over_fastest": _quantiles([max(rs) - min(rs) for rs in ratios.values() if len(rs) == len(runs) > 1]),
    }


def _quantiles(spreads: list[float]) -> dict[str, Any]:
    spreads = sorted(spreads)
    if not spreads:
        return {"configs": 0}
    return {
        "configs": len(spreads),
        "median": statistics.median(spreads),
        "p90": spreads[math.ceil(0.9 * len(spreads)) - 1],  # nearest rank: never under the median
        "max": spreads[-1],
    }


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    runs = RUNS
    if args[:1] == ["--runs"]:
        runs, args = int(args[1]), args[2:]
    out = Path(args[0]) if args else RESULTS / "h200"
    jobs = args[1:] or JOBS
    out.mkdir(parents=True, exist_ok=True)
    path = out / "pick.json"
    record: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"study": "pick", "jobs": {}}
    record.update(machine=machine())
    work = tempfile.mkdtemp(prefix="cleanflush-pick-")
    floor = os.environ.get("CLEANFLUSH_PICK_FLOOR")  # the stable runs' floor, where not the default
    for job in jobs:  # written after each job: a cut-off run keeps what it finished
        name = f"{job} floor {floor}%" if floor else job
        progress(f"pick: {name}")
        entry = {"date": record["machine"]["date"], "runs": runs, "rule": rule(floor)}
        record["jobs"][name] = {**entry, **run_job(job, work, runs)}
        print("\n".join(record["jobs"][name]["report"][-30:]), flush=True)
        path.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
