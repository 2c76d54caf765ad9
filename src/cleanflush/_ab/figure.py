"""The figure of ``cleanflush ab --figure``: how reproducible each side's tuning is, the cost
of each changed decision, and the end-to-end result.  Presentation only: tests check that it draws, and mutation
testing leaves it out (docs/development.md)."""

from __future__ import annotations

from typing import Any

from .._policies import STOCK_POLICY
from .records import Comparison, EndToEnd, Result, Summary
from .report import short


def draw(result: Result, path: str) -> str | None:
    """The figure: each side's agreement, the changed decisions' costs, the end-to-end
    ratios.  None (and the reason in the report) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no figure (pip install matplotlib)"
    fig, (agree, cost, e2e) = plt.subplots(1, 3, figsize=(14, 4.5), gridspec_kw={"width_ratios": [0.6, 1.2, 1]})
    _agreement(agree, result)
    _costs(cost, result["comparison"])
    _end_to_end(e2e, result.get("end_to_end"), result["policy"])
    fig.suptitle(f"cleanflush ab: stock ({STOCK_POLICY}) vs {result['policy']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def _agreement(ax: Any, result: Result) -> None:
    a = result["comparison"]["agreement"]
    sides = [(STOCK_POLICY, a[STOCK_POLICY]), (result["policy"], a["clean"])]
    ax.bar(range(2), [s["made_in_every_run"] for _, s in sides], color="#ddd", label="decisions")
    ax.bar(range(2), [s["agree"] for _, s in sides], color=["#c44", "#48c"], label="runs agree")
    ax.set_xticks(range(2), [name for name, _ in sides])
    ax.set_title(f"reproducible ({result['runs_compared']} runs a side)")
    ax.legend(fontsize=7)


def _costs(ax: Any, cmp: Comparison) -> None:
    changed = cmp["changed"]
    if changed:
        labels = [f"{short(d['op'].split('.')[-1], 32)}\n{short(d['key'], 32)}" for d in changed]
        # a changed decision has its cost and range (by price, or by the clean timing)
        costs = [(d["cost"] or 0.0, d["cost_low"] or 0.0, d["cost_high"] or 0.0) for d in changed]
        mid = [100 * cost for cost, _, _ in costs]
        low = [100 * (cost - lo) for cost, lo, _ in costs]
        high = [100 * (hi - cost) for cost, _, hi in costs]
        ax.barh(range(len(mid)), mid, xerr=[low, high], height=0.6, color="#c44")
        ax.set_yticks(range(len(mid)), labels, fontsize=6)
        ax.set_ylim(len(mid) - 0.5, -0.5 - max(0, 2 - len(mid)))
        ax.set_xlabel("stock pick slower, by the clean timing (%)")
    else:
        ax.text(0.5, 0.5, "the dirty flush changed no\ndecision beyond the noise", ha="center", va="center")
        ax.set_axis_off()
    ax.set_title(f"changed decisions: {len(changed)} of {len(cmp['decisions'])}")


def _end_to_end(ax: Any, timed: EndToEnd | None, policy: str) -> None:
    named: list[tuple[str, Summary]] = [(g["name"], g) for g in timed["graphs"]] if timed else []
    if timed and "total" in timed:
        named.append(("in total", timed["total"]))
    rows = [summary for _, summary in named]
    if not rows:
        ax.text(0.5, 0.5, "no compiled program\nto time end to end", ha="center", va="center")
        ax.set_axis_off()
        ax.set_title("end to end (q1-q3)")
        return
    mid = [100 * (g["ratio"]["median"] - 1) for g in rows]
    low = [100 * (g["ratio"]["median"] - g["ratio"]["q1"]) for g in rows]
    high = [100 * (g["ratio"]["q3"] - g["ratio"]["median"]) for g in rows]
    noise = max((v for g in rows for v in g["same_side"].values() if v is not None), default=None)
    if noise is not None:  # programs tuned under the same flush differ by this much
        ax.axvspan(-100 * noise, 100 * noise, color="#eee", label="same-flush spread")
        ax.legend(fontsize=7)
    ax.barh(range(len(rows)), mid, xerr=[low, high], height=0.6, color="#888")
    ax.set_yticks(range(len(rows)), [name for name, _ in named], fontsize=7)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.axvline(0, color="k", lw=1)
    ax.set_xlabel(f"stock-tuned program slower than {policy}-tuned (%)", fontsize=8)
    ax.set_title("end to end (q1-q3)")
