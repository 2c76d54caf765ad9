"""Study: ``cleanflush ab`` on two real libraries' own autotuning, held against a truth that
shares no code with it, and what its prices cost.

For each job of ``JOBS`` (benchmarks/jobs: gemlite's low-bit GEMV/GEMM, Liger-Kernel's fused
SwiGLU, at Llama 3.1 8B decode shapes and one prefill shape): ``cleanflush ab --runs 3``, its
record kept; then ``benchmarks.truth`` times every config each decision's runs timed with a
rotating CUDA graph, and says for each decision whether ab's class holds by that truth (a real
change: every stock pick slower than every clean pick by more than the floor).  The cost:
the wall time the prices took against the rest of the ab run.

    python -m benchmarks.ab_libs [OUT_DIR [JOB ...]]      (needs a GPU, gemlite and liger-kernel)

The record (OUT_DIR/ab-libs.json) keeps the jobs of an earlier call that this one did not run;
each job's entry says when it ran and on which cleanflush.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import RESULTS, kept_record, progress

JOBS = ("gemlite_decode", "liger_swiglu")
RUNS = 3


def run_job(job: str, work: str, runs: int = RUNS) -> dict[str, Any]:
    keep, record, truth = (os.path.join(work, name) for name in (f"ab-{job}", f"ab-{job}.json", f"truth-{job}.json"))
    started = time.monotonic()
    ab = subprocess.run(
        [
            sys.executable,
            "-m",
            "cleanflush",
            "ab",
            "--runs",
            str(runs),
            "--keep",
            keep,
            "--json",
            record,
            "--",
            sys.executable,
            "-m",
            f"benchmarks.jobs.{job}",
        ],
        capture_output=True,
        text=True,
    )
    found: dict[str, Any] = {"job": job, "ab_exit": ab.returncode, "ab_wall_s": time.monotonic() - started}
    found["report"] = ab.stdout.split("cleanflush ab: ", 1)[-1].splitlines()
    if not os.path.exists(record):
        return {**found, "error": ab.stderr[-2000:]}
    with open(record, encoding="utf-8") as f:
        found["ab"] = json.load(f)
    made = subprocess.run(
        [sys.executable, "-m", "benchmarks.truth", keep, record, truth], capture_output=True, text=True
    )
    if made.returncode == 0:
        with open(truth, encoding="utf-8") as f:
            found["truth"] = json.load(f)
    else:
        found["truth_error"] = made.stderr[-2000:]
    pricing = found["ab"].get("pricing_s", 0.0)
    found["pricing_share"] = pricing / max(found["ab"]["elapsed_s"] - pricing, 1e-9)
    return found


def summary(found: dict[str, Any]) -> dict[str, Any]:
    """What the study says of one job: ab's classes, how many of its changes are real, how
    many real changes it missed, and how far its prices are from the truth."""
    rows = (found.get("truth") or {}).get("decisions", [])
    verdicts = [r.get("verdict") for r in rows]
    ratios = [x for r in rows for x in (r.get("price_over_truth") or {}).values()]
    return {
        "classes": found.get("ab", {}).get("comparison", {}).get("classes"),
        "changed_real": verdicts.count("changed, and real"),
        "changed_not_real": verdicts.count("changed, not real"),
        "real_missed": verdicts.count("real change missed"),
        "price_over_truth": [min(ratios), max(ratios)] if ratios else None,
        "pricing_share": found.get("pricing_share"),
    }


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    out = Path(args[0]) if args else RESULTS / "h200"
    jobs = args[1:] or JOBS
    out.mkdir(parents=True, exist_ok=True)
    work = tempfile.mkdtemp(prefix="cleanflush-ab-libs-")
    path = out / "ab-libs.json"
    record = kept_record(path, "ab_libs")
    record["runs"] = RUNS
    for job in jobs:  # the record is written after each job: a cut-off run keeps what it finished
        progress(f"ab_libs: {job}")
        stamp = {"date": record["machine"]["date"], "cleanflush": record["machine"]["cleanflush"]}
        found = record["jobs"][job] = {**stamp, **run_job(job, work)}
        found["summary"] = summary(found)
        print("\n".join(found["report"][-25:]), flush=True)
        print(json.dumps({job: found["summary"]}), flush=True)
        path.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
