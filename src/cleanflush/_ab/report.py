"""The text of ``cleanflush ab``'s report, from its record (plain Python)."""

from __future__ import annotations

import shlex
import signal
import statistics
from collections import Counter

from .._policies import STOCK_POLICY
from . import programs as _ab_programs
from .compare import CLEAN_SLOWER, NEGLIGIBLE, UNCHANGED, UNDECIDED, UNSTABLE, WITHIN_NOISE, beyond
from .records import Comparison, Decision, EndToEnd, PickComparison, PickDecision, Result, Summary

COMPARED = ("triton", "inductor")  # the targets whose flushes decide what ab compares


def format_report(result: Result) -> str:
    if "picks" in result:
        return format_pick_report(result)
    cmp, policy = result["comparison"], result["policy"]
    lines = _header(result) + _decisions_lines(cmp, policy, result["runs_compared"])
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
        lines += _end_to_end_lines(result["end_to_end"], policy, cmp["decisions"])
    if result.get("figure"):
        lines.append(f"figure: {result['figure']}")
    return "\n".join(lines + _ending_lines(result))


def _ending_lines(result: Result) -> list[str]:
    """The runs that failed, the lines skipped, an interruption."""
    lines = [
        f"run {r['index']} ({r.get('side', r['policy'])}) {ended(r['code'])}"
        for r in result["run_codes"]
        if r["code"] != 0
    ]
    if result["skipped_lines"]:
        lines.append(f"decision lines skipped (not decisions): {len(result['skipped_lines'])}")
    if result.get("interrupted"):
        lines.append(f"interrupted: {result['runs_compared']} of {result['runs']} pairs of runs compared")
    return lines


def format_pick_report(result: Result) -> str:
    """``--compare pick``: each rule's agreement across runs and ranks, the decisions whose picks
    differed, what the second rule's picks cost against the first's by price, and the wall time
    each rule took."""
    picks = result["picks"]
    first, second = picks["rules"]
    lines = [
        f"cleanflush ab: {shown(result['command'])}",
        f"  the pick rules {first} and {second}, both under {result['policy']}, "
        f"{result['runs']} run(s) each, interleaved, fresh caches per run",
        "",
        f"autotuning decisions matched in both: {len(picks['decisions'])} (Triton @autotune, Inductor's algorithm "
        "selection and kernel configs, their coordinate descent)",
    ]
    for side, a in picks["agreement"].items():
        lines.append(
            f"  {side}: {a['agree']} of {a['made_in_every_run']} decisions picked alike in all {a['runs']} runs "
            f"({a['agree_by_price']} within the noise by price)"
        )
    for side, r in picks.get("ranks", {}).items():
        lines.append(
            f"  {side}, across ranks: every rank picked alike in {r['alike']} of {r['decisions']} decisions "
            f"made on several ranks ({r['runs']} run(s) of several ranks)"
        )
    differed = [d for d in picks["decisions"] if len({w for ws in d["winners"].values() for w in ws}) > 1]
    if differed:
        lines += ["", f"decisions whose picks differed ({second} / {first}: the mean price of each rule's picks):"]
    for d in differed:
        lines += [f"  {short(d['op'], 60)} {short(d['key'], 50)}", *_pick_decision_lines(d, (first, second))]
    lines += _pick_total_lines(picks)
    if "end_to_end" in result and not result["interrupted"]:
        lines += _pick_end_to_end_lines(result["end_to_end"], (first, second))
    return "\n".join(lines + _ending_lines(result))


def _pick_decision_lines(d: PickDecision, rules: tuple[str, str]) -> list[str]:
    width = max(len(rule) for rule in rules) + 1
    found = [f"    {(rule + ':').ljust(width)} {_counted(d['winners'][rule])}" for rule in rules]
    for rule in rules:
        bands = d["bands"].get(rule)
        if bands:
            found.append(
                f"    {rule} bands {min(bands):.1%}-{max(bands):.1%}, {len(d['candidates'][rule])} config(s) in them"
            )
        shared = d.get("shared_ms", {}).get(rule)
        if shared and any(shared):
            us = [1e3 * t for t in shared]
            found.append(f"    {rule}: the autotuner's hooks, timed alone: {min(us):.1f}-{max(us):.1f} us, taken off")
    if d["priced"]:
        ratio, noise = d["ratio"], d["noise"]
        size = "within the noise" if abs(ratio - 1) <= noise else ("slower" if ratio > 1 else "faster")
        found.append(f"    {rules[1]} / {rules[0]} {ratio:.4f} by price (noise {noise:.1%}): {size}")
    else:
        found.append(f"    not priced: {d.get('not_priced', '')}")
    return found


def _counted(winners: list[str]) -> str:
    counts = Counter(winners).most_common()
    return ", ".join(f"{short(w, 50)} x{n}" for w, n in counts)


def _pick_total_lines(picks: PickComparison) -> list[str]:
    t, walls = picks["total"], picks["wall_s"]
    first, second = picks["rules"]
    lines = [""]
    if t["ratio"] is not None:
        lines.append(
            f"job, over the {t['counted']} priced decision(s) whose calls were counted: {second} / {first} "
            f"{t['ratio']:.4f} ({t['us'][second]:.1f} us against {t['us'][first]:.1f} us of their kernels)"
        )
    else:
        lines.append(f"job: no priced decision with counted calls ({t['priced']} priced)")
    lines += _wall_lines(walls, (first, second))
    for rule, spent in picks.get("again_s", {}).items():
        if any(spent):
            again = statistics.median(spent)
            lines.append(
                f"  of a {rule} run, the rule's own timing (configs again, hooks alone), median: {again:.1f} s"
            )
    return lines


def _wall_lines(walls: dict[str, list[float]], rules: tuple[str, str]) -> list[str]:
    """Each rule's wall time a run; their ratio only beside the spread of one rule's own runs,
    which it must exceed to say anything."""
    first, second = (walls.get(rule) or [] for rule in rules)
    if not first or not second:
        return []
    f, s = statistics.median(first), statistics.median(second)
    said = f"wall time a run, median: {rules[0]} {f:.1f} s, {rules[1]} {s:.1f} s"
    if min(len(first), len(second)) < 2 or not f or not s:
        return [said + " (one run of a rule: their difference cannot be told from the runs' own spread)"]
    spread = max(max(ts) / min(ts) - 1 for ts in (first, second) if min(ts) > 0)
    change = s / f - 1
    verdict = "within" if abs(change) <= spread else "beyond"
    return [said + f" ({change:+.1%}, {verdict} the runs of one rule's spread of {spread:.1%})"]


def _header(result: Result) -> list[str]:
    cmp, policy = result["comparison"], result["policy"]
    kinds = Counter(d["kind"] for d in cmp["decisions"])
    priced = sum(d["priced"] for d in cmp["decisions"])
    return [
        f"cleanflush ab: {shown(result['command'])}",
        f"  stock flush ({STOCK_POLICY}) against {policy}, {result['runs']} run(s) each, interleaved, "
        "fresh caches per run",
        *_not_patched_lines(result.get("not_patched", []), policy),
        "",
        f"autotuning decisions matched in both: {len(cmp['decisions'])} "
        f"(Triton autotuner {kinds.get('triton', 0)}, Inductor max-autotune {kinds.get('inductor', 0)}, "
        f"Inductor kernel configs {kinds.get('inductor-kernel', 0)}, "
        f"their coordinate descent {kinds.get('inductor-coordesc', 0)}); priced independently: {priced}",
    ]


def _decisions_lines(cmp: Comparison, policy: str, runs: int) -> list[str]:
    if not cmp["decisions"]:
        return [
            "no autotuning decision was recorded: does the command autotune (Triton @autotune, "
            "torch.compile mode='max-autotune')?"
        ]
    a = cmp["agreement"]
    stock = a[STOCK_POLICY]
    lines = [
        f"reproducible: stock runs agree on {stock['agree']} of {stock['made_in_every_run']} decisions "
        f"({stock['agree_by_price']} by price), {policy} runs on {a['clean']['agree']} of "
        f"{a['clean']['made_in_every_run']} ({a['clean']['agree_by_price']} by price)"
        + ("" if runs > 1 else " (one run a side: nothing to agree with)")
    ]
    lines += _changed_lines(cmp, policy)
    for cls in (NEGLIGIBLE, UNSTABLE, WITHIN_NOISE, CLEAN_SLOWER, UNDECIDED):
        found = [d for d in cmp["decisions"] if d["class"] == cls]
        if found:
            floor = f" (under the {cmp['min_effect']:.0%} floor)" if cls == NEGLIGIBLE else ""
            lines.append(f"{cls}{floor}: {len(found)}")
            for d in found:
                lines += [f"{_decision_line(d)}: {d['reason']}", *_price_range(d, policy, cmp["min_effect"])]
    return [*lines, f"unchanged: {cmp['classes'][UNCHANGED]}"]


def _changed_lines(cmp: Comparison, policy: str) -> list[str]:
    changed = cmp["changed"]
    if not changed:
        return [f"the dirty flush changed no decision here {beyond(cmp['min_effect'])}"]
    lines = [
        f"changed by the dirty flush: {len(changed)} of {len(cmp['decisions'])} (every stock pick slower than "
        f"every {policy} pick, {beyond(cmp['min_effect'])}; by the independent price where priced)"
    ]
    for d in changed:
        lines.append(_decision_line(d))
        if "prices_us" in d:
            lines += _priced_picks(d, "stock", d["stock_winners"]) + _priced_picks(d, policy, d["clean_winners"])
            lines.append(f"    stock / {policy} {d['ratio']:.2f}x; sure: {d['rounds']} rounds, noise {d['noise']:.1%}")
        else:
            lines += _clean_timed_picks(d, policy)
    total = cmp["total"]
    if total["changed_priced"]:
        counted = (
            f", {_duration(total['us_over_calls'])} over the {total['calls']:.0f} calls the runs counted"
            if total["counted"]
            else ""
        )
        lines.append(
            f"in total: the stock picks cost {total['us_per_call_sum']:.1f} us per call of the "
            f"{total['changed_priced']} changed kernels (summed){counted}"
        )
    return lines


def _priced_picks(d: Decision, side: str, winners: list[str]) -> list[str]:
    counts = Counter(winners).most_common()
    lines = []
    for pick, n in counts:
        p = d["prices_us"][pick]
        runs = f"{n} of {len(winners)} runs"
        lines.append(f"    {side} picked {short(pick)} ({runs}): {p['us']:.2f} us ({p['low']:.2f}-{p['high']:.2f})")
    return lines


def _price_range(d: Decision, policy: str, min_effect: float) -> list[str]:
    """A priced decision outside the headline: each side's picks by price, and what a stock
    run's pick costs on average (one bad pick in three runs is unstable, not changed), said
    to be under the floor where it is."""
    if "prices_us" not in d:
        return []
    spans = []
    for side, winners in (("stock", d["stock_winners"]), (policy, d["clean_winners"])):
        low, high = (f"{f(d['prices_us'][w]['us'] for w in winners):.2f}" for f in (min, max))
        spans.append(f"{side} picks {low}-{high} us" if high != low else f"{side} picks {low} us")
    average = d["mean_ratio"] - 1
    said = f"{average:+.1%}".replace("-0.0%", "+0.0%")  # a rounded zero has no sign
    floor = f" (under the {min_effect:.0%} floor)" if abs(average) < min_effect else ""
    return [f"    {', '.join(spans)}; a stock run's pick {said} on average{floor}"]


def _clean_timed_picks(d: Decision, policy: str) -> list[str]:
    """A change found by the clean runs' own timing (no price): each stock pick's cost there."""
    lines = []
    for p in d["stock_picks"]:
        runs = "" if p["runs"] == len(d["stock_winners"]) else f" in {p['runs']} of {len(d['stock_winners'])} runs"
        spread = "" if p["cost_low"] == p["cost_high"] else f" (runs: {p['cost_low']:+.1%} .. {p['cost_high']:+.1%})"
        lines.append(
            f"    stock picked {short(p['pick'])}{runs}: {p['cost']:+.1%} slower by the clean timing{spread}"
            + _clean_us(d, p["pick"])
        )
    winner = f"    {policy} picked {short(d['clean_winner'])}{_clean_us(d, d['clean_winner'])}"
    return [*lines, winner, f"    not priced: {d['not_priced']}"]


def _duration(us: float) -> str:
    """A time in ms, or in us under 0.1 ms, where two decimals of a ms say little (a few calls
    of a small kernel read 0.00 ms)."""
    return f"{us:.1f} us" if us < 100 else f"{us / 1e3:.2f} ms"


def _clean_us(d: Decision, pick: str) -> str:
    """A pick's time in the clean runs' own timing (median), so a large ratio of a tiny kernel
    reads as the few microseconds it is."""
    timed = d["timings_ms"].get(pick)
    return f", {timed['clean'] * 1e3:.2f} us" if timed else ""


def short(label: str, width: int = 90) -> str:
    """``label``, cut to ``width`` characters with "..." where it is longer."""
    return label if len(label) <= width else label[: width - 3] + "..."


def _decision_line(d: Decision) -> str:
    return f"  {d['kind']} {short(d['op'], 70)} [{short(d['key'], 70)}]"


def _end_to_end_lines(e2e: EndToEnd | None, policy: str, decisions: list[Decision]) -> list[str]:
    if e2e is None:
        if any(d.get("priced") for d in decisions):
            return ["end to end: no run compiled an Inductor program (Triton @autotune decisions are priced above)"]
        if decisions:
            return ["end to end: no run compiled an Inductor program (the decisions above are judged as shown)"]
        return ["end to end: no run compiled an Inductor program, and no run recorded an autotuning decision"]
    head = (
        f"end to end: the programs tuned under the stock flush against those tuned under {policy} "
        "(timed together, no flush between calls)"
    )
    return [head, *_program_lines(e2e, (STOCK_POLICY, policy), "flush")]


def _pick_end_to_end_lines(e2e: EndToEnd | None, rules: tuple[str, str]) -> list[str]:
    if e2e is None:
        return ["end to end: no run compiled an Inductor program"]
    head = (
        f"end to end: the programs tuned under {rules[1]} against those tuned under {rules[0]} "
        "(each program tunes again in one process, then all are timed together, no flush between calls)"
    )
    return [head, *_program_lines(e2e, (rules[1], rules[0]), "rule")]


def _program_lines(e2e: EndToEnd, over: tuple[str, str], under: str) -> list[str]:
    """A line per graph and the total: side ``over[0]``'s programs over side ``over[1]``'s
    (the record keeps its first side over its second), and whether that is beyond the noise."""
    inverted = list(e2e.get("sides", over)) != list(over)
    lines = []
    named: list[tuple[str, Summary]] = [(g["name"], g) for g in e2e["graphs"]]
    if "total" in e2e:
        named.append(("in total", e2e["total"]))
    for name, g in named:
        r, noise = g["ratio"], [v for v in g["same_side"].values() if v is not None]
        median, q1, q3 = (1 / r["median"], 1 / r["q3"], 1 / r["q1"]) if inverted else (r["median"], r["q1"], r["q3"])
        slower, faster = ("faster", "slower") if inverted else ("slower", "faster")
        judged = {
            _ab_programs.SLOWER: f"{slower}, beyond the noise",
            _ab_programs.FASTER: f"{faster}, beyond the noise",
            _ab_programs.WITHIN_NOISE: "within the noise",
            _ab_programs.UNKNOWN: "one run a side: the noise is unknown",
        }[g["verdict"]]
        if noise:
            judged += f" (programs tuned under the same {under} differ by up to {max(noise):.1%})"
        lines.append(
            f"  {name}: {median - 1:+.1%} (q1 {q1 - 1:+.1%}, q3 {q3 - 1:+.1%}), "
            f"{g['ms'][over[0]]:.3f} ms against {g['ms'][over[1]]:.3f} ms: {judged}"
        )
    return lines + [f"  {p}" for p in e2e["problems"]]


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
    if set(names) >= set(COMPARED):
        what = "the clean side is not patched: stock against stock"
    else:
        what = f"{', '.join(names)} runs stock in the {policy} runs too: its decisions compare stock against stock"
    return [f"  CLEANFLUSH_DISABLE={','.join(names)}: {what}"]
