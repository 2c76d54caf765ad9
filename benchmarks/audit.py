"""Study: ``cleanflush audit`` on gemlite's shipped ``configs/h100.json``, on an H100.

The job (benchmarks/jobs/gemlite_table.py) builds one gemlite layer per entry of a set and calls
each with one row, as a decoding model does: gemlite's pruner serves the entry from the table.
The audit re-tunes each entry against gemlite's own search for the call (``--search``: its
default ``fast`` search, or ``max``, the 120 configs of the search the table's first look used)
and prices the shipped config against the clean pick by both timers; ``--write`` makes the
corrected table.  Then, in fresh processes, the layers' decoding step (one call of each layer,
captured in a CUDA graph, no cleanflush code) is timed with the shipped table and with the
corrected one loaded over it, interleaved: what the corrected table gains as a model serves it.
The record says how many entries are wrong, undecided and right and by how much, that gain, and
the audit's own wall time per entry with where it went (goal: under 30 s an entry).

    python -m benchmarks.audit [OUT_DIR] [--set revsplitk-128] [--span FIRST:LAST] [--search fast|max]

Sets: ``revsplitk-128`` (the 24 group-128 GEMV_REVSPLITK entries, first), ``revsplitk-64`` (the
other 30), ``splitk`` (the 30 GEMV_SPLITK entries; its layers are built through gemlite's
``A8W8_INT8_dynamic`` and not yet run on a GPU).  A set too long for one command (10 minutes
on the lead's machine) runs in spans; each span is a record of its own
(OUT_DIR/audit-gemlite-SET[-FIRST-LAST].json).  Needs a CUDA GPU and ``pip install gemlite``.

Predictions, written before any GPU run (issue 69's first look: seven of these 24 entries
re-tuned against a 120-config search, five shipped 3.0-4.9% slower than the best re-tune's pick,
two shipped the best; one timer alone can be wrong about which config is right):

* ``revsplitk-128``, ``--search fast``: of 24 entries, 2-6 wrong (shipped 2-5% slower by both
  timers: 0.2-1.0 us a call each, 1-4 us a step over the wrong ones), 2-6 undecided, 12-20
  right, none not auditable.  Several shipped configs (``A_load_order: 1``) are outside the
  fast search, which holds ``A_load_order: 0`` only; they are priced against it all the same.
* ``--search max``: more wrong (4-9 of 24): the table was tuned over a larger search than fast.
* The corrected table's gain on the step, by the graph: 0.5-2% (the wrong layers are a few of
  24 and each loses a few percent), beyond the step's own spread of about 0.3%.
* Wall time per entry (fast search, about 16 configs after gemlite's pruner): 10-25 s, most of
  it compiling every config for the entry's shape (N and K are constexpr in gemlite's kernel:
  each shape compiles anew), then the sweep and the stable rule's timings again (2-5 s), both
  timers (2-4 s).  Under 30 s.  With ``max`` (about 60-120 configs after pruning): 60-150 s,
  compiling; over the goal.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import RESULTS, machine, progress


def audit(work: str, name: str, span: str | None, search: str) -> tuple[dict[str, Any], str]:
    """The audit of the set's entries: its record, and where the corrected table went."""
    from cleanflush._audit import run
    from cleanflush._audit.report import format_report

    job = [sys.executable, "-m", "benchmarks.jobs.gemlite_table", name, *([span] if span else []), "--search", search]
    corrected = os.path.join(work, "corrected")
    result, code = run.run(job, write=corrected, keep=os.path.join(work, "audit"))
    progress("audit done:\n" + format_report(result))
    return dict(result), os.path.join(corrected, "gemlite.json")


def step_gain(name: str, span: str | None, corrected: str) -> dict[str, Any]:
    """us per decoding step with the shipped table and with the corrected one, each in three fresh
    processes (interleaved inside each): their ratio, and the spread of the shipped step."""
    import gemlite

    shipped = os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json")
    runs: list[dict[str, float]] = []
    for _ in range(3):
        job = [sys.executable, "-m", "benchmarks.jobs.gemlite_table", name, *([span] if span else [])]
        out = subprocess.run([*job, "--step", shipped, corrected], capture_output=True, text=True)
        if out.returncode != 0:
            return {"error": out.stderr[-2000:]}
        runs.append(json.loads(out.stdout.splitlines()[-1]))
    ratios = [r[corrected] / r[shipped] for r in runs]
    return {
        "shipped_us": [r[shipped] for r in runs],
        "corrected_us": [r[corrected] for r in runs],
        "corrected_over_shipped": statistics.median(ratios),
        "ratios": ratios,
    }


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """What the record says at a glance: classes, the wrong entries' costs, where the time went."""
    entries = result["entries"]
    priced = [e for e in entries if e.get("seconds")]
    steps = sorted({s for e in priced for s in e["seconds"]})
    return {
        "classes": result["headline"]["classes"],
        "wrong": [
            {
                "key": e["key"],
                "ratio": e["ratio"],
                "cost_us": e["cost_us"],
                "shipped": e["shipped"],
                "clean": e["clean"],
            }
            for e in entries
            if e["class"] == "wrong"
        ],
        "undecided": [{"key": e["key"], "ratio": e["ratio"]} for e in entries if e["class"] == "undecided"],
        "seconds_per_entry": result["pricing_s"] / len(priced) if priced else None,
        "median_seconds_by_step": {s: statistics.median(e["seconds"].get(s, 0.0) for e in priced) for s in steps},
        "job_and_recording_s": result["elapsed_s"] - result["pricing_s"],
    }


def main(argv: list[str]) -> int:
    args = list(argv)
    out_dir = Path(args.pop(0)) if args and not args[0].startswith("--") else RESULTS / "h100"
    options = dict(zip(args[::2], args[1::2]))
    name, span, search = options.get("--set", "revsplitk-128"), options.get("--span"), options.get("--search", "fast")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cleanflush-audit-study-") as work:
        result, corrected = audit(work, name, span, search)
        gain = step_gain(name, span, corrected) if os.path.exists(corrected) else {"corrected": "nothing was wrong"}
    record = {
        "study": "audit",
        "machine": machine(),
        "set": name,
        "span": span,
        "search": search,
        "summary": summary(result),
        "step": gain,
        "wall_s": time.monotonic() - started,
        "audit": result,
    }
    suffix = f"-{span.replace(':', '-')}" if span else ""
    path = out_dir / f"audit-gemlite-{name}{suffix}{'-max' if search == 'max' else ''}.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    progress(f"wrote {path}: {json.dumps(record['summary'], indent=1)}\nstep: {json.dumps(gain)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
