"""The text of ``cleanflush audit``'s report, from its record (plain Python)."""

from __future__ import annotations

from collections import Counter

from .._ab.report import short, shown
from .judge import NOT_AUDITABLE, RIGHT, UNDECIDED, WRONG
from .records import TIMERS, Audited, AuditResult


def format_report(result: AuditResult) -> str:
    head, entries = result["headline"], result["entries"]
    sources = Counter(e["source"] for e in entries)
    lines = [
        f"cleanflush audit: {shown(result['command'])}",
        f"  the job ran once as shipped (exit {result['code']}): {head['entries']} pick(s) served without tuning"
        + (f" ({', '.join(f'{s} {n}' for s, n in sources.most_common())})" if sources else "")
        + f"; {result['tuned_here']} decision(s) it tuned itself (not audited)",
    ]
    floor = f"{result['min_effect']:.0%}"
    for cls, what in (
        (
            WRONG,
            f"the shipped config slower than the clean pick by both timers, beyond the noise and the {floor} floor",
        ),
        (UNDECIDED, "the timers disagree"),
        (RIGHT, f"the clean re-tune kept the shipped config, or it is within the noise or the {floor} floor"),
        (NOT_AUDITABLE, "why, for each"),
    ):
        found = [e for e in entries if e["class"] == cls]
        lines.append(f"{cls}: {len(found)} of {len(entries)} ({what})")
        lines += [text for e in found for text in _entry_lines(e)]
    return "\n".join(lines + _total_lines(result))


def _entry_lines(e: Audited) -> list[str]:
    lines = [f"  {short(e['op'], 60)} [{short(e['key'], 70)}]" + (f": {e['provenance']}" if "provenance" in e else "")]
    if e["class"] == NOT_AUDITABLE:
        return lines + [f"    {e['reason']}"]
    if e["class"] == RIGHT and "prices_us" not in e:
        return lines[:1] if "provenance" in e else [f"{lines[0]}: {e['reason']}"]
    for name, label in (("shipped", e["shipped"]), ("clean", e.get("clean", ""))):
        prices = "; ".join(f"{t} {_price(e, t, label)}" for t in TIMERS)
        lines.append(f"    {name:7} {short(label, 70)}: {prices}")
    if e["class"] == WRONG:
        calls = e.get("calls")
        over = f", {e['cost_job_us']:.1f} us over the job's {calls} calls" if e.get("cost_job_us") is not None else ""
        lines.append(f"    costs {e.get('cost_us') or 0.0:.2f} us a call (the smaller of the two timers'){over}")
    lines.append(f"    {e['reason']}")
    if "written" in e:
        lines.append(f"    written: {e['written']}")
    return lines


def _price(e: Audited, timer: str, label: str) -> str:
    p = e.get("prices_us", {}).get(timer, {}).get(label)
    return "-" if p is None else f"{p['us']:.2f} us ({p['low']:.2f}-{p['high']:.2f})"


def _total_lines(result: AuditResult) -> list[str]:
    head = result["headline"]
    lines = [""]
    wrong = head["classes"].get(WRONG, 0)
    if wrong:
        counted = f", {head['cost_job_us']:.1f} us over the job's calls ({head['counted']} of {wrong} counted)"
        lines.append(f"the wrong entries cost the job {head['cost_us_per_call']:.2f} us per call of each{counted}")
    else:
        lines.append("no entry is wrong by both timers")
    if head["other_gpu"]:
        lines.append(f"tuned on another GPU: {head['other_gpu']} entries (priced the same way, on this GPU)")
    for w in result["written"]:
        lines.append(f"corrected table: {w['path']} ({w['replaced']} entries replaced); {w['use']}")
    lines += [f"problem: {p}" for p in result["problems"]]
    if result["skipped_lines"]:
        lines.append(f"recorder lines skipped (torn or not entries): {len(result['skipped_lines'])}")
    priced = sum("seconds" in e for e in result["entries"])
    each = f", {result['pricing_s'] / priced:.1f} s an entry" if priced else ""
    lines.append(f"wall time: {result['elapsed_s']:.0f} s (re-tuning and pricing {result['pricing_s']:.0f} s{each})")
    if result.get("interrupted"):
        lines.append("interrupted: the report covers what was done")
    return lines
