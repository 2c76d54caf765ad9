"""The figure of ``cleanflush ab --figure``: the stock/clean ratio of every choice, and the
cost of each changed decision.  Presentation only: tests check that it draws, and mutation
testing leaves it out (docs/development.md)."""

from __future__ import annotations

from typing import Any

from ._ab import STOCK, short


def draw(result: dict[str, Any], path: str) -> str | None:
    """The figure: the stock/clean ratio of every choice, and the cost of each changed
    decision.  None (and the reason in the report) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no figure (pip install matplotlib)"
    cmp = result["comparison"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [1, 1.2]})
    values = cmp["ratio_stock_over_clean"]["values"]
    left.hist(values or [1.0], bins=30, color="#888")
    left.axvline(1.0, color="k", lw=1)
    left.set_xlabel("stock / clean timing of each choice")
    left.set_ylabel("choices")
    left.set_title(f"{len(values)} choices in {len(cmp['decisions'])} decisions")
    changed = cmp["changed"]
    if changed:
        labels = [f"{d['op'].split('.')[-1]}\n{short(d['key'], 28)}" for d in changed]
        costs = [100 * (d["stock_winner_slower_by"] or 0) for d in changed]
        right.barh(range(len(costs)), costs, height=0.6, color="#c44")
        right.set_yticks(range(len(costs)), labels, fontsize=7)
        right.set_ylim(len(costs) - 0.5, -0.5 - max(0, 2 - len(costs)))
        right.set_xlabel("stock pick slower, by the clean timing (%)")
    else:
        right.text(0.5, 0.5, "the dirty flush did not\nchange any decision", ha="center", va="center")
        right.set_axis_off()
    right.set_title(f"changed decisions: {len(changed)}")
    fig.suptitle(f"cleanflush ab: stock ({STOCK}) vs {result['policy']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
