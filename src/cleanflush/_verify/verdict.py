"""The verdict: PASS / NO-PENALTY / FAIL from a measurement record, with its reasons.

Plain Python, no torch: it judges recorded numbers, so CPU tests can feed it any record.
Three kinds of evidence, each able to fail the verdict on its own:

1. which flush ran: cleanflush counts each flush after it ran, under the policy that ran
   (a read that failed counts as the stock write it fell back to);
2. timing: per round, the share of the stock penalty (stock do_bench minus the clean
   reference measured right after the candidate) that the candidate removed.  The
   reference is a plain read loop of its own, not cleanflush's code.  A candidate faster
   than the rotating-weight CUDA graph (cold weight, no launch gaps) left data warm;
3. Nsight Compute, when it ran: DRAM bytes the timed GEMM writes after the candidate.
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING, Any, TypedDict, final

if TYPE_CHECKING:  # 3.10's typing has no NotRequired; the annotations are strings at run time
    from typing_extensions import NotRequired

from .._stats import quartiles
from .controls import CLAIMS, CONTROLS

SCHEMA = 2


class Kernel(TypedDict):
    op: str
    n: int
    k: int
    dtype: str
    device: int


class Timings(TypedDict):
    """Microseconds per round (docs in ``new_record``)."""

    do_bench: dict[str, list[float]]
    reference: dict[str, list[float]]
    reference_min: dict[str, list[float]]
    rotating_graph: list[float]
    inductor: dict[str, list[float]]


class Record(TypedDict):
    """One verify record (``--json`` writes it; schema 2)."""

    schema: int
    kernel: Kernel
    machine: dict[str, Any]  # what the probe found: GPU, driver, clocks, other processes
    software: dict[str, str]
    policy: str
    installed: bool
    targets: list[dict[str, Any]]  # cleanflush status's rows
    rounds: int
    candidates: list[str]
    timings_us: Timings
    flushes: dict[str, dict[str, int]]
    ncu: dict[str, Any] | None  # None (not asked), {"error": why}, or MB per flush
    # persisting L2 at the start (``_persist.reading``), with the resets the flushes made and
    # the limit at the end ("end"); absent from records made before verify read it
    persisting_l2: NotRequired[dict[str, Any]]
    verdict: NotRequired[Verdict | ControlsVerdict]  # the command adds it, with its exit code
    elapsed_s: NotRequired[float]


@final  # final: `in` tells a Verdict from a ControlsVerdict
class Verdict(TypedDict):
    result: str  # PASS, NO-PENALTY or FAIL
    reasons: list[str]
    margin: float | None
    exit_code: NotRequired[int]


@final
class ControlsVerdict(TypedDict):
    result: str
    candidates: dict[str, Verdict]
    wrong: list[str]
    exit_code: NotRequired[int]


class ShareRules(TypedDict):
    median: float
    rounds: float | None
    below: int
    needed: int | None
    shares: list[float | None]


PASSING = ("PASS", "NO-PENALTY")  # the results a command exits 0 on

# Every rule that can fail a verdict, with its tolerance (docs/verify.md says where each
# comes from):
PASS_SHARE = 0.6  # a clean flush removes at least this share of the stock penalty, less the noise
# The rounds rule: a flush whose typical round removes PASS_SHARE of that round's penalty has
# so many rounds below it with probability under this (a one-sided sign test; with 5 rounds,
# all 5 below).  It fails a flush that removes a steady part of the penalty, which the median
# rule lets through when the reference is noisy: at the LM head a read of half the L2 removed
# 43-55% in every round, and the reference's spread was 14% of the penalty.
ROUNDS_LEVEL = 0.05
# The smallest noise a timing rule allows: CUDA events tick in about 0.5-1 us steps on an H200,
# and a central mean of hundreds of samples resolves a quarter of a step.
RESOLUTION_US = 0.25
# After a clean flush, do_bench ran up to 1.45% under the faster of the rotating graph and
# the plain read loop (515 healthy flushes in 503 H200 records, benchmarks/results/h200/
# verdicts.json), at weights of 2-17 x L2 that no warm data can explain after a flush; the
# rule allows 2%.
WARM_TOLERANCE = 0.02
NCU_DIRTY_MB = 1.0  # the GEMM's own output is at most 0.26 MB here; clean runs wrote <= 0.06 MB


def new_record(
    *,
    kernel: Kernel,
    machine: dict[str, Any],
    software: dict[str, str],
    policy: str,
    installed: bool,
    targets: list[dict[str, Any]],
    rounds: int,
    candidates: list[str],
) -> Record:
    """The one shape of a verify record; ``measure`` fills ``timings_us``, ``flushes``, ``ncu``.

    timings_us: {"do_bench": {"stock" | candidate: [us per round]},
                 "reference": {candidate: [us per round]},      # mean of the read loop after it
                 "reference_min": {candidate: [...]},            # its min, for Inductor's min
                 "rotating_graph": [...],
                 "inductor": {"stock" | candidate: [...]}}       # Inductor's own min
    flushes: {candidate: {"triton | write-read": n, ...}} counted while it was timed
    ncu: None (not asked), {"error": why} or {"stock": MB, candidate: MB, ...}
    """
    return {
        "schema": SCHEMA,
        "kernel": kernel,
        "machine": machine,
        "software": software,
        "policy": policy,
        "installed": installed,
        "targets": targets,
        "rounds": rounds,
        "candidates": candidates,
        "timings_us": {"do_bench": {}, "reference": {}, "reference_min": {}, "rotating_graph": [], "inductor": {}},
        "flushes": {},
        "ncu": None,
    }


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _iqr(values: list[float]) -> float:
    q1, _, q3 = quartiles(values)
    return q3 - q1


def claimed_policy(candidate: str) -> str:
    return CLAIMS.get(candidate, candidate)


def flush_evidence(counts: dict[str, int], target: str, candidate: str) -> tuple[bool, str]:
    """Whether the clean flush ran for ``target`` while ``candidate`` was timed."""
    mine = {key.split(" | ")[1]: n for key, n in counts.items() if key.split(" | ")[0] == target and n > 0}
    clean = sum(n for policy, n in mine.items() if policy != "write")
    stock = mine.get("write", 0)
    if not mine:
        return False, f"no flush ran through cleanflush in {target}"
    if stock and claimed_policy(candidate) != "write":
        return False, (
            f"{stock} of {stock + clean} flushes in {target} ran the stock write (the clean read failed or was skipped)"
        )
    if not clean:
        return False, f"only the stock write ran in {target} ({stock} flushes)"
    ran = ", ".join(f"{policy} x {n}" for policy, n in sorted(mine.items()))
    return True, f"{target} flushed through cleanflush: {ran}"


def penalty_share(stock: list[float], candidate: list[float], reference: list[float]) -> dict[str, float]:
    """Per round, the stock penalty (stock - the reference timed right after the candidate)
    and what the candidate left of it (candidate - that reference); medians over rounds, and
    the noise: how much those paired differences move from round to round (their
    interquartile range), at least the timer's resolution."""
    penalties = [s - r for s, r in zip(stock, reference)]
    residuals = [c - r for c, r in zip(candidate, reference)]
    penalty = _median(penalties)
    residual = _median(residuals)
    return {
        "penalty_us": penalty,
        "residual_us": residual,
        "noise_us": max(_iqr(penalties), _iqr(residuals), RESOLUTION_US),
        "share": (penalty - residual) / penalty if penalty > 0 else 0.0,
        "reference_us": _median(reference),
        "candidate_us": _median(candidate),
        "stock_us": _median(stock),
    }


def warm_floor(graph: list[float], reference: list[float], candidate: list[float]) -> tuple[float, float, str]:
    """(floor, slack, what the floor is) of the warm-data rule: the faster of two clean
    timings that share no code with cleanflush, a CUDA graph cycling through cold weights
    with no launch gaps and the plain read loop.  A candidate faster than the floor by more
    than the slack (either one's spread over rounds, or WARM_TOLERANCE of the floor) read
    data that stayed warm.  At weights of several L2 the graph can run behind the loop (up to
    2.4% on an H200: its calls follow each other's DRAM traffic), hence the faster of the two."""
    graph_us, reference_us = _median(graph), _median(reference)
    if graph_us <= reference_us:
        floor, spread = graph_us, _iqr(graph)
        what = f"the rotating-weight graph {floor:.2f} us (cold weight, no launch gaps)"
    else:
        floor, spread = reference_us, _iqr(reference)
        what = f"the clean reference {floor:.2f} us (faster than the rotating-weight graph here)"
    return floor, max(spread, _iqr(candidate), RESOLUTION_US, WARM_TOLERANCE * floor), what


def rounds_needed(rounds: int) -> int | None:
    """How many of ``rounds`` below PASS_SHARE fail the rounds rule: the fewest whose chance,
    were each round as likely above the bar as below it, is under ROUNDS_LEVEL; None when
    even every round below is not that unlikely (fewer than 5 rounds)."""
    for needed in range(rounds + 1):
        if sum(math.comb(rounds, k) for k in range(needed, rounds + 1)) / 2**rounds < ROUNDS_LEVEL:
            return needed
    return None


def round_shares(stock: list[float], candidate: list[float], reference: list[float]) -> list[float | None]:
    """Per round, the share of that round's penalty the candidate removed (None: no penalty
    in that round, so no share)."""
    return [(s - c) / (s - r) if s > r else None for s, c, r in zip(stock, candidate, reference)]


def share_rules(stock: list[float], candidate: list[float], reference: list[float]) -> ShareRules:
    """Both share rules' margins (negative fails) for a measurable penalty.

    median: the median share less PASS_SHARE, plus the noise as a share of the penalty;
    rounds: the share of the round that decides the sign test less PASS_SHARE (None with too
    few rounds); below / needed: rounds under the bar, and how many fail."""
    t = penalty_share(stock, candidate, reference)
    shares = round_shares(stock, candidate, reference)
    needed = rounds_needed(len(shares))
    below = sum(share is not None and share < PASS_SHARE for share in shares)
    rounds_margin = None
    if needed is not None:
        # The rule fails when at most len - needed rounds reach the bar: judge by the round
        # at that place from the top (a round without a penalty counts as reaching it).
        ordered = sorted((math.inf if share is None else share for share in shares), reverse=True)
        rounds_margin = ordered[len(shares) - needed] - PASS_SHARE
    return {
        "median": t["share"] - PASS_SHARE + t["noise_us"] / t["penalty_us"],
        "rounds": rounds_margin,
        "below": below,
        "needed": needed,
        "shares": shares,
    }


def judge_timing(
    name: str, stock: list[float], candidate: list[float], reference: list[float], graph: list[float] | None
) -> tuple[str, float | None, str]:
    """("pass" | "fail" | "no-penalty", margin, reason) for one timed method."""
    t = penalty_share(stock, candidate, reference)
    noise = t["noise_us"]
    where = (
        f"{t['candidate_us']:.2f} us against stock {t['stock_us']:.2f} us and the clean reference "
        f"{t['reference_us']:.2f} us"
    )
    if graph:
        floor, slack, what = warm_floor(graph, reference, candidate)
        if t["candidate_us"] < floor - slack:
            return (
                "fail",
                None,
                (
                    f"{name}: {where}: faster than {what} by more than {slack:.2f} us (their spread or "
                    f"{WARM_TOLERANCE:.0%} of it), so data stayed warm in L2"
                ),
            )
        where += f", rotating graph {_median(graph):.2f} us"
    if t["penalty_us"] <= noise:
        return (
            "no-penalty",
            None,
            (
                f"{name}: the stock flush shows no measurable penalty here: {t['penalty_us']:+.2f} us "
                f"({t['penalty_us'] / t['reference_us']:+.1%}) against noise of {noise:.2f} us"
            ),
        )
    # A clean flush leaves at most 40% of the penalty; FAIL only when what it left exceeds
    # that by more than the noise, or when too many rounds removed less than 60% of theirs.
    rules = share_rules(stock, candidate, reference)
    margin = rules["median"] if rules["rounds"] is None else min(rules["median"], rules["rounds"])
    removed = (
        f"removed {t['share']:.0%} of the {t['penalty_us']:.2f} us stock penalty (needs {PASS_SHARE:.0%}, "
        f"less the noise of {noise:.2f} us)"
    )
    rounds = len(rules["shares"])
    if rules["rounds"] is not None and rules["rounds"] < 0:
        low = [share for share in rules["shares"] if share is not None]
        removed += (
            f", and under {PASS_SHARE:.0%} in {rules['below']} of {rounds} rounds ({min(low):.0%} to "
            f"{max(low):.0%}): a flush that typically removes {PASS_SHARE:.0%} does that with a chance "
            f"under {ROUNDS_LEVEL:.0%}"
        )
    return ("pass" if margin >= 0 else "fail"), margin, f"{name}: {where}: {removed}"


class _Reasons:
    """The reasons a verdict gives, in order, and whether any of them failed it."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.failed = False

    def add(self, ok: bool, why: str) -> None:
        self.failed |= not ok
        self.lines.append(("" if ok else "FAIL: ") + why)


def judge_candidate(record: Record, candidate: str) -> Verdict:
    """The verdict on do_bench (and, where measured, Inductor) under ``candidate``."""
    if claimed_policy(candidate) == "write" and candidate not in CONTROLS:
        return _verdict("FAIL", ["the policy is 'write', the stock flush: there is no clean flush to verify"], None)
    reasons = _Reasons()
    counts = record["flushes"].get(candidate, {})
    ok, why = flush_evidence(counts, "triton", candidate)
    reasons.add(ok, why)
    if not ok:
        reasons.lines.extend(_why_not("triton", record))
    t = record["timings_us"]
    state, margin, why = judge_timing(
        "do_bench", t["do_bench"]["stock"], t["do_bench"][candidate], t["reference"][candidate], t.get("rotating_graph")
    )
    reasons.add(state != "fail", why)
    if candidate in t.get("inductor", {}):
        margin = _judge_inductor(reasons, record, counts, candidate, state, margin)
    _judge_ncu(reasons, record.get("ncu"), candidate)
    others = record["machine"].get("other_processes")
    if others:
        reasons.lines.append(f"UNRELIABLE: {len(others)} other process(es) on this GPU (pids {others})")
    if reasons.failed:
        return _verdict("FAIL", reasons.lines, margin)
    return _verdict("NO-PENALTY" if state == "no-penalty" else "PASS", reasons.lines, margin)


def _judge_inductor(
    reasons: _Reasons,
    record: Record,
    counts: dict[str, int],
    candidate: str,
    do_bench_state: str,
    margin: float | None,
) -> float | None:
    """Inductor's flush counts and timing under ``candidate``; the tighter margin of the two."""
    t = record["timings_us"]
    inductor = t["inductor"]
    reasons.add(*flush_evidence(counts, "InductorBenchmarker.benchmark_gpu", candidate))
    state, imargin, why = judge_timing(
        "Inductor benchmark_gpu (min)", inductor["stock"], inductor[candidate], t["reference_min"][candidate], None
    )
    reasons.add(state != "fail", why)
    if do_bench_state == "fail" and margin is not None and state != "fail":
        reasons.lines.append(
            "do_bench's mean failed where Inductor's min under the same flush did not: dirty lines slow "
            "every call, so what the min does not show is more likely launch latency (a host slower per "
            "call than the GPU, docs/limits.md) than L2"
        )
    return min(margin, imargin) if imargin is not None and margin is not None else margin


def _judge_ncu(reasons: _Reasons, ncu: dict[str, Any] | None, candidate: str) -> None:
    """The DRAM bytes the timed GEMM wrote after ``candidate``, where Nsight Compute ran."""
    if ncu is None:
        return
    if "error" in ncu:
        reasons.lines.append(f"Nsight Compute could not run ({ncu['error']}): judged on timing and flush counts only")
        return
    if candidate not in ncu:
        return
    dirty, stock = ncu[candidate], ncu.get("stock")
    clean = dirty <= NCU_DIRTY_MB
    reasons.add(
        clean,
        f"Nsight Compute: the timed GEMM writes {dirty:.3f} MB after this flush"
        + (f" (stock {stock:.2f} MB); " if stock is not None else "; ")
        + (
            f"at most {NCU_DIRTY_MB} MB is clean"
            if clean
            else f"more than {NCU_DIRTY_MB} MB is dirty write-back, whatever the timing says"
        ),
    )


def _verdict(result: str, reasons: list[str], margin: float | None) -> Verdict:
    return {"result": result, "reasons": reasons, "margin": margin}


def judge(record: Record) -> Verdict:
    """The verdict ``cleanflush verify`` prints: the active policy, through every benchmarker."""
    if not record["installed"]:
        return _verdict("FAIL", ["cleanflush is not installed in this process (CLEANFLUSH=0?)"], None)
    return judge_candidate(record, record["policy"])


def overall(results: list[str]) -> str:
    """One verdict for several: FAIL if any failed, else PASS if any passed, else NO-PENALTY."""
    if "FAIL" in results:
        return "FAIL"
    return "PASS" if "PASS" in results else "NO-PENALTY"


def expected(candidate: str) -> str:
    return "FAIL" if candidate in CONTROLS else "PASS"


def judge_controls(record: Record) -> ControlsVerdict:
    """Every candidate judged; the run passes when each real policy PASSes and each
    negative control FAILs (a NO-PENALTY GPU cannot tell them apart: that is said)."""
    verdicts = {name: judge_candidate(record, name) for name in record["candidates"]}
    wrong = [name for name, v in verdicts.items() if v["result"] != expected(name)]
    result = "PASS" if not wrong else "FAIL"
    return {"result": result, "candidates": verdicts, "wrong": wrong}


def _why_not(target: str, record: Record) -> list[str]:
    rows = [r for r in record["targets"] if r["name"] == target and not r["patched"]]
    return [f"  {r['target']}: {r['detail']}" for r in rows]
