"""Summarise several `cleanflush verify --controls --json` records (a JSON list of them):
wrong verdicts, and per flush the tightest margin and the Nsight Compute bytes.

    python -m benchmarks.controls_summary benchmarks/results/h200/verify-controls.json
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict

from cleanflush._verify.verdict import expected


def summary(records: list[dict]) -> str:
    margins: dict[str, list[float]] = defaultdict(list)
    ncu: dict[str, list[float]] = defaultdict(list)
    wrong, total = [], 0
    for i, record in enumerate(records, 1):
        for name, verdict in record["verdict"]["candidates"].items():
            total += 1
            if verdict["result"] != expected(name):
                wrong.append(f"run {i}: {name} judged {verdict['result']}")
            if verdict["margin"] is not None:
                margins[name].append(verdict["margin"])
            if "error" not in (record.get("ncu") or {"error": 1}) and name in record["ncu"]:
                ncu[name].append(record["ncu"][name])
    lines = [f"{len(records)} runs of `cleanflush verify --controls`: {len(wrong)} wrong verdicts of {total}"]
    lines += [f"  {w}" for w in wrong]
    lines.append(f"{'flush':34s} {'must be':8s} {'tightest margin':>16s} {'widest':>8s}  ncu MB after it")
    for name, values in margins.items():
        must = expected(name)
        tight, wide = (min(values), max(values)) if must == "PASS" else (max(values), min(values))
        mb = f"{min(ncu[name]):.3f}-{max(ncu[name]):.3f}" if ncu[name] else "-"
        lines.append(f"{name:34s} {must:8s} {tight:+16.2f} {wide:+8.2f}  {mb}")
    lines.append("(margin: share of the stock penalty removed minus 60%; positive is the PASS side)")
    return "\n".join(lines)


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(summary(json.load(f)))
