"""Study: one pick for every rank and every run, on real jobs (docs/pick.md, "One pick for every
rank and every run").

**Ranks.**  The job as ``--ranks`` ranks of one ``torchrun`` job on one GPU (gloo; every rank
tunes at once, the noisiest case), under ``CLEANFLUSH_PICK=stable``, with the store off and on
(``CLEANFLUSH_PICK_STORE``): per side, the decisions every rank picked alike and each rank's
wall time in the job (its tuning, mostly); and, for the Triton decisions, the independent price
of every pick any rank kept (``cleanflush ab``'s pricing process: CUPTI after a plain read), so
that the agreed pick is priced against each rank's own.

**Runs.**  ``--runs`` fresh single-process runs of the job sharing one ``CLEANFLUSH_PICK_FILE``,
under ``stable``: the decisions every run picked alike, and each run's wall time (the first
tunes; the others take the file's picks).

Expected before measuring, on an H100 (4 ranks): store off, every rank alike in most
decisions already on one GPU (a study of 4 ranks on one H100 found gemlite and fla alike in
every decision); store on, every decision alike; the agreed pick within the 1% floor of the
ranks' own by price; each rank's wall time with the store no higher, and lower only where a
rank reaches a key after another published it (ranks that tune at once all tune); with the
pick file every run alike, runs 2 on far shorter (no tuning).

    python -m benchmarks.ranks [--ranks N] [--runs N] [--only-runs] OUT_DIR [JOB ...]   (a GPU, each job's library)

``--only-runs`` makes the pick-file runs again and keeps the ranks' sides the record has.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cleanflush._ab import read_decisions

from .common import RESULTS, kept_record, now, progress

JOBS = ("gemlite_decode", "fla_gdn", "llama_decode")
RANKS, RUNS = 4, 4
TIMEOUT_S = 900
Key = tuple[str, str, str]


def environment(work: Path, **changes: str) -> dict[str, str]:
    """A launch's environment: cleanflush on under the stable rule, fresh caches in ``work``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANFLUSH")}
    env.update(CLEANFLUSH="1", CLEANFLUSH_PICK="stable", TORCHINDUCTOR_FORCE_DISABLE_CACHES="1")
    env.update(TRITON_CACHE_DIR=str(work / "triton"), TORCHINDUCTOR_CACHE_DIR=str(work / "inductor"))
    env["CLEANFLUSH_DECISIONS"] = str(work / "decisions.jsonl")
    return {**env, **changes}


def launch(command: list[str], work: Path, **changes: str) -> dict[str, Any]:
    """One launch of ``command`` in a fresh ``work`` folder: its decisions and wall time."""
    work.mkdir(parents=True)
    started = time.monotonic()
    child = subprocess.run(command, env=environment(work, **changes), capture_output=True, text=True, timeout=TIMEOUT_S)
    found: dict[str, Any] = {"exit": child.returncode, "wall_s": time.monotonic() - started}
    if child.returncode != 0:
        found["error"] = child.stderr[-3000:]
    lines, _ = read_decisions(str(work / "decisions.jsonl"))
    found["lines"] = [d for d in lines if d["kind"] != "calls"]
    return found


def by_decision(lines: list[dict[str, Any]], who: str = "rank") -> dict[Key, dict[Any, str]]:
    """Each decision's pick per rank (or per run), the first line of each."""
    found: dict[Key, dict[Any, str]] = {}
    for d in lines:
        if d.get("winner") is not None:
            found.setdefault((d["kind"], d["op"], d["key"]), {}).setdefault(d.get(who, 0), d["winner"])
    return found


def agreement(picks: dict[Key, dict[Any, str]], every: int) -> dict[str, int]:
    """The decisions made by all ``every`` ranks (or runs), and how many they all picked alike."""
    made = [p for p in picks.values() if len(p) == every]
    return {"decisions": len(made), "alike": sum(len(set(p.values())) == 1 for p in made)}


def ranks_side(job: str, ranks: int, work: Path, store: str, calls: Path) -> dict[str, Any]:
    """The job on ``ranks`` ranks with the store ``store`` (on or off)."""
    times = work / "times"
    times.mkdir(parents=True)
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}"]
    command += ["-m", "benchmarks.jobs.ranked", job]
    found = launch(command, work / "run", CLEANFLUSH_PICK_STORE=store, RANKED_OUT=str(times),
                   CLEANFLUSH_AB_CALLS=str(calls))  # fmt: skip
    found["rank_s"] = {int(p.stem.split("-")[1]): json.loads(p.read_text())["job_s"] for p in times.glob("rank-*")}
    found["agreement"] = agreement(by_decision(found["lines"]), ranks)
    found["agreed_lines"] = sum("agreed" in d for d in found["lines"])
    return found


def to_price(sides: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The Triton decisions whose ranks kept more than one config on either side, with every
    config any rank kept, and the call a run recorded for them."""
    wanted = []
    picks = {store: by_decision(side["lines"]) for store, side in sides.items()}
    calls: dict[Key, dict[str, Any]] = {}
    for side in sides.values():
        for d in side["lines"]:
            if "file" in d.get("call", {}):
                calls.setdefault((d["kind"], d["op"], d["key"]), d["call"])
    for key in picks["off"]:
        kept = set(picks["off"][key].values()) | set(picks["on"].get(key, {}).values())
        call = calls.get(key, {})
        if key[0] == "triton" and len(kept) > 1 and "file" in call:
            wanted.append({"key": list(key), "file": call["file"], "error": None, "candidates": sorted(kept)})
    return wanted


def price(wanted: list[dict[str, Any]], calls: Path, work: Path) -> list[dict[str, Any]]:
    """The independent prices of ``wanted`` (``cleanflush ab``'s pricing process)."""
    if not wanted:
        return []
    spec, out = work / "spec.json", work / "prices.json"
    spec.write_text(json.dumps({"decisions": wanted, "calls_folder": str(calls)}))
    code = "import sys; from cleanflush._ab.prices import main; sys.exit(main())"
    env = {**os.environ, "TEARDOWN_CUPTI": "1"}
    subprocess.run([sys.executable, "-c", code, str(spec), str(out)], env=env, timeout=TIMEOUT_S, check=True)
    priced: list[dict[str, Any]] = json.loads(out.read_text())
    return priced


def agreed_over_own(sides: dict[str, dict[str, Any]], priced: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per priced decision: the agreed pick's price over the mean of the ranks' own picks (store off)."""
    found = []
    off, on = (by_decision(sides[s]["lines"]) for s in ("off", "on"))
    for p in priced:
        key = tuple(p["key"])
        us = {label: v["us"] for label, v in (p.get("prices") or {}).items()}
        own = [us[w] for w in off.get(key, {}).values() if w in us]
        agreed = [us[w] for w in set(on.get(key, {}).values()) if w in us]
        if own and len(agreed) == 1:
            found.append({"key": list(key), "ratio": agreed[0] / statistics.fmean(own), "error": p.get("error")})
    return found


def runs_side(job: str, runs: int, work: Path) -> dict[str, Any]:
    """``runs`` fresh runs sharing one pick file."""
    picks_file = work / "picks.json"
    each = [
        launch([sys.executable, "-m", f"benchmarks.jobs.{job}"], work / f"run{n}", CLEANFLUSH_PICK_FILE=str(picks_file))
        for n in range(1, runs + 1)
    ]
    lines = [dict(d, run=n) for n, run in enumerate(each) for d in run["lines"]]
    return {
        "date": now(),
        "wall_s": [run["wall_s"] for run in each],
        "exit": [run["exit"] for run in each],
        "agreement": agreement(by_decision(lines, who="run"), runs),
        "taken_from_file": [sum(d.get("agreed") == "the pick file" for d in run["lines"]) for run in each],
        "errors": [run["error"] for run in each if "error" in run],
    }


def run_job(job: str, ranks: int, runs: int, work: Path, save: Callable[[dict[str, Any]], None]) -> None:
    """The ranks' two sides, their prices, then the pick-file runs; ``save`` gets the job's
    record after the sides and again after the runs (a cut-off run keeps the sides)."""
    calls = work / "calls"
    calls.mkdir(parents=True)
    sides = {}
    for store in ("off", "on"):
        progress(f"ranks: {job}, {ranks} ranks, store {store}")
        sides[store] = ranks_side(job, ranks, work / f"ranks-{store}", store, calls)
    progress(f"ranks: {job}, pricing")
    priced = price(to_price(sides), calls, work)
    found = {
        "ranks": ranks,
        "sides": {store: {k: v for k, v in side.items() if k != "lines"} for store, side in sides.items()},
        "agreed_over_own": agreed_over_own(sides, priced),
        "runs": runs_side(job, 0, work / "runs"),  # none yet
    }
    save(found)
    progress(f"ranks: {job}, {runs} runs with a pick file")
    save({**found, "runs": runs_side(job, runs, work / "runs")})


def main(argv: list[str] | None = None) -> int:
    args = list(argv if argv is not None else sys.argv[1:])
    ranks, runs, only_runs = RANKS, RUNS, False
    while args[:1] in (["--ranks"], ["--runs"], ["--only-runs"]):
        if args[0] == "--only-runs":  # the pick-file runs again, the ranks' sides kept from the record
            only_runs, args = True, args[1:]
            continue
        if args[0] == "--ranks":
            ranks = int(args[1])
        else:
            runs = int(args[1])
        args = args[2:]
    out = Path(args[0]) if args else RESULTS / "h100"
    out.mkdir(parents=True, exist_ok=True)
    path = out / "ranks.json"
    record = kept_record(path, "ranks")
    missing = [job for job in args[1:] or JOBS if only_runs and "sides" not in record["jobs"].get(job, {})]
    if missing:
        print(f"--only-runs keeps the ranks' sides, and {path} has none for {', '.join(missing)}", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="cleanflush-ranks-"))

    def save(job: str, found: dict[str, Any]) -> None:
        """``found`` into the job's record, written at once: a cut-off run keeps what it finished."""
        record["jobs"][job] = {**record["jobs"].get(job, {}), **found}
        path.write_text(json.dumps(record, indent=1) + "\n")

    for job in args[1:] or JOBS:
        if only_runs:
            progress(f"ranks: {job}, {runs} runs with a pick file")
            save(job, {"runs": runs_side(job, runs, work / job / "runs")})
        else:
            run_job(
                job,
                ranks,
                runs,
                work / job,
                lambda found, job=job: save(job, {"date": record["machine"]["date"], **found}),
            )
        summary = {k: v["agreement"] for k, v in record["jobs"][job]["sides"].items()}
        print(job, json.dumps(summary), json.dumps(record["jobs"][job]["runs"]["agreement"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
