"""``cleanflush ab -- COMMAND``: run the user's own job with the stock flush and with a clean
one, and show which autotuning decisions the dirty flush changed.

Each run gets fresh, private cache folders (Triton's kernel and autotuning caches, Inductor's
FX and autotune caches, with Inductor's caches forced off), so every run really tunes; the
command itself is not changed, and its output passes through.  The decisions come from
``CLEANFLUSH_DECISIONS`` (patches/decisions.py), which every process of the run appends to,
autotuning workers included.  ``compare`` needs no GPU.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Any

from ._env import DECISIONS_VAR, DEFAULT_POLICY, POLICY_VAR
from ._stats import quartiles

SCHEMA = 1
STOCK = "write"


def run_env(base: dict[str, str], policy: str, folder: str) -> dict[str, str]:
    """The environment of one run: its policy, its decisions file, caches of its own."""
    os.makedirs(folder, exist_ok=True)
    return {
        **base,
        POLICY_VAR: policy,
        DECISIONS_VAR: os.path.join(folder, "decisions.jsonl"),
        "TRITON_CACHE_DIR": os.path.join(folder, "triton"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(folder, "inductor"),
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
    }


def decision(line: str) -> dict[str, Any]:
    """One decisions-file line, checked; ValueError saying what is wrong with it.  Timings
    that are not finite (Triton and Inductor time a config that failed as ``inf``) are left
    out: they time nothing."""
    d = json.loads(line)
    if not isinstance(d, dict):
        raise ValueError(f"not a JSON object but {type(d).__name__}")
    missing = [k for k in ("kind", "op", "key", "timings_ms", "winner") if k not in d]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    timings = d["timings_ms"]
    if not isinstance(timings, dict) or not all(isinstance(t, (int, float)) for t in timings.values()):
        raise ValueError("timings_ms is not a mapping of choices to numbers")
    if not all(isinstance(d[k], str) for k in ("kind", "op", "key")) or not isinstance(d["winner"], (str, type(None))):
        raise ValueError("kind, op, key or winner is not a string")
    finite = {label: float(t) for label, t in timings.items() if math.isfinite(t)}
    return {**d, "timings_ms": finite, "failed_choices": sorted(set(timings) - set(finite))}


def read_decisions(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The decisions a run recorded, and one line for each line of the file that is not one
    (a worker killed mid-write leaves a torn line): those are skipped, the rest are kept."""
    if not os.path.exists(path):
        return [], []
    found, bad = [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                found.append(decision(line))
            except ValueError as exc:  # json's own errors are ValueErrors too
                bad.append(f"{path}:{number}: skipped, {exc}"[:300])
    return found, bad


def _key(d: dict[str, Any]) -> tuple[str, str, str]:
    return d["kind"], d["op"], d["key"]


def _modal(winners: list[str]) -> str:
    counts = Counter(winners)
    best = max(counts.values())
    return next(w for w in winners if counts[w] == best)  # ties: the earliest run's


def compare(stock_runs: list[list[dict[str, Any]]], clean_runs: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Match every decision across the runs and say which ones the dirty flush changed.

    Per decision (kind, op, key): each side's winner is the one most runs picked; each
    choice's timing is the median over that side's runs.  A changed decision's cost is how
    much slower the stock winner is than the clean winner under the clean timing.
    """

    def by_key(runs: list[list[dict[str, Any]]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
        found: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for run in runs:
            seen = set()
            for d in run:
                if _key(d) not in seen and d.get("winner") is not None:  # first tuning of a key per run
                    seen.add(_key(d))
                    found.setdefault(_key(d), []).append(d)
        return found

    stock, clean = by_key(stock_runs), by_key(clean_runs)
    decisions: list[dict[str, Any]] = []
    ratios: list[float] = []
    for key in [k for k in stock if k in clean]:
        s_time = _medians(stock[key])
        c_time = _medians(clean[key])
        s_win, c_win = _modal([d["winner"] for d in stock[key]]), _modal([d["winner"] for d in clean[key]])
        both = [label for label in c_time if label in s_time and c_time[label] > 0]
        ratios += [s_time[label] / c_time[label] for label in both]
        cost = (c_time[s_win] / c_time[c_win] - 1) if s_win in c_time and c_time.get(c_win) else None
        decisions.append(
            {
                "kind": key[0],
                "op": key[1],
                "key": key[2],
                "changed": s_win != c_win,
                "stock_winner": s_win,
                "clean_winner": c_win,
                "stock_winner_slower_by": cost,
                "choices": len(both),
                "timings_ms": {label: {"stock": s_time[label], "clean": c_time[label]} for label in both},
            }
        )
    changed = sorted((d for d in decisions if d["changed"]), key=lambda d: -(d["stock_winner_slower_by"] or 0.0))
    q1, median, q3 = quartiles(ratios) if ratios else (None, None, None)
    return {
        "decisions": decisions,
        "changed": changed,
        "only_stock": [list(k) for k in stock if k not in clean],
        "only_clean": [list(k) for k in clean if k not in stock],
        "ratio_stock_over_clean": {"n": len(ratios), "q1": q1, "median": median, "q3": q3, "values": ratios},
    }


def _medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    labels = [label for label in runs[0]["timings_ms"] if all(label in d["timings_ms"] for d in runs)]
    return {label: statistics.median(d["timings_ms"][label] for d in runs) for label in labels}


def short(label: str, width: int = 90) -> str:
    """``label``, cut to ``width`` characters with "..." where it is longer."""
    return label if len(label) <= width else label[: width - 3] + "..."


def format_report(result: dict[str, Any]) -> str:
    cmp = result["comparison"]
    kinds = Counter(d["kind"] for d in cmp["decisions"])
    lines = [
        f"cleanflush ab: {' '.join(result['command'])}",
        f"  stock flush ({STOCK}) against {result['policy']}, {result['runs']} run(s) each, interleaved, "
        "fresh caches per run",
        "",
        f"autotuning decisions matched in both: {len(cmp['decisions'])} "
        f"(Triton autotuner {kinds.get('triton', 0)}, Inductor max-autotune {kinds.get('inductor', 0)}, "
        f"Inductor kernel configs {kinds.get('inductor-kernel', 0)})",
    ]
    if not cmp["decisions"]:
        lines.append(
            "no autotuning decision was recorded: does the command autotune (Triton @autotune, "
            "torch.compile mode='max-autotune')?"
        )
    elif not cmp["changed"]:
        lines.append("the dirty flush did not change any decision here")
    else:
        lines.append(f"changed by the dirty flush: {len(cmp['changed'])} of {len(cmp['decisions'])}")
        for d in cmp["changed"]:
            cost = d["stock_winner_slower_by"]
            slower = f"{cost:+.1%} slower by the clean timing" if cost is not None else "not timed in the clean run"
            lines += [
                f"  {d['kind']} {d['op']} [{d['key']}]",
                f"    stock picked {short(d['stock_winner'])}: {slower}",
                f"    clean picked {short(d['clean_winner'])}",
            ]
    r = cmp["ratio_stock_over_clean"]
    if r["n"]:
        lines.append(
            f"stock / clean timing over all {r['n']} choices: median {r['median']:.3f} "
            f"(q1 {r['q1']:.3f}, q3 {r['q3']:.3f})"
        )
    for side in ("only_stock", "only_clean"):
        if cmp[side]:
            lines.append(f"decisions made only in the {side[5:]} runs: {len(cmp[side])}")
    if result.get("figure"):
        lines.append(f"figure: {result['figure']}")
    failed = [r for r in result["run_codes"] if r["code"] != 0]
    for r in failed:
        lines.append(f"run {r['index']} ({r['policy']}) exited with code {r['code']}")
    if result["skipped_lines"]:
        lines.append(f"decision lines skipped (not decisions): {len(result['skipped_lines'])}")
    if result["interrupted"]:
        lines.append(f"interrupted: {result['runs_compared']} of {result['runs']} pairs of runs compared")
    return "\n".join(lines)


def run(
    command: list[str],
    policy: str = DEFAULT_POLICY,
    runs: int = 1,
    keep: str | None = None,
    job_stdout: Any = None,
) -> tuple[dict[str, Any], int]:
    """Run ``command`` ``runs`` times under each flush, interleaved; return (record, exit code).

    Each run's folder (``runN-SIDE`` in ``keep``, or in a temporary folder removed at the end)
    starts empty, so a kept folder never lends a run another run's decisions.  Ctrl-C stops
    the job and ends with what the finished runs recorded (exit code 130).
    """
    base = {k: v for k, v in os.environ.items() if k not in (POLICY_VAR, DECISIONS_VAR)}
    work = keep or tempfile.mkdtemp(prefix="cleanflush-ab-")
    sides: dict[str, list[list[dict[str, Any]]]] = {STOCK: [], policy: []}
    codes: list[dict[str, Any]] = []
    skipped: list[str] = []
    interrupted = False
    try:
        for index, side in enumerate([s for _ in range(runs) for s in (STOCK, policy)], 1):
            folder = os.path.join(work, f"run{index}-{side}")
            shutil.rmtree(folder, ignore_errors=True)
            print(f"cleanflush ab: run {index} of {2 * runs}: {side}", file=sys.stderr, flush=True)
            try:
                code = subprocess.run(command, env=run_env(base, side, folder), stdout=job_stdout).returncode
            except OSError as exc:  # the command cannot start: say so as a shell would
                print(f"cleanflush ab: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
                code = 127
            codes.append({"index": index, "policy": side, "code": code})
            found, bad = read_decisions(os.path.join(folder, "decisions.jsonl"))
            sides[side].append(found)
            skipped += bad
            for line in bad:
                print(f"cleanflush ab: {line}", file=sys.stderr)
    except KeyboardInterrupt:  # subprocess.run has killed the job: report the runs that finished
        interrupted = True
        print("cleanflush ab: interrupted; the report covers the runs that finished", file=sys.stderr)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    done = min(len(sides[STOCK]), len(sides[policy]))  # a side without its pair is left out
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "policy": policy,
        "runs": runs,
        "runs_compared": done,
        "interrupted": interrupted,
        "work_dir": keep,
        "run_codes": codes,
        "skipped_lines": skipped,
        "comparison": compare(sides[STOCK][:done], sides[policy][:done]),
    }
    if interrupted:
        return result, 130
    return result, 1 if any(c["code"] != 0 for c in codes) else 0
