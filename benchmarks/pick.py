"""Study: the stable pick rule against the autotuners' own (``fastest``) on real jobs, each in
fresh processes, both under the clean flush: ``cleanflush ab --compare pick --runs 4``.

Per job: how many decisions each rule picked alike in all runs (by pick, and by the
independent price), what the stable picks cost against the fastest by that price (each
decision and the job, weighted by calls), the programs Inductor compiled under each rule
timed end to end, the wall time each rule's runs took; and, for the
band's floor, how much one config's time moves between fresh processes: for every config
within 5% of a decision's fastest, the spread of the time each fastest run's autotuner
measured for it (max / min - 1), and of that time over its run's fastest (max - min).

    python -m benchmarks.pick [--runs N] [OUT_DIR [JOB ...]]      (needs a GPU and each job's library)

``--runs`` (default 4) is for a job whose runs take longer than one sitting allows (the Llama
decode compiles for a minute a run); each entry records its own.

The record (OUT_DIR/pick.json) keeps the jobs of an earlier call that this one did not run;
with ``CLEANFLUSH_PICK_FLOOR`` or ``CLEANFLUSH_PICK_AGAIN_MS`` set, a job's entry is named
with it (``entry_name``).

Each decision also keeps each fastest run's sweep (every config within ``SWEPT`` of its run's
fastest, as a ratio to it, in the autotuner's order) and each stable run's ``pick`` line.
From those, with no GPU, ``why`` says why a decision's stable picks moved, and ``replays``
applies other rules to the same sweeps (``REPLAYS``): how often each would have picked alike,
and at what cost by the autotuners' own timings averaged over the runs (not the independent
price).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cleanflush import _env, _pick
from cleanflush._ab import folders, read_decisions
from cleanflush._ab.compare import by_key
from cleanflush._pick import FASTEST, STABLE, Picked

from .common import RESULTS, kept_record, progress

JOBS = ("gemlite_decode", "liger_swiglu", "fla_gdn", "llama_decode")
RUNS = 4
NEAR = 0.05  # the configs whose spread between processes the band must cover: this close to the fastest
SWEPT = 0.10  # a sweep keeps the configs this close to its fastest: every replayed rule looks no further
GAP_WINDOW = 0.05  # the largest-gap replay cuts among the configs this close to the fastest
Key = tuple[str, str, str]
Runs = dict[str, list[dict[Key, dict[str, Any]]]]  # each rule's runs, in order: each decision's line


def rule(floor: str | None, again: str | None = None) -> dict[str, Any]:
    """The stable rule's settings a job ran under, so an entry says which rule it measured
    (``floor`` and ``again``: the variables' values, where set for the run)."""
    names = ("FLOOR", "WINDOW", "ROUNDS", "MOST_TIMED_AGAIN", "TICKS_ALIKE")
    settings: dict[str, Any] = {k.lower(): getattr(_pick, k) for k in names}
    settings["noise_over_configs"] = _pick.NOISE_OVER_CONFIGS.__name__
    settings["again_ms"] = _env.parse_again_ms(again, _pick.AGAIN_MS)  # None: as long as the autotuner's own timings
    return {**settings, "floor": _env.parse_floor(floor, _pick.FLOOR)}


def _again_label(value: str) -> str:
    full = _env.parse_again_ms(value, _pick.AGAIN_MS) is None  # what the rule reads as the autotuner's own length
    return f"again {value}" if full else f"again {value} ms"


# The variables a run of the study may set, each naming its entries: an option, not another rule.
OPTIONS: dict[str, Callable[[str], str]] = {_env.PICK_FLOOR_VAR: "floor {}%".format, _env.PICK_AGAIN_VAR: _again_label}


def entry_name(job: str, environ: dict[str, str]) -> str:
    """A job's entry, named with each option the run set: ``gemlite_decode again 50 ms``,
    ``gemlite_decode again full``."""
    return " ".join([job] + [label(environ[var]) for var, label in OPTIONS.items() if environ.get(var)])


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
    picks, runs_of = result["picks"], _runs(keep, runs)
    found.update(
        agreement=picks["agreement"],
        total=_total(picks["total"]),
        wall_s=picks["wall_s"],
        again_s=picks.get("again_s", {}).get(STABLE),
        decisions=_with_runs([_decision(d) for d in picks["decisions"]], runs_of),
        spread=_spread(runs_of),
        pricing_s=result["pricing_s"],
        end_to_end=_end_to_end(result.get("end_to_end")),
    )
    return found


def _end_to_end(timed: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the record keeps of ab's end-to-end timing: the whole job's summary, without samples."""
    if not timed:
        return None
    total = {k: v for k, v in (timed.get("total") or {}).items() if k != "program_samples"}
    return {"graphs": len(timed["graphs"]), "problems": timed["problems"], "total": total or None}


def _runs(keep: str, runs: int) -> Runs:
    """Each rule's runs in the order they ran: per run, each decision's first line with a pick,
    read as ``cleanflush ab`` reads and counts them."""
    found: Runs = {FASTEST: [], STABLE: []}
    for index in range(1, 2 * runs + 1):
        name = folders.run_folder(index, (FASTEST, STABLE))
        path = os.path.join(keep, name, "decisions.jsonl")
        if os.path.exists(path):
            lines, _ = read_decisions(path)
            found[name.split("-", 1)[1]].append({key: made[0] for key, made in by_key([lines]).items()})
    return found


def _with_runs(decisions: list[dict[str, Any]], runs: Runs) -> list[dict[str, Any]]:
    """The decisions with each fastest run's sweep and each stable run's pick line."""
    for d in decisions:
        key = (d["kind"], d["op"], d["key"])
        if d["kind"] != "inductor-coordesc":  # a walk's timings are its path, not a sweep to replay
            timed = [run[key]["timings_ms"] for run in runs[FASTEST] if run.get(key, {}).get("timings_ms")]
            d["sweeps"] = [sweep(timings) for timings in timed]
        d["stable_picks"] = [run[key].get("pick") for run in runs[STABLE] if key in run]
    return decisions


def why(decisions: list[dict[str, Any]]) -> dict[Key, list[str]]:
    """Each decision whose stable runs kept different configs, with why (``moved``), from a job's
    recorded decisions; a coordinate descent walk's start is its kernel's stable pick."""
    kernels = {(d["op"], d["key"]): d["stable_winners"] for d in decisions if d["kind"] == "inductor-kernel"}
    found = {}
    for d in decisions:
        if len(set(d["stable_winners"])) > 1 and "stable_picks" in d:
            start = kernels.get((d["op"], d["key"]), []) if d["kind"] == "inductor-coordesc" else None
            picks = [None if p is None else Picked.from_line(p) for p in d["stable_picks"]]
            found[(d["kind"], d["op"], d["key"])] = moved(d["stable_winners"], picks, start)
    return found


def _ran(timings: dict[str, Any]) -> dict[str, float]:
    """The configs that ran, with their times (ms), in the autotuner's order."""
    return {c: t for c, t in _pick.ran_only(timings).items() if t > 0}


def sweep(timings: dict[str, Any]) -> dict[str, float]:
    """A run's sweep as each config's time over its fastest, the configs within ``SWEPT`` of it,
    in the autotuner's order (failures left out)."""
    ran = _ran(timings)
    if not ran:
        return {}
    best = min(ran.values())
    return {c: round(t / best, 6) for c, t in ran.items() if t <= best * (1 + SWEPT)}


def moved(winners: list[str], picks: list[Picked[str] | None], start: list[str] | None = None) -> list[str]:
    """Why one decision's stable runs kept different configs, a line per cause, from what each
    run's rule found (``pick`` lines, in run order) or, for a coordinate descent walk, from
    where each walk started (``start``: the kernel's stable picks, in run order)."""
    if start is not None:
        return _walks_moved(winners, start)
    if any(p is None for p in picks) or len(picks) != len(winners):
        return ["some stable runs made no stable pick here (the rule did not reach the decision)"]
    found: list[str] = []
    ruled: list[tuple[int, Picked[str]]] = []
    for run, p in enumerate(filter(None, picks), 1):
        if p.too_noisy and p.noise is None:
            found.append(
                f"run {run}: a config was timed again in less than the autotuner's hooks alone took "
                f"({p.shared_ms * 1e3:.1f} us), so the autotuner's own pick stood"
            )
        elif p.too_noisy:
            found.append(
                f"run {run}: the rounds' noise was {p.noise:.1%}, over twice the {' '.join(_least(p))}, "
                "so the autotuner's own pick stood"
            )
        else:
            ruled.append((run, p))
            if p.band > _pick.least(p.floor, p.resolution):
                found.append(f"run {run}: the rounds' noise widened the band to {p.band:.1%}")
    configs = list(dict.fromkeys(c for _, p in ruled for c in p.candidates))  # first seen first
    for config in configs:
        inside = [run for run, p in ruled if config in p.candidates]
        if len(inside) == len(ruled):
            continue
        outside = [run for run, _ in ruled if run not in inside]
        over = ", ".join(_over_best(p, config) for _, p in ruled)
        found.append(
            f"{config}: within the band in run {_runs_text(inside)}, outside it in run {_runs_text(outside)} "
            f"(by run: {over})"
        )
    return found or ["the same configs were within the band in every run, in another order (the autotuner's own)"]


def _walks_moved(winners: list[str], start: list[str]) -> list[str]:
    if len(start) != len(winners):
        return ["the kernel's own decision was not recorded in every stable run: where each walk started is not known"]
    starts: dict[str, list[int]] = {}
    for run, config in enumerate(start, 1):
        starts.setdefault(config, []).append(run)
    found = []
    if len(starts) > 1:
        found.append(f"the walks started from {len(starts)} different configs (the kernel's stable pick moved)")
    for runs in starts.values():
        ends = {winners[run - 1] for run in runs}
        if len(ends) > 1:
            found.append(
                f"runs {_runs_text(runs)} started alike and ended at {len(ends)} configs: a step needs more than "
                "the floor (or the timer's resolution) in one timing of each neighbour, and some steps were within "
                "the runs' noise"
            )
    return found


def _least(pick: Picked[str], times: float = 1) -> tuple[str, str]:
    """``times`` what a run's band could not be narrower than (``_pick.least``), as a share, and
    its name: the floor, or the timer's resolution where that was larger."""
    least = _pick.least(pick.floor, pick.resolution)
    if least > pick.floor:
        return f"{times * least:.1%}", "timer's resolution"
    return f"{times * least:.0%}", "floor"


def _over_best(pick: Picked[str], config: str) -> str:
    """Where ``config`` stood in one run: over the best timed again, or why it was not timed again."""
    timed = pick.timed_again
    if config in timed:
        return f"{timed[config] / min(timed.values()) - 1:+.1%}"
    if timed:
        return "not timed again"
    if config == pick.fastest:
        return "alone within the window"
    window, _ = _least(pick, _pick.WINDOW)
    return f"over {window} in the sweep"  # the window held only the fastest


def _runs_text(runs: list[int]) -> str:
    return ", ".join(str(r) for r in runs)


def _first_within(within: float) -> Callable[[dict[str, float]], str]:
    def rule(swept: dict[str, float]) -> str:
        return next(c for c, r in swept.items() if r <= 1 + within)

    return rule


def _fastest(swept: dict[str, float]) -> str:
    return min(swept, key=swept.__getitem__)  # the first of equal times, as the autotuners' min()


def _largest_gap(swept: dict[str, float]) -> str:
    """The first in order among the configs under the widest gap between neighbouring times
    within ``GAP_WINDOW`` of the fastest (the next config, or the sweep's edge, closes it)."""
    near = sorted(r for r in swept.values() if r <= 1 + GAP_WINDOW)
    beyond = min((r for r in swept.values() if r > 1 + GAP_WINDOW), default=1 + SWEPT)
    edges = near + [beyond]
    cut = max(range(len(near)), key=lambda i: edges[i + 1] - edges[i])
    return next(c for c, r in swept.items() if r <= near[cut])


REPLAYS = {
    "fastest": _fastest,
    "first within 1%": _first_within(0.01),
    "first within 2%": _first_within(0.02),
    "first within 3%": _first_within(0.03),
    "largest gap": _largest_gap,
}


def replays(decisions: list[dict[str, Any]]) -> dict[str, Any]:
    """Each replayed rule on the fastest runs' sweeps: the decisions it picked alike in every
    run, and its picks' cost over each decision's best by the sweeps' mean ratio (a config
    missing from a run's sweep counts at ``SWEPT``); and the decisions whose recorded fastest
    picks are at their sweeps' fastest time in every run (``fastest_as_recorded``: all of them,
    or the sweeps are not what the autotuners compared)."""
    swept = [d for d in decisions if len(d.get("sweeps") or []) > 1 and all(d["sweeps"])]
    found: dict[str, Any] = {"decisions": len(swept)}
    for name, rule in REPLAYS.items():
        alike, costs = 0, []
        for d in swept:
            picks = [rule(s) for s in d["sweeps"]]
            alike += len(set(picks)) == 1
            mean = _mean_ratio(d["sweeps"])
            costs.append(statistics.fmean(mean[p] for p in picks) / min(mean.values()) - 1)
        found[name] = {
            "alike": alike,
            "cost_mean": statistics.fmean(costs) if costs else 0.0,
            "cost_max": max(costs, default=0.0),
        }
    # the sweeps are what the autotuners compared where each recorded pick is at its sweep's
    # fastest time (exact ties they break by other quantiles a sweep does not keep)
    found["fastest_as_recorded"] = sum(
        all(s.get(w) == min(s.values()) for s, w in zip(d["sweeps"], d["fastest_winners"])) for d in swept
    )
    return found


def _mean_ratio(sweeps: list[dict[str, float]]) -> dict[str, float]:
    configs = {c for s in sweeps for c in s}
    return {c: statistics.fmean(s.get(c, 1 + SWEPT) for s in sweeps) for c in configs}


def _decision(d: dict[str, Any]) -> dict[str, Any]:
    """What the record keeps of one decision (ab's, for fastest against stable): each side's
    picks, the stable runs' bands, and the price ratio."""
    kept = {k: d[k] for k in ("kind", "op", "key", "calls", "priced")}
    kept.update(fastest_winners=d["winners"][FASTEST], stable_winners=d["winners"][STABLE])
    kept.update(bands=d["bands"][STABLE], candidates=len(d["candidates"][STABLE]))
    if "ratio" in d:
        kept["stable_over_fastest"] = d["ratio"]
    for k in ("noise", "not_priced"):
        if k in d:
            kept[k] = d[k]
    return kept


def _total(total: dict[str, Any]) -> dict[str, Any]:
    """What the record keeps of ab's job total (for fastest against stable)."""
    kept = {k: total[k] for k in ("priced", "counted", "ratio")}
    return {**kept, "fastest_us": total["us"][FASTEST], "stable_us": total["us"][STABLE]}


def _spread(runs_of: Runs) -> dict[str, Any]:
    """One config's time between fresh processes, as the fastest runs' autotuners measured it."""
    runs = [[d for d in run.values() if d.get("timings_ms")] for run in runs_of[FASTEST]]
    times: dict[tuple[str, str, str, str], list[float]] = {}
    ratios: dict[tuple[str, str, str, str], list[float]] = {}
    for run in runs:
        for d in run:
            finite = _ran(d["timings_ms"])
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


def rounds_spread(decisions: list[dict[str, Any]]) -> dict[str, Any]:
    """How far a config's own time (less what every timing shares) moved between the two
    rounds timed again, over their mean: each config of each stable run's ``pick`` line. The
    noise the rule's band stands on; shorter timings again widen it."""
    spreads = []
    for decision in decisions:
        for line in filter(None, decision.get("stable_picks", [])):  # None: a run with no pick line there
            pick = Picked.from_line(line)
            held = pick.shared_ms
            for times in pick.rounds_ms.values():
                again = [t - held for t in times[1:]]
                if len(again) == 2:
                    spreads.append(abs(again[1] - again[0]) / statistics.mean(again))
    return _quantiles(spreads)


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
    record = kept_record(path, "pick")
    work = tempfile.mkdtemp(prefix="cleanflush-pick-")
    floor, again = os.environ.get(_env.PICK_FLOOR_VAR), os.environ.get(_env.PICK_AGAIN_VAR)
    for job in jobs:  # written after each job: a cut-off run keeps what it finished
        name = entry_name(job, dict(os.environ))
        progress(f"pick: {name}")
        entry = {"date": record["machine"]["date"], "runs": runs, "rule": rule(floor, again)}
        record["jobs"][name] = {**entry, **run_job(job, work, runs)}
        print("\n".join(record["jobs"][name]["report"][-30:]), flush=True)
        path.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
