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
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from . import _ab_programs, _env
from ._env import DECISIONS_VAR, DEFAULT_POLICY, POLICY_VAR
from ._registry import NAMES
from ._stats import quartiles

SCHEMA = 2
STOCK = "write"

# What the dirty flush did to one decision (``classify``); the headline counts only CHANGED.
CHANGED, UNSTABLE, WITHIN_NOISE, UNDECIDED, UNCHANGED = "changed", "unstable", "within noise", "undecided", "unchanged"
CLASSES = (CHANGED, UNSTABLE, WITHIN_NOISE, UNDECIDED, UNCHANGED)
RUNS = 2  # runs of each side by default: one run cannot tell a change from autotuning's own noise
COMPARED = ("triton", "inductor")  # the targets whose flushes decide what ab compares


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


# A timing (ms) is one of these, or not finite (a config that failed): anything else is not a
# timing, and ratios of two in range stay finite.
TIMING_RANGE = (1e-9, 1e9)


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
    if not all(isinstance(d[k], str) for k in ("kind", "op", "key")) or not isinstance(d["winner"], (str, type(None))):
        raise ValueError("kind, op, key or winner is not a string")
    timings = d["timings_ms"]
    if not isinstance(timings, dict):
        raise ValueError("timings_ms is not a mapping of choices to numbers")
    finite = {label: _timing(t) for label, t in timings.items() if not _failed(t)}
    return {**d, "timings_ms": finite, "failed_choices": sorted(set(timings) - set(finite))}


def _failed(t: Any) -> bool:
    return isinstance(t, float) and not math.isfinite(t)


def _timing(t: Any) -> float:
    """A finite timing in ms, within TIMING_RANGE (or 0); ValueError otherwise."""
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise ValueError("timings_ms is not a mapping of choices to numbers")
    low, high = TIMING_RANGE
    if not (t == 0 or low <= t <= high):  # a 400-digit integer, 1e300, 1e-300, a negative time
        raise ValueError(f"a timing of {str(t)[:20]} ms is out of range ({low:g} to {high:g})")
    return float(t)


def read_decisions(path: str) -> tuple[list[dict[str, Any]], list[str]]:
    """The decisions a run recorded, and one line for each line of the file that is not one
    (a worker killed mid-write leaves a torn line): those are skipped, the rest are kept."""
    if os.path.isdir(path):
        return [], [f"{path}: skipped, a directory where the decisions file should be"]
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
                bad.append(skipped(path, number, str(exc)))
    return found, bad


def skipped(path: str, number: int, why: str, width: int = 300) -> str:
    """ "path:number: skipped, why" in ``width`` characters at most: the path is cut, in its
    middle, before the line number or the reason is."""
    why = short(why, width // 2)
    room = width - len(f":{number}: skipped, {why}")
    where = path if len(path) <= room else path[: room // 2 - 2] + "..." + path[len(path) - (room - room // 2 - 1) :]
    return f"{where}:{number}: skipped, {why}"


def _key(d: dict[str, Any]) -> tuple[str, str, str]:
    return d["kind"], d["op"], d["key"]


def _modal(winners: list[str]) -> str:
    counts = Counter(winners)
    best = max(counts.values())
    return next(w for w in winners if counts[w] == best)  # ties: the earliest run's


def _by_key(runs: list[list[dict[str, Any]]]) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
    """Each decision's records, one per run that made it (a run's first tuning of a key)."""
    found: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for run in runs:
        seen = set()
        for d in run:
            if _key(d) not in seen and d.get("winner") is not None:
                seen.add(_key(d))
                found.setdefault(_key(d), []).append(d)
    return found


def _agrees(records: list[dict[str, Any]], runs: int) -> bool:
    return len(records) == runs and len({d["winner"] for d in records}) == 1


def _picks(winners: list[str]) -> str:
    """ "a in 2 of 3 runs, b in 1", most frequent first."""
    counts = Counter(winners).most_common()
    return ", ".join(
        f"{short(w, 60)} in {n}" + (f" of {len(winners)} runs" if i == 0 else "") for i, (w, n) in enumerate(counts)
    )


def _slower(clean: list[dict[str, Any]], pick: str, winner: str) -> list[float] | None:
    """How much slower ``pick`` is than ``winner`` in each clean run (a fraction), or None
    where a clean run did not time both."""
    ratios = []
    for d in clean:
        t = d["timings_ms"]
        if pick not in t or not t.get(winner):
            return None
        ratios.append(t[pick] / t[winner] - 1)
    return ratios


def classify(stock: list[dict[str, Any]], clean: list[dict[str, Any]], side: str) -> dict[str, Any]:
    """What the dirty flush did to one decision: its class (CLASSES), why, and the cost.

    ``changed`` needs every clean run to agree on a winner and every stock pick to be slower
    than it, in every clean run, by more than the spread of that ratio over the clean runs
    (the clean side's own noise for those two choices).  With one run a side there is no
    spread: a differing pick is ``undecided``.
    """
    s_win = [d["winner"] for d in stock]
    c_win = [d["winner"] for d in clean]
    found: dict[str, Any] = {"cost": None, "cost_low": None, "cost_high": None, "clean_spread": None}
    if len(set(c_win)) > 1:
        who = f"the {side} runs disagree ({_picks(c_win)})"
        if len(set(s_win)) > 1:
            who += f", and so do the stock runs ({_picks(s_win)})"
        return {**found, "class": UNSTABLE, "unstable_side": "both" if len(set(s_win)) > 1 else side, "reason": who}
    winner = c_win[0]
    named = short(winner, 60)
    if winner in s_win:
        if len(set(s_win)) == 1:
            return {**found, "class": UNCHANGED, "reason": f"every run picked {named}"}
        return {
            **found,
            "class": UNSTABLE,
            "unstable_side": STOCK,
            "reason": f"the stock runs disagree ({_picks(s_win)}); every {side} run picked {named}",
        }
    timed = {pick: _slower(clean, pick, winner) for pick in sorted(set(s_win))}
    per_pick = {pick: r for pick, r in timed.items() if r is not None}
    if len(per_pick) < len(timed):
        return {**found, "class": UNDECIDED, "reason": f"the {side} runs did not time the stock pick"}
    ratios = [r for rs in per_pick.values() for r in rs]
    found = {"cost": statistics.median(ratios), "cost_low": min(ratios), "cost_high": max(ratios), "clean_spread": None}
    if len(clean) < 2:
        return {
            **found,
            "class": UNDECIDED,
            "reason": f"one {side} run: its noise is unknown (run with --runs 2 or more)",
        }
    spread = max(max(rs) - min(rs) for rs in per_pick.values())
    found["clean_spread"] = spread
    if min(ratios) <= 0 or found["cost"] <= spread:
        return {
            **found,
            "class": WITHIN_NOISE,
            "reason": f"the stock pick is {found['cost']:+.1%} by the {side} timing, inside the {side} runs' "
            f"spread of {spread:.1%}",
        }
    also = f"; the stock runs disagree ({_picks(s_win)})" if len(set(s_win)) > 1 else ""
    runs = Counter(s_win)
    return {
        **found,
        "stock_picks": [
            {"pick": p, "runs": runs[p], "cost": statistics.median(rs), "cost_low": min(rs), "cost_high": max(rs)}
            for p, rs in sorted(per_pick.items(), key=lambda item: -runs[item[0]])
        ],
        "class": CHANGED,
        "reason": f"every {side} run picked {named}, and the stock pick is slower in each, by more "
        f"than the {side} runs' spread of {spread:.1%}{also}",
    }


def compare(
    stock_runs: list[list[dict[str, Any]]], clean_runs: list[list[dict[str, Any]]], side: str = DEFAULT_POLICY
) -> dict[str, Any]:
    """Match every decision across the runs, say how reproducible each side's tuning is, and
    classify each decision (``classify``).  Timings shown per choice are medians over a
    side's runs; the stock/clean ratio of every choice summarises how the dirty flush moves
    the timings themselves."""
    stock, clean = _by_key(stock_runs), _by_key(clean_runs)
    matched = [k for k in stock if k in clean]
    decisions: list[dict[str, Any]] = []
    ratios: list[float] = []
    for key in matched:
        s_time, c_time = _medians(stock[key]), _medians(clean[key])
        both = [label for label in c_time if label in s_time and c_time[label] > 0]
        ratios += [s_time[label] / c_time[label] for label in both]
        s_win = [d["winner"] for d in stock[key]]
        c_win = [d["winner"] for d in clean[key]]
        found = classify(stock[key], clean[key], side)
        decisions.append(
            {
                "kind": key[0],
                "op": key[1],
                "key": key[2],
                **found,
                "changed": found["class"] == CHANGED,
                "stock_winner": _modal(s_win),
                "clean_winner": _modal(c_win),
                "stock_winners": s_win,
                "clean_winners": c_win,
                "stock_winner_slower_by": found["cost"],
                "choices": len(both),
                "timings_ms": {label: {"stock": s_time[label], "clean": c_time[label]} for label in both},
            }
        )
    changed = sorted((d for d in decisions if d["changed"]), key=lambda d: -d["cost"])
    q1, median, q3 = quartiles(ratios) if ratios else (None, None, None)
    every = {STOCK: len(stock_runs), "clean": len(clean_runs)}
    made = {s: [k for k in matched if len(found[k]) == every[s]] for s, found in ((STOCK, stock), ("clean", clean))}
    return {
        "decisions": decisions,
        "changed": changed,
        "classes": {c: sum(d["class"] == c for d in decisions) for c in CLASSES},
        "agreement": {
            s: {
                "runs": every[s],
                "made_in_every_run": len(made[s]),
                "agree": sum(_agrees(found[k], every[s]) for k in made[s]),
            }
            for s, found in ((STOCK, stock), ("clean", clean))
        },
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


def _decision_line(d: dict[str, Any]) -> str:
    return f"  {d['kind']} {short(d['op'], 70)} [{short(d['key'], 70)}]"


def _cost(d: dict[str, Any]) -> str:
    spread = "" if d["cost_low"] == d["cost_high"] else f" (runs: {d['cost_low']:+.1%} .. {d['cost_high']:+.1%})"
    return f"{d['cost']:+.1%} slower by the clean timing{spread}"


def _end_to_end_lines(e2e: dict[str, Any] | None, policy: str) -> list[str]:
    if e2e is None:
        return [
            "end to end: no run compiled an Inductor program; a Triton @autotune decision's record holds no "
            "inputs to re-time its winners, so its cost is the clean runs' own timing"
        ]
    lines = []
    for g in e2e["graphs"] + ([{"name": "in total", **e2e["total"]}] if e2e.get("total") else []):
        r, noise = g["ratio"], [v for v in g["same_side"].values() if v is not None]
        judged = {
            _ab_programs.SLOWER: "slower, beyond the noise",
            _ab_programs.FASTER: "faster, beyond the noise",
            _ab_programs.WITHIN_NOISE: "within the noise",
            _ab_programs.UNKNOWN: "one run a side: the noise is unknown",
        }[g["verdict"]]
        if noise:
            judged += f" (programs tuned under the same flush differ by up to {max(noise):.1%})"
        lines.append(
            f"  {g['name']}: {r['median'] - 1:+.1%} (q1 {r['q1'] - 1:+.1%}, q3 {r['q3'] - 1:+.1%}), "
            f"{g['ms'][STOCK]:.3f} ms against {g['ms'][policy]:.3f} ms: {judged}"
        )
    head = (
        f"end to end: the programs tuned under the stock flush against those tuned under {policy} "
        "(timed together, no flush between calls)"
    )
    return [head, *lines, *(f"  {p}" for p in e2e["problems"])]


def format_report(result: dict[str, Any]) -> str:
    cmp = result["comparison"]
    policy = result["policy"]
    kinds = Counter(d["kind"] for d in cmp["decisions"])
    lines = [
        f"cleanflush ab: {shown(result['command'])}",
        f"  stock flush ({STOCK}) against {policy}, {result['runs']} run(s) each, interleaved, fresh caches per run",
        *_not_patched_lines(result.get("not_patched", []), policy),
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
    else:
        a = cmp["agreement"]
        lines.append(
            f"reproducible: stock runs agree on {a[STOCK]['agree']} of {a[STOCK]['made_in_every_run']} decisions, "
            f"{policy} runs on {a['clean']['agree']} of {a['clean']['made_in_every_run']}"
            + ("" if result["runs_compared"] > 1 else " (one run a side: nothing to agree with)")
        )
        changed = cmp["changed"]
        if not changed:
            lines.append("the dirty flush did not change any decision here beyond the noise")
        else:
            lines.append(
                f"changed by the dirty flush: {len(changed)} of {len(cmp['decisions'])} (every {policy} run "
                f"agrees, and the stock pick is slower by more than the {policy} runs' spread)"
            )
            for d in changed:
                lines.append(_decision_line(d))
                for p in d["stock_picks"]:
                    runs = (
                        ""
                        if p["runs"] == len(d["stock_winners"])
                        else f" in {p['runs']} of {len(d['stock_winners'])} runs"
                    )
                    lines.append(f"    stock picked {short(p['pick'])}{runs}: {_cost(p)}")
                lines.append(f"    clean picked {short(d['clean_winner'])}")
        for cls in (UNSTABLE, WITHIN_NOISE, UNDECIDED):
            found = [d for d in cmp["decisions"] if d["class"] == cls]
            if found:
                lines.append(f"{cls}: {len(found)}")
                lines += [f"{_decision_line(d)}: {d['reason']}" for d in found]
        lines.append(f"unchanged: {cmp['classes'][UNCHANGED]}")
    r = cmp["ratio_stock_over_clean"]
    if r["n"]:
        lines.append(
            f"stock / clean timing over all {r['n']} choices: median {r['median']:.3f} "
            f"(q1 {r['q1']:.3f}, q3 {r['q3']:.3f})"
        )
    for side in ("only_stock", "only_clean"):
        if cmp[side]:
            lines.append(f"decisions made only in the {side[5:]} runs: {len(cmp[side])}")
    if "end_to_end" in result and not result["interrupted"]:
        lines += _end_to_end_lines(result["end_to_end"], policy)
    if result.get("figure"):
        lines.append(f"figure: {result['figure']}")
    failed = [r for r in result["run_codes"] if r["code"] != 0]
    for r in failed:
        lines.append(f"run {r['index']} ({r['policy']}) {ended(r['code'])}")
    if result["skipped_lines"]:
        lines.append(f"decision lines skipped (not decisions): {len(result['skipped_lines'])}")
    if result["interrupted"]:
        lines.append(f"interrupted: {result['runs_compared']} of {result['runs']} pairs of runs compared")
    return "\n".join(lines)


def shown(command: list[str]) -> str:
    """``command`` as a shell would take it back (quoted; bytes that are no UTF-8 escaped)."""
    return shlex.join(arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") for arg in command)


def ended(code: int) -> str:
    """How a run ended, as its exit status says: "exited with code 3", "killed by SIGKILL"."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def _not_patched_lines(names: list[str], policy: str) -> list[str]:
    if not names:
        return []
    what = (
        "the clean side is not patched: stock against stock"
        if set(names) >= set(COMPARED)
        else (f"{', '.join(names)} runs stock in the {policy} runs too: its decisions compare stock against stock")
    )
    return [f"  CLEANFLUSH_DISABLE={','.join(names)}: {what}"]


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _time_programs(
    base: dict[str, str], work: str, folders: list[tuple[str, str]], policy: str
) -> dict[str, Any] | None:
    """The end-to-end timing of the programs the runs compiled (``_ab_programs``), in a
    process of its own; None when no run compiled one."""
    unreadable: list[str] = []
    runs = [{"side": side, "paths": _ab_programs.find(os.path.join(f, "inductor"), unreadable)} for side, f in folders]
    if not any(r["paths"] for r in runs):
        return None
    print("cleanflush ab: timing the programs every run compiled, end to end", file=sys.stderr, flush=True)
    folder = os.path.join(work, "end-to-end")
    env = {k: v for k, v in run_env(base, policy, folder).items() if k != DECISIONS_VAR}
    spec, out = os.path.join(folder, "spec.json"), os.path.join(folder, "timing.json")
    with open(spec, "w", encoding="utf-8") as f:
        json.dump({"runs": runs}, f)
    child = subprocess.run(
        # imported by name, not run as __main__: the child is the module that tests see
        [sys.executable, "-c", "import sys; from cleanflush._ab_programs import main; sys.exit(main())", spec, out],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    if child.returncode != 0 or not os.path.exists(out):
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return {
            "graphs": [],
            "problems": [*unreadable, f"the timing process failed (exit {child.returncode}): {last}"[:300]],
        }
    with open(out, encoding="utf-8") as f:
        record: dict[str, Any] = json.load(f)
    record["problems"] = unreadable + record["problems"]
    return record


@dataclass
class _Runs:
    """What the finished runs of one ``ab`` gave."""

    sides: dict[str, list[list[dict[str, Any]]]]  # side -> each run's decisions
    folders: list[tuple[str, str]] = field(default_factory=list)  # (side, run folder)
    codes: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # decision lines that are none


def run(
    command: list[str],
    policy: str = DEFAULT_POLICY,
    runs: int = RUNS,
    keep: str | None = None,
    job_stdout: Any = None,
) -> tuple[dict[str, Any], int]:
    """Run ``command`` ``runs`` times under each flush, interleaved; time the programs the
    runs compiled end to end; return (record, exit code).

    Each run's folder (``runN-SIDE`` in ``keep``, or in a temporary folder removed at the end)
    starts empty, so a kept folder never lends a run another run's decisions.  Ctrl-C stops
    the job and ends with what the finished runs recorded (exit code 130).
    """
    base = _env.for_child(**{POLICY_VAR: None, DECISIONS_VAR: None})
    work = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="cleanflush-ab-")  # a job may chdir
    done = _Runs({STOCK: [], policy: []})
    interrupted, end_to_end, started = False, None, time.monotonic()
    try:
        plan = [s for _ in range(runs) for s in (STOCK, policy)]
        for index, side in enumerate(plan, 1):
            _say_progress(index, len(plan), side, started)
            _one_run(command, base, os.path.join(work, f"run{index}-{side}"), side, job_stdout, done)
        end_to_end = _time_programs(base, work, done.folders, policy)
    except KeyboardInterrupt:  # subprocess.run has killed the job: report the runs that finished
        interrupted = True
        print("cleanflush ab: interrupted; the report covers the runs that finished", file=sys.stderr)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    compared = min(len(done.sides[STOCK]), len(done.sides[policy]))  # a side without its pair is left out
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "command": command,
        "policy": policy,
        "runs": runs,
        "runs_compared": compared,
        "interrupted": interrupted,
        "work_dir": keep,
        "run_codes": done.codes,
        "skipped_lines": done.skipped,
        "not_patched": not_patched(),
        "comparison": compare(done.sides[STOCK][:compared], done.sides[policy][:compared], policy),
        "end_to_end": end_to_end,
        "elapsed_s": time.monotonic() - started,
    }
    if interrupted:
        return result, 130
    return result, 1 if any(c["code"] != 0 for c in done.codes) else 0


def _say_progress(index: int, count: int, side: str, started: float) -> None:
    elapsed = time.monotonic() - started
    left = f", about {_clock(elapsed / (index - 1) * (count - index + 1))} left" if index > 1 else ""
    print(
        f"cleanflush ab: run {index} of {count}: {side} ({_clock(elapsed)} elapsed{left})", file=sys.stderr, flush=True
    )


def _one_run(command: list[str], base: dict[str, str], folder: str, side: str, job_stdout: Any, done: _Runs) -> None:
    """One run of the job under ``side``'s flush, in an empty ``folder``; what it gave goes to ``done``."""
    shutil.rmtree(folder, ignore_errors=True)
    try:
        code = subprocess.run(command, env=run_env(base, side, folder), stdout=job_stdout).returncode
    except OSError as exc:  # the command cannot start: say so as a shell would
        print(f"cleanflush ab: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        code = 127
    done.codes.append({"index": len(done.codes) + 1, "policy": side, "code": code})
    done.folders.append((side, folder))
    found, bad = read_decisions(os.path.join(folder, "decisions.jsonl"))
    done.sides[side].append(found)
    done.skipped += bad
    for line in bad:
        print(f"cleanflush ab: {line}", file=sys.stderr)


def not_patched() -> list[str]:
    """The targets ``ab`` compares that ``CLEANFLUSH_DISABLE`` keeps stock in its clean runs too."""
    return sorted(set(_env.disabled_from_environ(NAMES).names) & set(COMPARED))
