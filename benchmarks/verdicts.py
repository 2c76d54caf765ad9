"""Study: how often ``cleanflush verify`` is wrong, on shapes and dtypes it was not tuned on.

In one process (``cleanflush verify`` measures the same way, one process per command), it
measures verify records exactly as the command does (``_verify.measure``) and judges them
with the command's verdict:

* the ``--controls`` mode first, at three shapes: every clean policy must PASS and every
  broken flush FAIL;
* then sweeps over every shape x dtype x clean policy (the policy set for the record as
  ``CLEANFLUSH=<policy>`` would), round-robin, until ``seconds`` have passed, so a cut-off
  run still covers every case about as often.

A healthy patch judged FAIL is a wrong verdict.  NO-PENALTY is counted apart, with the
penalty and noise it saw.  Each rule's tightest margin is reported: the share rule's margin
as the verdict computes it, the warm-data rule's in us above its floor less its slack.

Writes ``verdicts.json`` (every record, after each one) and prints the summary;
``python -m benchmarks.verdicts FILE`` judges the records of FILE again with this version's
verdict and prints it.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from cleanflush._verify.controls import CONTROLS
from cleanflush._verify.measure import PRESETS
from cleanflush._verify.verdict import expected, judge_candidate, judge_controls, penalty_share

from .common import machine, progress

SHAPES = [*PRESETS["llama-3.1-8b"], (2048, 2048)]
CONTROL_CASES = [((4096, 4096), "bfloat16"), ((4096, 14336), "float16"), ((128256, 4096), "bfloat16")]
DTYPES = ("bfloat16", "float16")
POLICIES = ("write-read", "read")
RULES = ("do_bench", "do_bench rounds", "inductor", "inductor rounds", "graph_us")  # rule_margins' keys
LABELS = ("do_bench", "rounds", "Inductor", "rounds", "graph us")  # their columns: the tightest margin


def run(out: Path, shapes: list[tuple[int, int]] | None = None, rounds: int = 5, seconds: float = 420.0) -> Path:
    import cleanflush
    from cleanflush._verify import Options, measure

    path = Path(out) / "verdicts.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    records: list[dict[str, Any]] = []
    header = machine()

    def one(n: int, k: int, dtype: str, controls: bool) -> None:
        options = Options(n=n, k=k, dtype=dtype, device=0, rounds=rounds, ncu=False, controls=controls, json_path=None)
        record = measure.measure(options, lambda step: None)
        record["verdict"] = judge_controls(record) if controls else judge_candidate(record, record["policy"])
        records.append(record)
        path.write_text(json.dumps({"machine": header, "records": records}, default=str) + "\n")
        what = "controls" if controls else record["policy"]
        progress(f"verdicts: {n}x{k} {dtype} {what}: {record['verdict']['result']}")

    for (n, k), dtype in CONTROL_CASES:
        one(n, k, dtype, controls=True)
    while time.perf_counter() - start < seconds:
        for n, k in shapes or SHAPES:
            for dtype in DTYPES:
                for policy in POLICIES:
                    if time.perf_counter() - start >= seconds:
                        break
                    with cleanflush.policy(policy):
                        one(n, k, dtype, controls=False)
    print(summary(records))
    return path


def _healthy(records: list[dict[str, Any]]) -> list[tuple[dict[str, Any], str, dict[str, Any]]]:
    """(record, candidate, verdict) for every clean policy judged, controls runs included."""
    found = []
    for record in records:
        v = record["verdict"]
        for name, verdict in v["candidates"].items() if "candidates" in v else [(record["policy"], v)]:
            if name not in CONTROLS:
                found.append((record, name, verdict))
    return found


def summary(records: list[dict[str, Any]]) -> str:
    healthy = _healthy(records)
    wrong = [(r, n, v) for r, n, v in healthy if v["result"] == "FAIL"]
    lines = [f"{len(records)} verify records; {len(healthy)} verdicts on clean policies, {len(wrong)} FAIL (wrong)"]
    for record, name, verdict in wrong:
        k = record["kernel"]
        lines.append(f"  WRONG {k['n']}x{k['k']} {k['dtype']} {name}:")
        lines += [f"    {reason}" for reason in verdict["reasons"] if reason.startswith("FAIL")]

    controls = [r for r in records if "candidates" in r["verdict"]]
    control_wrong = sum(
        v["result"] != expected(name) for r in controls for name, v in r["verdict"]["candidates"].items()
    )
    control_total = sum(len(r["verdict"]["candidates"]) for r in controls)
    shapes = sorted({(r["kernel"]["n"], r["kernel"]["k"], r["kernel"]["dtype"]) for r in controls})
    for record in controls:
        k = record["kernel"]
        lines += [f"  WRONG control run {k['n']}x{k['k']} {k['dtype']}: {name}" for name in record["verdict"]["wrong"]]
    lines.append(
        f"controls mode: {len(controls)} runs at {', '.join(f'{n}x{k} {d}' for n, k, d in shapes)}: "
        f"{control_wrong} wrong of {control_total} judged"
    )

    lines.append("")
    header = f"{'GEMM':24s} {'policy':10s} {'n':>3s} {'PASS':>4s} {'NO-P':>4s} {'FAIL':>4s}"
    lines.append(header + "  penalty us (median)  noise us" + "".join(f"  {label:>8s}" for label in LABELS))
    cases: dict[tuple[str, str], list[tuple[dict[str, Any], dict[str, Any]]]] = defaultdict(list)
    for record, name, verdict in healthy:
        k = record["kernel"]
        cases[(f"{k['n']}x{k['k']} {k['dtype']}", name)].append((record, verdict))
    tight: dict[str, float] = {}
    for (gemm, name), items in cases.items():
        counts = {result: sum(v["result"] == result for _, v in items) for result in ("PASS", "NO-PENALTY", "FAIL")}
        penalties, noises, margins = [], [], defaultdict(list)
        for record, _ in items:
            t = record["timings_us"]
            shares = penalty_share(t["do_bench"]["stock"], t["do_bench"][name], t["reference"][name])
            penalties.append(shares["penalty_us"])
            noises.append(shares["noise_us"])
            for rule, margin in rule_margins(record, name).items():
                margins[rule].append(margin)
        row = f"{gemm:24s} {name:10s} {len(items):3d} {counts['PASS']:4d} {counts['NO-PENALTY']:4d} {counts['FAIL']:4d}"
        row += f"  {statistics.median(penalties):+19.2f}  {max(noises):8.2f}"
        for rule in RULES:
            value = min(margins[rule]) if margins[rule] else None
            row += f"  {value:+8.2f}" if value is not None else f"  {'-':>8s}"
            if value is not None:
                tight[rule] = min(tight.get(rule, value), value)
        lines.append(row)
    lines.append("")
    lines.append(
        "tightest over all: "
        + ", ".join(f"{rule} {tight[rule]:+.2f}" for rule in RULES if rule in tight)
        + " (share rules: median share removed - 60% + noise/penalty; rounds: the share of the round "
        "that decides the sign test - 60%; graph: us above the floor less its slack; negative fails; "
        "NO-PENALTY rows have no share margin)"
    )
    return "\n".join(lines)


def rule_margins(record: dict[str, Any], name: str) -> dict[str, float]:
    """Each timing rule's margin for ``name`` in ``record`` (negative: the rule fails)."""
    from cleanflush._verify.verdict import judge_timing, share_rules, warm_floor

    t, margins = record["timings_us"], {}
    timed = {"do_bench": (t["do_bench"]["stock"], t["do_bench"][name], t["reference"][name])}
    inductor = t.get("inductor", {})
    if name in inductor:
        timed["inductor"] = (inductor["stock"], inductor[name], t["reference_min"][name])
    for method, (stock, candidate, reference) in timed.items():
        if judge_timing(method, stock, candidate, reference, None)[1] is None:
            continue  # NO-PENALTY (the verdict's own rule): no share rule applies
        rules = share_rules(stock, candidate, reference)
        margins[method] = rules["median"]
        if rules["rounds"] is not None:
            margins[f"{method} rounds"] = rules["rounds"]
    graph = t.get("rotating_graph")
    if graph:
        floor, slack, _ = warm_floor(graph, t["reference"][name], t["do_bench"][name])
        margins["graph_us"] = statistics.median(t["do_bench"][name]) - (floor - slack)
    return margins


def rejudge(record: dict[str, Any]) -> dict[str, Any]:
    """The record with the verdict of this version of cleanflush."""
    controls = any(name in CONTROLS for name in record["candidates"])
    verdict = judge_controls(record) if controls else judge_candidate(record, record["policy"])
    return {**record, "verdict": verdict}


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        data = json.load(f)
    for run in data.get("runs", [data]):
        print(f"run {run.get('run', '')}: {run.get('note', '')}".rstrip(": "))
        targets = run.get("targets", [])  # stored once per run: they only add reasons to a failed count
        print(summary([rejudge({"targets": targets, **record}) for record in run["records"]]) + "\n")
