"""What the dirty flush did to each autotuning decision of ``cleanflush ab``: plain Python over
the runs' decision records and the independent prices of their picks (``_ab.prices``).

A decision is priced where its runs picked more than one config and one run recorded the call
(a Triton ``@autotune`` kernel): each pick's kernel time after a plain read, side by side in
one process, rounds interleaved.  By that price:

* near-ties are one choice: a side's picks within the noise of each other agree;
* ``changed``: every stock pick is slower than every clean pick by more than the noise and by
  more than a practical floor (``min_effect``); ``negligible``: beyond the noise, under the
  floor (listed, not in the headline);
* ``unstable``: a side's own picks differ beyond the noise (and the stock picks are not all
  slower than the clean ones);
* ``within noise``: the two sides' picks are near-ties; ``clean slower``: every clean pick is
  slower than every stock pick beyond the noise and the floor (the dirty flush picked better);
* ``unchanged``: every run picked the same config (nothing to price).

A decision that cannot be priced (Inductor's, a kernel defined in ``__main__``, a launch that
fails) is judged by the clean runs' own timing, as before there were prices, and says why it
was not priced.
"""

from __future__ import annotations

import statistics
from collections import Counter
from typing import cast

from .._pick import FASTEST, STABLE, Picked
from .._policies import STOCK_POLICY
from .._stats import quartiles
from .records import (
    Agreement,
    Comparison,
    Decision,
    DecisionLine,
    Judged,
    Made,
    PickComparison,
    PickDecision,
    PickPrice,
    PickTotal,
    Price,
    RankAgreement,
    Run,
    RunCode,
    StockPick,
    ToPrice,
    Total,
)

MIN_EFFECT = 0.02  # the practical floor: a stock pick this much slower or less does not matter
# The smallest noise a price is trusted to: rounds that agree exactly (a timer's resolution)
# still leave this much.
NOISE_FLOOR = 0.001
CHANGED, NEGLIGIBLE, UNSTABLE, WITHIN_NOISE, CLEAN_SLOWER, UNDECIDED, UNCHANGED = (
    "changed",
    "negligible",
    "unstable",
    "within noise",
    "clean slower",
    "undecided",
    "unchanged",
)
CLASSES = (CHANGED, NEGLIGIBLE, UNSTABLE, WITHIN_NOISE, CLEAN_SLOWER, UNDECIDED, UNCHANGED)

Key = tuple[str, str, str]


def effect(gap: float, noise: float, min_effect: float) -> str | None:
    """The one rule for how a gap between two sides' picks counts (a fraction: how much slower
    one side's every pick is than the other's): ``changed`` beyond the noise and the practical
    floor, ``negligible`` beyond the noise only, None within the noise."""
    if gap <= noise:
        return None
    return CHANGED if gap > min_effect else NEGLIGIBLE


def beyond(min_effect: float) -> str:
    """The rule in words, as reasons and the report say it."""
    return f"beyond the noise and the {min_effect:.0%} floor"


def key_of(d: DecisionLine | Made | Decision) -> Key:
    return d["kind"], d["op"], d["key"]


def by_key(runs: list[Run]) -> dict[Key, list[Made]]:
    """Each decision's records, one per run that made it (a run's first tuning of a key)."""
    found: dict[Key, list[Made]] = {}
    for run in runs:
        seen = set()
        for d in run:
            if d["kind"] != "calls" and key_of(d) not in seen and d.get("winner") is not None:
                seen.add(key_of(d))
                found.setdefault(key_of(d), []).append(cast(Made, d))  # a decision line with its pick
    return found


def calls_per_run(runs: list[Run]) -> dict[tuple[str, str], float]:
    """(op, key) -> the median over the runs that counted them of the kernel's calls with that key."""
    counted: dict[tuple[str, str], list[int]] = {}
    for run in runs:
        totals: Counter[tuple[str, str]] = Counter()
        for line in run:
            if line["kind"] == "calls":
                totals.update({(line["op"], key): n for key, n in line["counts"].items()})
        for found, n in totals.items():
            counted.setdefault(found, []).append(n)
    return {found: statistics.median(ns) for found, ns in counted.items()}


def to_price(stock_runs: list[Run], clean_runs: list[Run]) -> list[ToPrice]:
    """The decisions to price: made by both sides, picked differently somewhere; each with the
    call record a run left (or why none did) and every pick as a candidate."""
    stock, clean = by_key(stock_runs), by_key(clean_runs)
    wanted: list[ToPrice] = []
    for key in stock:
        if key not in clean:
            continue
        records = stock[key] + clean[key]
        picks = sorted({d["winner"] for d in records})
        if len(picks) < 2:
            continue
        calls = [d["call"] for d in records if isinstance(d.get("call"), dict)]
        file = next((c["file"] for c in calls if isinstance(c.get("file"), str)), None)
        why = next((str(c["error"]) for c in calls if "error" in c), None)
        if file is None and why is None:
            why = "its runs recorded no call to make again (only Triton @autotune calls are recorded)"
        wanted.append(ToPrice(key=list(key), file=file, error=why, candidates=picks))
    return wanted


def _price_noise(prices: dict[str, PickPrice], labels: list[str]) -> float:
    """The largest spread of the rounds among ``labels``' prices (relative), NOISE_FLOOR at least."""
    spreads = [(prices[p]["high"] - prices[p]["low"]) / prices[p]["us"] for p in labels]
    return float(max([NOISE_FLOOR, *spreads]))


def _side_apart(prices: dict[str, PickPrice], picks: set[str], noise: float) -> bool:
    """Whether a side's own picks differ by their price beyond the noise."""
    us = [float(prices[p]["us"]) for p in picks]
    return max(us) / min(us) - 1 > noise


def classify_priced(stock: list[str], clean: list[str], price: Price, side: str, min_effect: float) -> Judged:
    """The class of a decision whose picks are all priced (``price["prices"]``)."""
    prices = price["prices"]
    s_picks, c_picks = set(stock), set(clean)
    noise = _price_noise(prices, sorted(s_picks | c_picks))
    slower = min(prices[p]["us"] for p in s_picks) / max(prices[p]["us"] for p in c_picks) - 1
    faster = min(prices[p]["us"] for p in c_picks) / max(prices[p]["us"] for p in s_picks) - 1
    found: Judged = {"class": WITHIN_NOISE, "reason": "", "noise": noise, "rounds": price.get("rounds"), "gap": slower}
    apart = [name for name, picks in ((STOCK_POLICY, s_picks), (side, c_picks)) if _side_apart(prices, picks, noise)]
    cls = effect(slower, noise, min_effect)
    if cls is not None and side not in apart:
        why = f"every stock pick is {slower:+.1%} or more slower than every {side} pick by its price"
        floor = "beyond" if cls == CHANGED else "under"
        return {**found, "class": cls, "reason": f"{why}, beyond the noise of {noise:.1%}, {floor} the floor"}
    if apart:
        names = " and the ".join(apart)
        return {
            **found,
            "class": UNSTABLE,
            "unstable_side": apart[0] if len(apart) == 1 else "both",
            "reason": f"the {names} runs' own picks differ by their price beyond the noise of {noise:.1%}",
        }
    if effect(faster, noise, min_effect) == CHANGED:  # the rule, the other way round
        return {
            **found,
            "class": CLEAN_SLOWER,
            "gap": -faster,
            "reason": f"every {side} pick is {faster:+.1%} or more slower than every stock pick by its price",
        }
    return {
        **found,
        "class": WITHIN_NOISE,
        "reason": f"near-ties: the picks' prices lie within the noise of {noise:.1%} (or the floor)",
    }


def _picks(winners: list[str]) -> str:
    """ "a in 2 of 3 runs, b in 1", most frequent first."""
    counts = Counter(winners).most_common()
    return ", ".join(
        f"{_short(w, 60)} in {n}" + (f" of {len(winners)} runs" if i == 0 else "") for i, (w, n) in enumerate(counts)
    )


def _short(label: str, width: int) -> str:
    return label if len(label) <= width else label[: width - 3] + "..."


def _slower(clean: list[Made], pick: str, winner: str) -> list[float] | None:
    """How much slower ``pick`` is than ``winner`` in each clean run (a fraction), or None
    where a clean run did not time both."""
    ratios = []
    for d in clean:
        t = d["timings_ms"]
        if pick not in t or not t.get(winner):
            return None
        ratios.append(t[pick] / t[winner] - 1)
    return ratios


def _no_cost(cls: str, reason: str) -> Judged:
    """A class that has no cost in the clean runs' timing."""
    return {"class": cls, "reason": reason, "cost": None, "cost_low": None, "cost_high": None, "clean_spread": None}


def classify_by_clean_timing(stock: list[Made], clean: list[Made], side: str, min_effect: float = MIN_EFFECT) -> Judged:
    """The class of a decision that has no price, by the clean runs' own timing: ``changed``
    needs every clean run to agree on a winner and every stock pick to be slower than it, in
    every clean run, by more than the spread of that ratio over the clean runs (the clean
    side's own noise for those two choices) and the floor.  With one run a side there is no
    spread: a differing pick is ``undecided``."""
    s_win, c_win = [d["winner"] for d in stock], [d["winner"] for d in clean]
    if len(set(c_win)) > 1:
        who = f"the {side} runs disagree ({_picks(c_win)})"
        if len(set(s_win)) > 1:
            who += f", and so do the stock runs ({_picks(s_win)})"
        return {**_no_cost(UNSTABLE, who), "unstable_side": "both" if len(set(s_win)) > 1 else side}
    named = _short(c_win[0], 60)
    if c_win[0] in s_win:
        if len(set(s_win)) == 1:
            return _no_cost(UNCHANGED, f"every run picked {named}")
        why = f"the stock runs disagree ({_picks(s_win)}); every {side} run picked {named}"
        return {**_no_cost(UNSTABLE, why), "unstable_side": STOCK_POLICY}
    timed = {pick: _slower(clean, pick, c_win[0]) for pick in sorted(set(s_win))}
    per_pick = {pick: r for pick, r in timed.items() if r is not None}
    if len(per_pick) < len(timed):
        return _no_cost(UNDECIDED, f"the {side} runs did not time the stock pick")
    return _by_clean_ratios(per_pick, s_win, len(clean), side, named, min_effect)


def _by_clean_ratios(
    per_pick: dict[str, list[float]], s_win: list[str], runs: int, side: str, named: str, min_effect: float
) -> Judged:
    """The class from each stock pick's ratios to the clean winner, one per clean run."""
    ratios = [r for rs in per_pick.values() for r in rs]
    cost = statistics.median(ratios)
    found = _no_cost(WITHIN_NOISE, "")
    found["cost"], found["cost_low"], found["cost_high"] = cost, min(ratios), max(ratios)
    if runs < 2:
        return {
            **found,
            "class": UNDECIDED,
            "reason": f"one {side} run: its noise is unknown (run with --runs 2 or more)",
        }
    spread = found["clean_spread"] = max(max(rs) - min(rs) for rs in per_pick.values())
    cls = effect(cost, spread, min_effect)
    if min(ratios) <= 0 or cls is None:
        return {
            **found,
            "class": WITHIN_NOISE,
            "reason": f"the stock pick is {cost:+.1%} by the {side} timing, inside the {side} runs' "
            f"spread of {spread:.1%}",
        }
    also = f"; the stock runs disagree ({_picks(s_win)})" if len(set(s_win)) > 1 else ""
    counts = Counter(s_win)
    picks = [
        StockPick(pick=p, runs=counts[p], cost=statistics.median(rs), cost_low=min(rs), cost_high=max(rs))
        for p, rs in sorted(per_pick.items(), key=lambda item: -counts[item[0]])
    ]
    under = "" if cls == CHANGED else f", under the {min_effect:.0%} floor"
    return {
        **found,
        "stock_picks": picks,
        "class": cls,
        "reason": f"every {side} run picked {named}, and the stock pick is slower in each, by more "
        f"than the {side} runs' spread of {spread:.1%}{also}{under}",
    }


def _modal(winners: list[str]) -> str:
    counts = Counter(winners)
    best = max(counts.values())
    return next(w for w in winners if counts[w] == best)  # ties: the earliest run's


def _medians(runs: list[Made]) -> dict[str, float]:
    labels = [label for label in runs[0]["timings_ms"] if all(label in d["timings_ms"] for d in runs)]
    return {label: statistics.median(d["timings_ms"][label] for d in runs) for label in labels}


def _judged(stock: list[Made], clean: list[Made], side: str, price: Price | None, min_effect: float) -> Judged:
    """One decision's class and reason, by price where its picks have one."""
    s_win, c_win = [d["winner"] for d in stock], [d["winner"] for d in clean]
    picks = set(s_win) | set(c_win)
    if len(picks) == 1:
        return {**_no_cost(UNCHANGED, f"every run picked {_short(s_win[0], 60)}"), "priced": False}
    if price is not None and picks <= set(price.get("prices") or {}):
        return {**_no_cost(UNCHANGED, ""), **classify_priced(s_win, c_win, price, side, min_effect), "priced": True}
    found = classify_by_clean_timing(stock, clean, side, min_effect)
    if price is None:  # none was asked for (ab prices what its runs recorded a call of)
        return {**found, "priced": False, "not_priced": "no price was asked for"}
    why = price.get("error") or "a pick has no price"
    return {**found, "priced": False, "not_priced": why, "reason": f"{found['reason']} (not priced: {why})"}


def _decision(
    key: Key,
    stock: list[Made],
    clean: list[Made],
    side: str,
    price: Price | None,
    calls: float | None,
    min_effect: float,
) -> Decision:
    found = _judged(stock, clean, side, price, min_effect)
    s_win, c_win = [d["winner"] for d in stock], [d["winner"] for d in clean]
    s_time, c_time = _medians(stock), _medians(clean)
    both = [label for label in c_time if label in s_time and c_time[label] > 0]
    record = Decision(
        kind=key[0],
        op=key[1],
        key=key[2],
        **found,  # type: ignore[typeddict-item]  # a Judged, which never holds the price keys below
        changed=found["class"] == CHANGED,
        stock_winner=_modal(s_win),
        clean_winner=_modal(c_win),
        stock_winners=s_win,
        clean_winners=c_win,
        stock_winner_slower_by=found["cost"],
        calls=calls,
        choices=len(both),
        timings_ms={label: {"stock": s_time[label], "clean": c_time[label]} for label in both},
    )
    if found["priced"] and price is not None:
        prices = price["prices"]
        record["prices_us"] = {label: prices[label] for label in sorted(set(s_win) | set(c_win))}
        stock_us, clean_us = prices[record["stock_winner"]]["us"], prices[record["clean_winner"]]["us"]
        record["ratio"] = stock_us / clean_us
        record["cost_us"] = stock_us - clean_us  # per call: what the stock pick costs the job
        s_price, c_price = prices[record["stock_winner"]], prices[record["clean_winner"]]
        record["cost"] = record["stock_winner_slower_by"] = record["ratio"] - 1
        record["cost_low"] = s_price["low"] / c_price["high"] - 1
        record["cost_high"] = s_price["high"] / c_price["low"] - 1
        # a run's pick, each run counted: what tuning under the stock flush costs on average
        # where the runs of a side disagree, which the modal picks above cannot show
        record["mean_ratio"] = statistics.fmean(prices[w]["us"] for w in s_win) / statistics.fmean(
            prices[w]["us"] for w in c_win
        )
    elif found["cost"] is not None:
        record["ratio"] = 1 + found["cost"]
    return record


def compare(
    stock_runs: list[Run],
    clean_runs: list[Run],
    side: str = "write-read",
    prices: list[Price] | None = None,
    min_effect: float = MIN_EFFECT,
) -> Comparison:
    """Match every decision across the runs, classify each (by price where it has one), say
    how reproducible each side's tuning is, and what the changed decisions cost the job."""
    stock, clean = by_key(stock_runs), by_key(clean_runs)
    calls = calls_per_run(stock_runs + clean_runs)
    priced = {tuple(p["key"]): p for p in prices or []}
    matched = [k for k in stock if k in clean]
    decisions = [
        _decision(k, stock[k], clean[k], side, priced.get(k), calls.get((k[1], k[2])), min_effect) for k in matched
    ]
    ratios = [v["stock"] / v["clean"] for d in decisions for v in d["timings_ms"].values()]
    q1, median, q3 = quartiles(ratios) if ratios else (None, None, None)
    return {
        "decisions": decisions,
        "changed": sorted((d for d in decisions if d["changed"]), key=lambda d: -d["ratio"]),
        "classes": {c: sum(d["class"] == c for d in decisions) for c in CLASSES},
        "agreement": _agreement(stock, clean, len(stock_runs), len(clean_runs), decisions),
        "only_stock": [list(k) for k in stock if k not in clean],
        "only_clean": [list(k) for k in clean if k not in stock],
        "ratio_stock_over_clean": {"n": len(ratios), "q1": q1, "median": median, "q3": q3, "values": ratios},
        "total": _total(decisions),
        "min_effect": min_effect,
    }


def _agreement(
    stock: dict[Key, list[Made]],
    clean: dict[Key, list[Made]],
    stock_count: int,
    clean_count: int,
    decisions: list[Decision] | list[PickDecision],
    names: tuple[str, str] = (STOCK_POLICY, "clean"),
) -> dict[str, Agreement]:
    """Per side: the decisions it made in every run, how many its runs picked alike, and how
    many by price (picks within the noise of each other are one choice)."""
    by_key = {(d["kind"], d["op"], d["key"]): d for d in decisions}
    found: dict[str, Agreement] = {}
    for name, records, count in ((names[0], stock, stock_count), (names[1], clean, clean_count)):
        made = [k for k in records if k in by_key and len(records[k]) == count]
        picks = {k: {d["winner"] for d in records[k]} for k in made}
        alike = sum(len(picks[k]) == 1 for k in made)
        near = sum(len(picks[k]) == 1 or _near(by_key[k], picks[k]) for k in made)
        found[name] = Agreement(runs=count, made_in_every_run=len(made), agree=alike, agree_by_price=near)
    return found


def _near(decision: Decision | PickDecision, picks: set[str]) -> bool:
    """Whether one side's different ``picks`` lie within the decision's noise by price."""
    prices = decision.get("prices_us")
    return prices is not None and not _side_apart(prices, picks, decision["noise"])


def compare_picks(
    first_runs: list[Run],
    second_runs: list[Run],
    prices: list[Price] | None,
    codes: list[RunCode],
    rules: tuple[str, str] = (FASTEST, STABLE),
) -> PickComparison:
    """``--compare pick``: how reproducible each rule's picks are (by pick, and by price:
    picks within the noise of each other agree), across runs and across the ranks of a run,
    what the second rule's picks cost against the first's by the independent price, and each
    rule's wall time."""
    sides = {rules[0]: by_key(first_runs), rules[1]: by_key(second_runs)}
    first, second = sides.values()
    calls = calls_per_run(first_runs + second_runs)
    priced = {tuple(p["key"]): p for p in prices or []}
    ranked = {rules[0]: ranks_by_key(first_runs), rules[1]: ranks_by_key(second_runs)}
    decisions = [
        _pick_decision(k, {r: sides[r][k] for r in rules}, priced.get(k), calls.get((k[1], k[2])), ranked)
        for k in first
        if k in second
    ]
    walls: dict[str, list[float]] = {rule: [] for rule in rules}
    for code in codes:
        if code.get("side") in walls and "wall_s" in code:
            walls[code["side"]].append(code["wall_s"])
    found: PickComparison = {
        "rules": list(rules),
        "decisions": decisions,
        "agreement": _agreement(first, second, len(first_runs), len(second_runs), decisions, names=rules),
        "total": _pick_total(decisions, rules),
        "wall_s": walls,
        "only_one_side": [list(k) for k in first if k not in second] + [list(k) for k in second if k not in first],
    }
    ranks = rank_agreement(ranked)
    if ranks:
        found["ranks"] = ranks
    again = {rule: [_again_s(run) for run in runs] for rule, runs in zip(rules, (first_runs, second_runs))}
    if any(any(a) for a in again.values()):  # what each rule's own timing took of each run's wall time
        found["again_s"] = again
    return found


def _again_s(run: Run) -> float:
    """The wall time a run's rule spent in its own timing (configs again, hooks alone)."""
    return sum(picked.again_s for d in run if (picked := picked_of(d)) is not None)


def picked_of(d: DecisionLine | Made) -> Picked[str] | None:
    """The rule's pick a decision line carries (``decision`` checked it), or None."""
    return Picked.from_line(d["pick"]) if "pick" in d else None


def ranks_by_key(runs: list[Run]) -> list[dict[Key, set[str]]]:
    """Per run, each decision made on more than one rank: the configs its ranks kept."""
    found = []
    for run in runs:
        kept: dict[Key, dict[int, str]] = {}
        for d in run:
            if d["kind"] != "calls" and "rank" in d and d.get("winner") is not None:
                kept.setdefault(key_of(d), {}).setdefault(d["rank"], str(d["winner"]))
        found.append({k: set(by_rank.values()) for k, by_rank in kept.items() if len(by_rank) > 1})
    return found


def rank_agreement(ranked: dict[str, list[dict[Key, set[str]]]]) -> dict[str, RankAgreement]:
    """Per rule: the decisions made on several ranks in its runs, and how many every rank of
    every run picked alike (nothing where no run had several ranks)."""
    found: dict[str, RankAgreement] = {}
    for rule, runs in ranked.items():
        several = [run for run in runs if run]
        if not several:
            continue
        keys = {k for run in several for k in run}
        alike = sum(all(len(run[k]) == 1 for run in several if k in run) for k in keys)
        found[rule] = RankAgreement(runs=len(several), decisions=len(keys), alike=alike)
    return found


def _pick_decision(
    key: Key,
    made: dict[str, list[Made]],
    price: Price | None,
    calls: float | None,
    ranked: dict[str, list[dict[Key, set[str]]]],
) -> PickDecision:
    winners = {rule: [d["winner"] for d in records] for rule, records in made.items()}
    picks = {rule: [p for d in records if (p := picked_of(d)) is not None] for rule, records in made.items()}
    found = PickDecision(
        kind=key[0],
        op=key[1],
        key=key[2],
        winners=winners,
        bands={rule: [p.band for p in ps] for rule, ps in picks.items()},
        candidates={rule: sorted({c for p in ps for c in p.candidates}) for rule, ps in picks.items()},
        calls=calls,
        priced=False,
    )
    shared = {rule: [p.shared_ms for p in ps] for rule, ps in picks.items()}
    if any(any(ts) for ts in shared.values()):  # the autotuner's hooks, timed alone and taken off before the band
        found["shared_ms"] = shared
    ranks = {rule: [len(run[key]) for run in runs if key in run] for rule, runs in ranked.items()}
    if any(ranks.values()):
        found["ranks"] = ranks
    every = {w for ws in winners.values() for w in ws}
    if len(every) == 1:
        return found  # every run picked alike: nothing to price
    if price is None or not every <= set(price.get("prices") or {}):
        found["not_priced"] = (price.get("error") if price else None) or "no price was asked for"
        return found
    us = price["prices"]
    found["priced"], found["prices_us"] = True, {p: us[p] for p in sorted(every)}
    found["noise"] = _price_noise(us, sorted(every))
    found["us"] = {rule: statistics.fmean(us[w]["us"] for w in ws) for rule, ws in winners.items()}
    first, second = found["us"].values()
    found["ratio"] = second / first
    return found


def _pick_total(decisions: list[PickDecision], rules: tuple[str, str]) -> PickTotal:
    priced = [d for d in decisions if d["priced"]]
    counted = [d for d in priced if d["calls"]]
    us = {rule: sum(d["us"][rule] * (d["calls"] or 0) for d in counted) for rule in rules}
    first, second = us.values()
    return {"priced": len(priced), "counted": len(counted), "us": us, "ratio": second / first if first else None}


def _total(decisions: list[Decision]) -> Total:
    """What the changed decisions' stock picks cost the job, by price: per call of each (us,
    summed), and weighted by the calls the runs counted where they counted them."""
    priced = [d for d in decisions if d["changed"] and "cost_us" in d]
    counted = [(d["cost_us"], d["calls"]) for d in priced if d["calls"]]
    return {
        "changed_priced": len(priced),
        "us_per_call_sum": sum(d["cost_us"] for d in priced),
        "counted": len(counted),
        "us_over_calls": sum(us * calls for us, calls in counted),
        "calls": sum(calls for _, calls in counted),
    }
