"""Figures from the result files (CSV + JSON); needs matplotlib, not a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .common import progress, read_csv


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _title(meta: dict[str, Any], text: str) -> str:
    m = meta["machine"]
    return (
        f"{text}\n{m.get('gpu', '?')}, driver {m.get('driver', '?')}, torch {m['torch']}, "
        f"triton {m['triton']}, {m['date']}"
    )


def _grouped_bars(ax: Any, series: dict[str, list[float]], errors: dict[str, list[list[float]]] | None = None) -> None:
    """One bar per category and series, the series side by side within each category."""
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series.items()):
        ax.bar(
            [j + (i - len(series) / 2 + 0.5) * width for j in range(len(values))],
            values,
            width,
            yerr=errors[label] if errors else None,
            capsize=2 if errors else 0,
            label=label,
        )


def writeback(directory: Path) -> Path:
    plt = _pyplot()
    rows = read_csv(directory / "writeback.csv")
    meta = json.loads((directory / "writeback.json").read_text())
    sweep = [r for r in rows if str(r["flush"]).endswith(" MiB") and str(r["flush"]).startswith("zero_")]
    ours = [r for r in rows if r not in sweep]
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    xs = [r["zero_mib"] for r in sweep]
    a.plot(xs, [r["gemm_write_mb"] for r in sweep], "o-", label="timed GEMM: DRAM bytes written")
    a.plot(xs, [r["probe_writeback_mb"] for r in sweep], "s--", label="2 x L2 read after the zero_: written back")
    for r, style in zip(ours, (":", "-.")):
        a.axhline(r["gemm_write_mb"], color="green", linestyle=style, label=f"GEMM after {r['flush']}")
    a.set_xlabel("zero_ flush size (MiB)")
    a.set_ylabel("MB")
    a.legend(fontsize=7)
    a.set_title("write-back", fontsize=9)
    b.plot(xs, [r["gemm_us"] for r in sweep], "o-", label="timed GEMM after zero_ X MiB")
    for r, style in zip(ours, (":", "-.")):
        b.axhline(r["gemm_us"], color="green", linestyle=style, label=f"after {r['flush']}")
    b.set_xlabel("zero_ flush size (MiB)")
    b.set_ylabel("GEMM duration in ncu (us)")
    b.legend(fontsize=7)
    b.set_title("duration", fontsize=9)
    fig.suptitle(
        _title(
            meta,
            f"One-row BF16 GEMM {meta['shape'][0]}x{meta['shape'][1]} after a zero_ flush "
            f"(dirty capacity {meta['dirty_capacity_mb']:.1f} MB)",
        ),
        fontsize=9,
    )
    return _save(fig, directory / "writeback.png")


def methods(directory: Path) -> Path:
    plt = _pyplot()
    meta = json.loads((directory / "methods.json").read_text())
    summary = meta["summary"]
    shapes = list(summary)
    names = meta["methods"]
    fig, ax = plt.subplots(figsize=(12, 4.8))
    ref = [summary[s]["rotating-weight graph"]["median"] for s in shapes]
    _grouped_bars(
        ax,
        {m: [summary[s][m]["median"] / r for s, r in zip(shapes, ref)] for m in names},
        {
            m: [
                [(summary[s][m]["median"] - summary[s][m]["p25"]) / r for s, r in zip(shapes, ref)],
                [(summary[s][m]["p75"] - summary[s][m]["median"]) / r for s, r in zip(shapes, ref)],
            ]
            for m in names
        },
    )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(
        range(len(shapes)), [f"{s}\n(graph {summary[s]['rotating-weight graph']['median']:.1f} us)" for s in shapes]
    )
    ax.set_ylabel("time / rotating-weight graph (median, IQR bars)")
    ax.set_ylim(0.6, None)
    ax.legend(fontsize=7, ncol=3)
    fig.suptitle(_title(meta, f"Timing methods, {meta['processes']} processes x {meta['rounds']} rounds"), fontsize=9)
    return _save(fig, directory / "methods.png")


def cost(directory: Path) -> Path:
    plt = _pyplot()
    rows = read_csv(directory / "cost.csv")
    meta = json.loads((directory / "cost.json").read_text())
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    flushes = list(dict.fromkeys(r["flush"] for r in rows))
    fig, axes = plt.subplots(1, 4, figsize=(15, 4))
    for ax, field, label in zip(
        axes[:3],
        ("flush_us", "samples", "wall_ms"),
        ("flush GPU time (us)", "samples per do_bench call", "do_bench wall time (ms)"),
    ):
        _grouped_bars(ax, {shape: [meta["summary"][f"{shape} {f}"][field] for f in flushes] for shape in shapes})
        ax.set_xticks(range(len(flushes)), flushes, fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.legend(fontsize=7)
    ax = axes[3]
    shape = shapes[0]
    for i, f in enumerate(flushes):
        mine = [r for r in rows if r["shape"] == shape and r["flush"] == f]
        ax.plot([i - 0.1] * len(mine), [r["do_bench_us"] for r in mine], "o", alpha=0.6, color=f"C{i}")
        ax.plot([i + 0.1] * len(mine), [r["event_loop_us"] for r in mine], "x", alpha=0.6, color=f"C{i}")
    ax.set_xticks(range(len(flushes)), flushes, fontsize=8)
    ax.set_title(f"{shape}: each do_bench call (o), event loop (x), us", fontsize=9)
    fig.suptitle(_title(meta, f"What each flush costs ({meta['rounds']} rounds)"), fontsize=9)
    return _save(fig, directory / "cost.png")


def latency(directory: Path) -> Path:
    plt = _pyplot()
    meta = json.loads((directory / "latency.json").read_text())
    summary = meta["summary"]
    kernels = list(dict.fromkeys(key.split(" | ")[0] for key in summary))
    flushes = list(dict.fromkeys(key.split(" | ")[1] for key in summary))
    fig, ax = plt.subplots(figsize=(11, 4.2))
    _grouped_bars(ax, {kernel: [summary[f"{kernel} | {f}"]["leak_us"] for f in flushes] for kernel in kernels})
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(
        range(len(flushes)),
        [f"{f}\n({summary[f'{kernels[0]} | {f}']['flush_us']:.0f} us)" for f in flushes],
        fontsize=8,
    )
    ax.set_ylabel("timed - timed with GPU held busy (us)")
    ax.legend(fontsize=8)
    fig.suptitle(
        _title(meta, "Launch latency that leaks into the timed region, per flush (flush GPU time)"), fontsize=9
    )
    return _save(fig, directory / "latency.png")


def autotune(directory: Path) -> Path:
    plt = _pyplot()
    rows = read_csv(directory / "autotune.csv")
    meta = json.loads((directory / "autotune.json").read_text())
    layers = list(dict.fromkeys(r["layer"] for r in rows))
    truth_name = meta["timers"][-1]
    fig, axes = plt.subplots(1, len(layers), figsize=(6 * len(layers), 5), squeeze=False)
    for ax, layer in zip(axes[0], layers):
        med: dict[tuple[str, str], list[float]] = {}
        for r in rows:
            if r["layer"] == layer:
                med.setdefault((r["timer"], r["candidate"]), []).append(r["us"])
        t = {key: sorted(v)[len(v) // 2] for key, v in med.items()}
        candidates = [c for (timer, c) in t if timer == truth_name]
        for i, timer in enumerate(meta["timers"][:-1]):
            s = meta["summary"][layer]["timers"][timer]
            ax.scatter(
                [t[(truth_name, c)] for c in candidates if c != "cuBLAS BF16"],
                [t[(timer, c)] for c in candidates if c != "cuBLAS BF16"],
                s=12,
                color=f"C{i}",
                label=f"{timer}: tau {s['kendall']:.2f}, {s['beat_cublas']} beat cuBLAS",
            )
            ax.scatter(
                [t[(truth_name, "cuBLAS BF16")]],
                [t[(timer, "cuBLAS BF16")]],
                marker="*",
                s=150,
                color=f"C{i}",
                edgecolor="black",
            )
        lo, hi = min(t.values()) * 0.95, max(t.values()) * 1.05
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.7)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xlabel("ground truth: rotating-weight graph (us, log)")
        ax.set_ylabel("timer (us, log)")
        ax.set_title(
            f"{layer}: INT8 configs (dots), cuBLAS BF16 (stars); truth winner {meta['summary'][layer]['truth_winner']}",
            fontsize=8,
        )
        ax.legend(fontsize=7)
    fig.suptitle(_title(meta, "Autotuning an INT8 GEMV against cuBLAS under each timer"), fontsize=9)
    return _save(fig, directory / "autotune.png")


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    progress(f"wrote {path}")
    return path


FIGURES = {"writeback": writeback, "methods": methods, "cost": cost, "latency": latency, "autotune": autotune}


def plot_all(directory: Path) -> list[Path]:
    """Every figure whose result files exist in ``directory``."""
    return [figure(directory) for name, figure in FIGURES.items() if (directory / f"{name}.json").exists()]
