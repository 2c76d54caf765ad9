"""``cleanflush ab -- COMMAND``: run the user's own job with the stock flush and with a clean
one, and show which autotuning decisions the dirty flush changed and what that costs.

Each run gets fresh, private cache folders (Triton's kernel and autotuning caches, Inductor's
FX and autotune caches, with Inductor's caches forced off), so every run really tunes; the
command itself is not changed, and its output passes through.  The decisions come from
``CLEANFLUSH_DECISIONS`` (``_decisions``), which every process of the run appends to,
autotuning workers included, with a record of each Triton autotuning call
(``CLEANFLUSH_AB_CALLS``).  After the runs, two processes of their own time what the runs
chose, with timers that share no code with the flush: the picks of every Triton decision the
runs made differently (``_ab.prices``), and the programs Inductor compiled (``_ab.programs``).
``_ab.compare`` judges each decision, ``_ab.report`` writes the text.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast

from .. import _env
from .._env import CALLS_VAR, DECISIONS_VAR, PICK_FILE_VAR, PICK_VAR, POLICY_VAR
from .._pick import FASTEST, STABLE, Picked
from .._policies import DEFAULT_POLICY, STOCK_POLICY
from .._registry import NAMES
from . import compare, folders
from . import programs as _ab_programs
from .compare import MIN_EFFECT, to_price
from .records import DecisionLine, EndToEnd, Price, ProgramRun, Result, Run, RunCode
from .report import COMPARED, short

SCHEMA = 4
RUNS = 2  # runs of each side by default: one run cannot tell a change from autotuning's own noise


class Side(NamedTuple):
    """One side of an ab: its label (in folder names and the record), flush and pick rule."""

    label: str
    policy: str
    pick: str = FASTEST


FLUSH, PICK = "flush", "pick"
COMPARES = (FLUSH, PICK)
RULES = (FASTEST, STABLE)  # what --compare pick sets against each other by default


def sides_of(compared: str, policy: str, rules: tuple[str, str] = RULES) -> tuple[Side, Side]:
    """What ``--compare`` sets against each other: the stock flush and ``policy`` (both with
    the autotuner's own pick), or the two pick ``rules`` (both under ``policy``).  The first
    side runs first."""
    if compared == PICK:
        return Side(rules[0], policy, rules[0]), Side(rules[1], policy, rules[1])
    return Side(STOCK_POLICY, STOCK_POLICY), Side(policy, policy)


def run_env(base: dict[str, str], side: Side, folder: str) -> dict[str, str]:
    """The environment of one run: its flush and pick rule, its decisions file, caches of its
    own, and the folder every run records its autotuning calls in (beside the runs' own folders)."""
    folders.made(folder)
    calls = folders.made(os.path.join(os.path.dirname(folder), "calls"))
    return {
        **base,
        POLICY_VAR: side.policy,
        PICK_VAR: side.pick,
        DECISIONS_VAR: os.path.join(folder, "decisions.jsonl"),
        CALLS_VAR: calls,
        "TRITON_CACHE_DIR": os.path.join(folder, "triton"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(folder, "inductor"),
        "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
    }


# A timing (ms) is one of these, or not finite (a config that failed): anything else is not a
# timing, and ratios of two in range stay finite.
TIMING_RANGE = (1e-9, 1e9)


def decision(line: str) -> DecisionLine:
    """One decisions-file line, checked; ValueError saying what is wrong with it.  Timings
    that are not finite (Triton and Inductor time a config that failed as ``inf``) are left
    out: they time nothing."""
    d = json.loads(line)
    if not isinstance(d, dict):
        raise ValueError(f"not a JSON object but {type(d).__name__}")
    if d.get("kind") == "calls":
        return _calls_line(d)
    missing = [k for k in ("kind", "op", "key", "timings_ms", "winner") if k not in d]
    if missing:
        raise ValueError(f"no {', '.join(missing)}")
    if not all(isinstance(d[k], str) for k in ("kind", "op", "key")) or not isinstance(d["winner"], (str, type(None))):
        raise ValueError("kind, op, key or winner is not a string")
    timings = d["timings_ms"]
    if not isinstance(timings, dict):
        raise ValueError("timings_ms is not a mapping of choices to numbers")
    finite = {label: _timing(t) for label, t in timings.items() if not _failed(t)}
    if "pick" in d:
        Picked.from_line(d["pick"])  # a ValueError saying what is wrong with it
    rank = d.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < 1 << 31):
        raise ValueError("rank is not a whole number in range")
    # checked above: the keys a decision line needs, of the types it needs
    return cast(DecisionLine, {**d, "timings_ms": finite, "failed_choices": sorted(set(timings) - set(finite))})


def _calls_line(d: dict[str, Any]) -> DecisionLine:
    """A line counting an autotuned kernel's calls per key (written at a process's exit)."""
    counts = d.get("counts")
    if not isinstance(d.get("op"), str) or not isinstance(counts, dict):
        raise ValueError("a calls line without its op or counts")
    if not all(isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 10**12 for n in counts.values()):
        raise ValueError("a calls line whose counts are not whole numbers in range")
    return {"kind": "calls", "op": d["op"], "counts": {str(key): n for key, n in counts.items()}}


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


def read_decisions(path: str) -> tuple[Run, list[str]]:
    """The decisions a run recorded, and one line for each line of the file that is not one
    (a worker killed mid-write leaves a torn line): those are skipped, the rest are kept."""
    if os.path.isdir(path):
        return [], [f"{path}: skipped, a directory where the decisions file should be"]
    if not os.path.exists(path):
        return [], []
    found: Run = []
    bad: list[str] = []
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


def _clock(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def _time_programs(
    base: dict[str, str], work: str, runs_in: list[tuple[str, str]], sides: tuple[Side, Side]
) -> EndToEnd | None:
    """The end-to-end timing of the programs the runs compiled (``_ab.programs``), in a
    process of its own, each program tuned under its run's side; None when no run compiled one."""
    unreadable: list[str] = []
    by_label = {side.label: side for side in sides}
    runs = [
        ProgramRun(
            side=label,
            paths=_ab_programs.find(os.path.join(f, "inductor"), unreadable),
            policy=by_label[label].policy,
            pick=by_label[label].pick,
        )
        for label, f in runs_in
    ]
    if not any(r["paths"] for r in runs):
        return None
    print("cleanflush ab: timing the programs every run compiled, end to end", file=sys.stderr, flush=True)
    folder = folders.fresh(os.path.join(work, "end-to-end"))
    env = {k: v for k, v in run_env(base, sides[1], folder).items() if k != DECISIONS_VAR}
    spec, out = os.path.join(folder, "spec.json"), os.path.join(folder, "timing.json")
    with open(spec, "w", encoding="utf-8") as f:
        json.dump({"runs": runs}, f)
    child = subprocess.run(
        # imported by name, not run as __main__: the child is the module that tests see
        [sys.executable, "-c", "import sys; from cleanflush._ab.programs import main; sys.exit(main())", spec, out],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
    )
    if child.returncode != 0 or not os.path.exists(out):
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        why = f"the timing process failed (exit {child.returncode}): {last}"[:300]
        return EndToEnd(graphs=[], problems=[*unreadable, why])
    with open(out, encoding="utf-8") as f:
        record: EndToEnd = json.load(f)
    record["problems"] = unreadable + record["problems"]
    return record


@dataclass
class _Runs:
    """What the finished runs of one ``ab`` gave."""

    sides: dict[str, list[Run]]  # side's label -> each run's decisions, the first side first
    folders: list[tuple[str, str]] = field(default_factory=list)  # (side, run folder)
    codes: list[RunCode] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # decision lines that are none
    pricing_s: float = 0.0  # the wall time the independent prices took

    def compared(self) -> int:
        """Pairs of runs compared: a side without its pair is left out."""
        return min(len(runs) for runs in self.sides.values())

    def paired(self) -> tuple[list[Run], list[Run]]:
        """Each side's runs that have their pair, the first side first."""
        first, second = self.sides.values()
        return first[: self.compared()], second[: self.compared()]


def run(
    command: list[str],
    policy: str = DEFAULT_POLICY,
    runs: int = RUNS,
    keep: str | None = None,
    job_stdout: Any = None,
    min_effect: float = MIN_EFFECT,
    compared: str = FLUSH,
    rules: tuple[str, str] = RULES,
) -> tuple[Result, int]:
    """Run ``command`` ``runs`` times on each side (``sides_of(compared, policy, rules)``: the
    two flushes, or the two pick rules), interleaved; price the picks the runs made differently
    and time the programs they compiled (the flushes only: under one flush, the picks' prices
    are the comparison); return (record, exit code).

    Each run's folder (``runN-SIDE`` in ``keep``, or in a temporary folder removed at the end)
    starts empty, so a kept folder never lends a run another run's decisions.  Ctrl-C stops
    the job and ends with what the finished runs recorded (exit code 130).
    """
    base, work = _environment(), _workspace(keep)
    sides = sides_of(compared, policy, rules)
    done = _Runs({side.label: [] for side in sides})
    interrupted, end_to_end, prices, started = False, None, None, time.monotonic()
    signal_number: int = signal.SIGINT
    previous = _stop_on_terminate()
    try:
        plan, labels = [side for _ in range(runs) for side in sides], (sides[0].label, sides[1].label)
        for index, side in enumerate(plan, 1):
            _say_progress(index, len(plan), side.label, started)
            _one_run(command, base, os.path.join(work, folders.run_folder(index, labels)), side, job_stdout, done)
        prices = _price(base, work, done)
        end_to_end = _time_programs(base, work, done.folders, sides)
    except KeyboardInterrupt as stop:  # subprocess.run has killed the job: report the runs that finished
        interrupted, signal_number = True, getattr(stop, "signal_number", signal.SIGINT)
        print("cleanflush ab: interrupted; the report covers the runs that finished", file=sys.stderr)
    finally:
        _stop_on_terminate(previous)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    result = _record(command, compared, sides, runs, keep, done, prices, min_effect)
    result["interrupted"], result["end_to_end"] = interrupted, end_to_end
    result["elapsed_s"] = time.monotonic() - started
    if interrupted:
        return result, 128 + int(signal_number)
    return result, 1 if any(c["code"] != 0 for c in done.codes) else 0


def _environment() -> dict[str, str]:
    """What every run's environment starts from: this one, less what ab sets per run and the
    pick file (every run tunes: no file lends it another run's picks)."""
    return _env.for_child(**dict.fromkeys((POLICY_VAR, PICK_VAR, DECISIONS_VAR, CALLS_VAR, PICK_FILE_VAR)))


def _workspace(keep: str | None) -> str:
    """The folder the runs keep their folders in (``keep``, or a temporary one), with no record
    of another ab's calls and no kernels it compiled."""
    work = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="cleanflush-ab-")  # a job may chdir
    if keep:
        folders.claim(work)
    for name in ("calls", "compiled"):
        folders.fresh(os.path.join(work, name))
    return work


def _record(
    command: list[str],
    compared: str,
    sides: tuple[Side, Side],
    runs: int,
    keep: str | None,
    done: _Runs,
    prices: list[Price] | None,
    min_effect: float,
) -> Result:
    """The record of an ab: what ran, and the comparison of the runs that finished in pairs."""
    first, second = done.paired()
    found: Result = {
        "schema": SCHEMA,
        "command": command,
        "compare": compared,
        "policy": sides[1].policy,
        "runs": runs,
        "runs_compared": done.compared(),
        "work_dir": keep,
        "run_codes": done.codes,
        "skipped_lines": done.skipped,
        "not_patched": not_patched(),
        "pricing_s": done.pricing_s,
    }
    if compared == PICK:
        labels = (sides[0].label, sides[1].label)
        found["picks"] = compare.compare_picks(first, second, prices, done.codes, labels)
    else:
        found["comparison"] = compare.compare(first, second, sides[1].policy, prices, min_effect)
    return found


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP while ab runs: handled as Ctrl-C is (the job stopped, the runs that
    finished reported, the temporary folder removed)."""

    def __init__(self, signal_number: int) -> None:
        super().__init__(signal_number)
        self.signal_number = signal_number


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _stop_on_terminate(previous: dict[int, Any] | None = None) -> dict[int, Any] | None:
    """With no argument, make SIGTERM and SIGHUP stop ab as Ctrl-C does, and return the
    handlers they had; with those, put them back.  Only the main thread can (elsewhere: None)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if previous is not None:
        for number, handler in previous.items():
            signal.signal(number, handler)
        return None

    def stop(number: int, frame: Any) -> None:
        raise Stopped(number)

    return {number: signal.signal(number, stop) for number in STOP_SIGNALS}


def _price(base: dict[str, str], work: str, done: _Runs) -> list[Price]:
    """The independent prices of every decision the runs picked differently (``_ab.prices``),
    timed in a process of its own; each decision that cannot be priced says why."""
    wanted = to_price(*done.paired())
    unpriced = [Price(key=w["key"], error=w["error"] or "not priced") for w in wanted]
    if not any(w["file"] for w in wanted):
        return unpriced
    started = time.monotonic()
    print(f"cleanflush ab: pricing the picks of {len(wanted)} decision(s), side by side", file=sys.stderr, flush=True)
    folder = folders.fresh(os.path.join(work, "prices"))
    spec, out = os.path.join(folder, "spec.json"), os.path.join(folder, "prices.json")
    with open(spec, "w", encoding="utf-8") as f:
        json.dump({"decisions": wanted, "calls_folder": os.path.join(work, "calls")}, f)
    child = subprocess.run(
        # imported by name, not run as __main__: the child is the module that tests see
        [sys.executable, "-c", "import sys; from cleanflush._ab.prices import main; sys.exit(main())", spec, out],
        env={**base, "TEARDOWN_CUPTI": "1"},  # no CUPTI left attached after the profiler (pytorch#144455)
        stdout=subprocess.DEVNULL,
    )
    done.pricing_s = time.monotonic() - started
    if child.returncode != 0 or not os.path.exists(out):
        why = f"the pricing process failed (exit {child.returncode})"
        return [Price(key=w["key"], error=w["error"] or why) for w in wanted]
    with open(out, encoding="utf-8") as f:
        priced: list[Price] = json.load(f)
    return priced


def _say_progress(index: int, count: int, side: str, started: float) -> None:
    elapsed = time.monotonic() - started
    left = f", about {_clock(elapsed / (index - 1) * (count - index + 1))} left" if index > 1 else ""
    print(
        f"cleanflush ab: run {index} of {count}: {side} ({_clock(elapsed)} elapsed{left})", file=sys.stderr, flush=True
    )


def _one_run(command: list[str], base: dict[str, str], folder: str, side: Side, job_stdout: Any, done: _Runs) -> None:
    """One run of the job under ``side``'s flush and pick rule, in an empty ``folder``; what
    it gave goes to ``done``."""
    folders.fresh(folder)  # never a link: an older run's decisions are not this run's
    env = run_env(base, side, folder)
    compiled = os.path.join(os.path.dirname(folder), "compiled")
    folders.carry(compiled, env["TRITON_CACHE_DIR"])
    started = time.monotonic()
    try:
        code = subprocess.run(command, env=env, stdout=job_stdout).returncode
    except OSError as exc:  # the command cannot start: say so as a shell would
        print(f"cleanflush ab: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        code = 127
    wall = time.monotonic() - started
    folders.carry(env["TRITON_CACHE_DIR"], compiled)
    done.codes.append(
        {"index": len(done.codes) + 1, "policy": side.policy, "side": side.label, "code": code, "wall_s": wall}
    )
    done.folders.append((side.label, folder))
    found, bad = read_decisions(os.path.join(folder, "decisions.jsonl"))
    done.sides[side.label].append(found)
    done.skipped += bad
    for line in bad:
        print(f"cleanflush ab: {line}", file=sys.stderr)


def not_patched() -> list[str]:
    """The targets ``ab`` compares that ``CLEANFLUSH_DISABLE`` keeps stock in its clean runs too."""
    return sorted(set(_env.disabled_from_environ(NAMES).names) & set(COMPARED))
