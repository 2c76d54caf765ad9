"""Each served entry judged from its prices (plain Python over records): right, wrong,
undecided or not auditable, and the headline.

By each timer (``records.TIMERS``), the shipped config is *slower* than the clean pick where its
price is beyond both the noise (the larger spread of the two configs' rounds, ``NOISE_FLOOR`` at
least: ab's rule, ``_ab.compare.effect``) and the floor (``--min-effect``), *faster* where the
clean pick is slower by that rule, and *alike* otherwise.  Then:

* wrong: slower by both timers; its cost per call is the smaller of the two timers' differences,
  weighted by the job's calls of that key where the job counted them;
* undecided: slower by one timer and faster by the other (both figures are kept);
* right: anything else (alike by either timer, or the shipped config faster), or the clean
  re-tune kept the shipped config;
* not auditable: no price, and why, in one line.
"""

from __future__ import annotations

from .._ab.compare import CHANGED, MIN_EFFECT, NOISE_FLOOR, effect
from .records import TIMERS, Audited, Headline, PickPrice, Priced, Served

RIGHT, WRONG, UNDECIDED, NOT_AUDITABLE = "right", "wrong", "undecided", "not auditable"
CLASSES = (WRONG, UNDECIDED, RIGHT, NOT_AUDITABLE)
SLOWER, FASTER, ALIKE = "slower", "faster", "alike"


def noise(prices: dict[str, PickPrice], labels: list[str]) -> float:
    """The larger spread of ``labels``' rounds, relative to their price, NOISE_FLOOR at least."""
    return float(max([NOISE_FLOOR, *((prices[p]["high"] - prices[p]["low"]) / prices[p]["us"] for p in labels)]))


def verdict(shipped_us: float, clean_us: float, spread: float, min_effect: float) -> str:
    """The shipped config against the clean pick by one timer: SLOWER, FASTER or ALIKE."""
    if effect(shipped_us / clean_us - 1, spread, min_effect) == CHANGED:
        return SLOWER
    if effect(clean_us / shipped_us - 1, spread, min_effect) == CHANGED:
        return FASTER
    return ALIKE


def judge(line: Served, priced: Priced | None, calls: int | None, min_effect: float = MIN_EFFECT) -> Audited:
    """One served entry's class and why, from its prices (None: it was never priced)."""
    found: Audited = {
        "class": NOT_AUDITABLE,
        "op": line["op"],
        "key": line["key"],
        "source": line["source"],
        "shipped": line["shipped"],
        "reason": "",
        "calls": calls,
    }
    why = _why_not(line, priced)
    if why is not None or priced is None:
        return {**found, "reason": why or "it was not priced"}
    found["clean"], found["offered"], found["leaders"] = (
        priced["clean"],
        len(line["offered"]),
        len(priced.get("leaders", [])),
    )
    found["seconds"] = priced.get("seconds", {})
    if priced["clean"] == line["shipped"]:
        return {**found, "class": RIGHT, "reason": "the clean re-tune kept the shipped config"}
    return _by_prices(found, priced["prices"], min_effect)


def _why_not(line: Served, priced: Priced | None) -> str | None:
    """Why the entry has no class by price, in one line; None where it has prices."""
    if "error" in line["call"]:
        return f"its call cannot be made again: {line['call']['error']}"
    if line["source"] == "pruner":
        return (
            "its pruner offered one config of the kernel's many; no library record says what it offers without a table"
        )
    if priced is None:
        return None
    if "error" in priced:
        return f"it could not be priced: {priced['error']}"
    if not all(timer in priced.get("prices", {}) for timer in TIMERS) or "clean" not in priced:
        return "the pricing process gave no price for it"
    return None


def _by_prices(found: Audited, prices: dict[str, dict[str, PickPrice]], min_effect: float) -> Audited:
    shipped, clean = found["shipped"], found["clean"]
    spreads = {timer: noise(prices[timer], [shipped, clean]) for timer in TIMERS}
    ratios = {timer: prices[timer][shipped]["us"] / prices[timer][clean]["us"] for timer in TIMERS}
    said = {
        timer: verdict(prices[timer][shipped]["us"], prices[timer][clean]["us"], spreads[timer], min_effect)
        for timer in TIMERS
    }
    found = {**found, "prices_us": prices, "ratio": ratios, "noise": spreads}
    figures = ", ".join(f"{timer} {ratios[timer] - 1:+.1%} (noise {spreads[timer]:.1%})" for timer in TIMERS)
    if all(v == SLOWER for v in said.values()):
        cost = min(prices[t][shipped]["us"] - prices[t][clean]["us"] for t in TIMERS)
        calls = found.get("calls")
        return {
            **found,
            "class": WRONG,
            "cost_us": cost,
            "cost_job_us": cost * calls if calls is not None else None,
            "reason": f"the shipped config is slower than the clean pick by both timers, beyond the noise and the "
            f"{min_effect:.0%} floor: {figures}",
        }
    if {SLOWER, FASTER} <= set(said.values()):
        return {**found, "class": UNDECIDED, "reason": f"the timers disagree: {figures}"}
    return {
        **found,
        "class": RIGHT,
        "reason": f"not slower beyond the noise and the {min_effect:.0%} floor by both timers: {figures}",
    }


def headline(entries: list[Audited]) -> Headline:
    """How many entries of each class, and what the wrong ones cost the job."""
    wrong = [e for e in entries if e["class"] == WRONG]
    counted = [e for e in wrong if e.get("cost_job_us") is not None]
    return Headline(
        entries=len(entries),
        classes={cls: sum(e["class"] == cls for e in entries) for cls in CLASSES},
        other_gpu=sum(bool(e.get("other_gpu")) for e in entries),
        cost_us_per_call=sum(float(e.get("cost_us") or 0.0) for e in wrong),
        cost_job_us=sum(float(e.get("cost_job_us") or 0.0) for e in counted),
        counted=len(counted),
    )
