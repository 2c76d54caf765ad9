"""The numbers README.md and the docs quote, rendered from the current H200 records.

``python -m benchmarks quoted`` rewrites every block between ``<!-- quoted:NAME -->`` and
``<!-- /quoted -->`` in README.md and docs/*.md from benchmarks/results/h200 (no GPU
needed); ``--check`` only says which blocks differ (exit 1).  A test runs the check, so a
record that changes without its quotes fails CI.  Each block names the study it comes from.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import hosttime, synced
from .common import RESULTS, SHORT_BOUND, read_csv
from .pick import REPLAYS, replays, rounds_spread, rule, why

MiB = 1 << 20

ROOT = Path(__file__).resolve().parent.parent
H200 = RESULTS / "h200"
PAGES = (
    "README.md",
    "docs/policies.md",
    "docs/pick.md",
    "docs/limits.md",
    "docs/audit.md",
    "benchmarks/results/h200/README.md",
    "benchmarks/results/h100/README.md",
)
BLOCK = re.compile(r"(<!-- quoted:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /quoted -->)", re.S)
SHAPES = ("4096x4096", "6144x4096", "4096x14336", "28672x4096", "128256x4096")


def _record(study: str, folder: Path) -> dict[str, Any]:
    path = folder / f"{study}.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing: the quoted numbers come from it (python -m benchmarks {study}; the sdist leaves "
            "the study data out, a checkout has it)"
        )
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _date(record: dict[str, Any]) -> str:
    return str(record["machine"]["date"]).split()[0]


def headline(folder: Path) -> str:
    """README's table: do_bench of the five one-row GEMMs under each flush (budget study)."""
    budget = _record("budget", folder)
    summary = budget["summary"]
    rows = [
        ("stock flush (`zero_` of 256 MiB)", "stock"),
        ("cleanflush, `write-read` (the default)", "write-read"),
        ("cleanflush, `read`", "read"),
        ("a plain float32 `sum()` of 256 MiB instead (the reference)", "reference"),
    ]
    head = "| one-row BF16 GEMM on an H200, do_bench (us) | " + " | ".join(s.replace("x", " x ") for s in SHAPES) + " |"
    lines = [head, "|---" * (len(SHAPES) + 1) + "|"]
    for label, key in rows:
        lines.append(f"| {label} | " + " | ".join(f"{summary[s][key]['do_bench_us']:.2f}" for s in SHAPES) + " |")
    over = [summary[s]["stock"]["do_bench_us/ref"] - 1 for s in SHAPES]
    caption = (
        f"(`budget` study of {_date(budget)}, benchmarks/results/h200: each flush through Triton's "
        "`clear_cache`, interleaved in one process; stock over the reference "
        + ", ".join(f"{x:+.0%}" for x in over)
        + ".)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


def penalty(folder: Path) -> str:
    """The opening's claim: how much slower the stock flush makes the five GEMMs look."""
    summary = _record("budget", folder)["summary"]
    over = [summary[s]["stock"]["do_bench_us/ref"] - 1 for s in SHAPES]
    small = [round(100 * x) for s, x in zip(SHAPES, over, strict=True) if s != "128256x4096"]
    return _prose(
        f"Under `triton.testing.do_bench` on an H200, one-row BF16 GEMMs look {min(small)}-{max(small)}% "
        f"slower than they are (the 1 GB LM head {over[-1]:.0%}; the `budget` study), and because the "
        "penalty grows with the bytes a kernel reads, autotuners pick the wrong configs (the write-up "
        "that found the problem measured up to 40% on an A100)."
    )


def _prose(text: str, bullet: bool = False) -> str:
    """``text`` wrapped as the pages wrap it; ``bullet``: as a list item."""
    indents = {"initial_indent": "- ", "subsequent_indent": "  "} if bullet else {}
    return textwrap.fill(text, width=95, break_on_hyphens=False, break_long_words=False, **indents) + "\n"


def cost(folder: Path) -> str:
    """What a flush costs and what it leaves do_bench (cost and budget studies)."""
    prices = _record("cost", folder)["prices"]
    us = prices["us"]
    budget = _record("budget", folder)["summary"]
    kernel = [abs(budget[s]["write-read"]["kernel_us/ref"] - 1) for s in SHAPES]
    samples = [budget[s]["write-read"]["samples"] / budget[s]["stock"]["samples"] for s in SHAPES]
    floor = us["floor: write-read's bytes at the best plain read"]["us"]
    return _prose(
        f"On an H200 a flush of Triton's cache costs {us['write-read']['us']:.1f} us of GPU time under "
        f"`write-read` and {us['read']['us']:.1f} us under `read`, against {us['stock']['us']:.1f} us for the "
        f"stock write ({us['write-read']['over_stock']:.2f}x and {us['read']['over_stock']:.2f}x; a plain "
        f"`sum()` of 2 x L2 takes {us['plain read of 2 x L2']['us']:.1f} us, and write-read's bytes at the "
        f"best read bandwidth a plain kernel reaches here, {prices['best_plain_read_tb_per_s']:.2f} TB/s, "
        f"{floor:.1f} us). After `write-read` the GEMM's own kernel runs within {max(kernel):.1%} of its time "
        f"after a plain read at all five shapes, and do_bench takes {min(samples):.2f}-{max(samples):.2f}x "
        "stock's samples (benchmarks/results/h200, `cost` and `budget`)."
    )


def prices_table(folder: Path) -> str:
    """The cost study's price table: each flush's GPU time beside what bounds it."""
    record = _record("cost", folder)
    prices = record["prices"]
    lines = ["| flush | us per flush (GPU) | over stock | rounds' spread (us) |", "|---|---|---|---|"]
    for name, row in prices["us"].items():
        spread = f"{row['spread_us']:.2f}" if "spread_us" in row else ""
        lines.append(f"| {name} | {row['us']:.1f} | {row['over_stock']:.3f} | {spread} |")
    caption = (
        f"(`cost` study of {_date(record)}, {record['rounds']} rounds, medians; the best plain read "
        f"reached {prices['best_plain_read_tb_per_s']:.2f} TB/s.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


def readkernel_table(folder: Path) -> str:
    """The read kernel's fastest launches at 2 x L2, the product's, and the plain reads."""
    record = _record("readkernel", folder)
    rows = read_csv(folder / "readkernel.csv")
    sweeps = sorted((r for r in rows if r["table"] == "sweep"), key=lambda r: r["us"])
    launch = ("block", "warps", "programs_per_sm", "unroll")
    mine = next(r for r in sweeps if all(r[k] == record["product"][k] for k in launch))
    best = max(r["tb_per_s"] for r in rows if r["table"] == "reference")

    def row(label: str, r: dict[str, Any]) -> str:
        return f"| {label} | {r['us']:.2f} | {r['tb_per_s']:.2f} |"

    lines = ["| read | us | TB/s |", "|---|---|---|"]
    for r in sweeps[:3]:
        config = f"{r['block']:.0f}, {r['warps']:.0f} warps, {r['programs_per_sm']:.0f}/SM, unroll {r['unroll']:.0f}"
        lines.append(row(f"sweep of 2 x L2: {config}", r))
    lines.append(row("**sweep of 2 x L2, the product's launch**", mine))
    lines.append(row("sweep of 2 x L2, the slowest launch of the grid", sweeps[-1]))
    for r in rows:
        if r["table"] == "reference" and r["kernel"] == "torch.sum" and r["bytes"] in (2 * record["l2"], 2048 * MiB):
            lines.append(row(f"torch `sum()` of {r['bytes'] / MiB:.0f} MiB", r))
    caption = (
        f"(`readkernel` study of {_date(record)}, {len(sweeps)} launches (BLOCK, warps, programs per SM, "
        f"unroll), {record['rounds']} rounds; the product's launch reaches {mine['tb_per_s'] / best:.0%} of "
        f"the best plain read, {best:.2f} TB/s.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


def readsize_table(folder: Path) -> str:
    """What the read after the stock write should cover: the cost study's event loops."""
    record = _record("cost", folder)
    sizes = record["readsize"]
    shapes = list(dict.fromkeys(key.split(" | ")[0] for key in sizes))
    flushes = list(dict.fromkeys(key.split(" | ")[1] for key in sizes))
    lines = ["| flush | " + " | ".join(f"{s} (us) | p5" for s in shapes) + " |", "|---" * (1 + 2 * len(shapes)) + "|"]
    for flush in flushes:
        cells = [f"{sizes[f'{s} | {flush}']['us']:.2f} | {sizes[f'{s} | {flush}']['p5_us']:.2f}" for s in shapes]
        lines.append(f"| {flush} | " + " | ".join(cells) + " |")
    caption = (
        f"(`cost` study of {_date(record)}, event loop of plain tensor calls, median of {record['rounds']} rounds.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


def budget_table(folder: Path) -> str:
    """The budget study's table at every shape."""
    record = _record("budget", folder)
    lines = [
        "| shape | flush | cost (us) | samples | do_bench / ref | range | kernel / ref |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape in SHAPES:
        for i, (flush, row) in enumerate(record["summary"][shape].items()):
            lines.append(
                f"| {shape.replace('x', ' x ') if i == 0 else ''} | {flush} | {row['flush_us']:.1f} | "
                f"{row['samples']:.0f} | {row['do_bench_us/ref']:.3f} | {row['do_bench_range/ref']:.3f} | "
                f"{row['kernel_us/ref']:.3f} |"
            )
    ncu = ", ".join(f"{k} {v:.2f}" for k, v in record["ncu_write_mb"].items())
    caption = f"(`budget` study of {_date(record)}. Nsight Compute, MB the 28672 x 4096 GEMM writes after each: {ncu}.)"
    return "\n".join(lines) + "\n\n" + _prose(caption)


def pick_table(folder: Path) -> str:
    """The pick study: each rule's agreement, the stable picks' price and wall time, per job."""
    record = _record("pick", folder)
    lines = [
        "| job | runs a rule | decisions | alike in every run: fastest | stable | by price: fastest | stable | "
        "stable / fastest, job, by price | stable / fastest, end to end | wall time a run, stable / fastest | "
        "the rule's own timing, s a stable run | each timing again | "
        "a config's own time, round to round: median (p90) | rule |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, job in record["jobs"].items():
        a, total, walls = job["agreement"], job["total"], job["wall_s"]
        wall = _median(walls["stable"]) / _median(walls["fastest"])
        ratio = f"{total['ratio']:.4f}" if total["ratio"] is not None else "-"
        again = f"{_median(job['again_s']):.1f}" if job.get("again_s") else "-"  # entries before it was kept: -
        moved = rounds_spread(job["decisions"])
        rounds = f"{moved['median']:.2%} ({moved['p90']:.2%})" if moved["configs"] else "-"  # before rounds_ms: -
        lines.append(
            f"| {name} | {job.get('runs', record.get('runs'))} | {a['fastest']['made_in_every_run']} | "
            f"{a['fastest']['agree']} | {a['stable']['agree']} | "
            f"{a['fastest']['agree_by_price']} | {a['stable']['agree_by_price']} | {ratio} | "
            f"{_end_to_end_cell(job.get('end_to_end'))} | {wall:.3f} | {again} | "
            f"{_again_length(job.get('rule'))} | {rounds} | {_rule_version(job.get('rule'))} |"
        )
    spreads = [j["spread"]["over_fastest"] for j in record["jobs"].values() if j["spread"]["over_fastest"]["configs"]]
    spread = ", ".join(f"{s['median']:.1%} (p90 {s['p90']:.1%}, {s['configs']} configs)" for s in spreads)
    caption = (
        f"(`pick` study of {_date(record)}, benchmarks/results/{folder.name}/pick.json: `cleanflush ab --compare pick "
        f"--runs N` on each job, under write-read. Between fresh processes, a config within 5% of the "
        f"fastest moved against its run's fastest by a median of {spread} per job.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


def pick_replay_table(folder: Path) -> str:
    """Other pick rules replayed on the pick study's fastest runs' sweeps: agreement and cost."""
    record = _record("pick", folder)
    names = list(REPLAYS)
    lines = [
        "| job | decisions replayed | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
    ]
    checks = []
    for name, job in record["jobs"].items():
        found = replays(job["decisions"])
        if not found["decisions"]:
            continue  # an entry from before the sweeps were recorded
        cells = [f"{found[n]['alike']} (+{found[n]['cost_mean']:.1%}, max +{found[n]['cost_max']:.1%})" for n in names]
        lines.append(f"| {name} | {found['decisions']} | " + " | ".join(cells) + " |")
        checks.append(f"{found['fastest_as_recorded']} of {found['decisions']} in {name}")
    caption = (
        f"(`pick` study of {_date(record)}, benchmarks/results/{folder.name}/pick.json, replayed by "
        "`benchmarks.pick.replays` on the sweeps of each job's fastest runs: the decisions each rule would "
        "have picked alike in every run, and its picks' mean and largest cost over each decision's best "
        "config by the sweeps' mean ratio, the autotuners' own timings, not the independent price. "
        "Nothing is timed again in a replay. The recorded fastest picks are at their sweeps' fastest time "
        f"in every run in {', '.join(checks)} decisions; exact ties, which the autotuners break by other "
        "quantiles, the replay breaks by their order.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


def pick_moved(folder: Path) -> str:
    """Why each decision's stable picks moved between runs, per job, from the pick study's record."""
    record = _record("pick", folder)
    out = []
    for name, job in record["jobs"].items():
        moved = why(job["decisions"])
        if not moved:
            continue
        out.append(f"- **{name}**:")
        for d in job["decisions"]:
            lines, runs = moved.get((d["kind"], d["op"], d["key"])), d["stable_winners"]
            if lines:
                op = d["op"].rsplit(".", 1)[-1]
                out.append(f"  - `{op}` ({d['kind']}, {len(set(runs))} picks in {len(runs)} runs):")
                out.extend(f"    - {line}" for line in lines)
    return "\n".join(out) if out else "(no decision's stable picks moved in the current record)"


def _end_to_end_cell(timed: dict[str, Any] | None) -> str:
    """The programs tuned under each rule, timed together: stable over fastest, and whether that
    is beyond the spread among one rule's own programs."""
    total = (timed or {}).get("total")
    if not total:
        return "-"
    noise = max((v for v in total["same_side"].values() if v is not None), default=None)
    spread = f", same rule up to {noise:.1%}" if noise is not None else ""
    # the record's verdict is its first side (fastest) against its second (stable)
    verdict = {"slower": "stable faster", "faster": "stable slower"}.get(total["verdict"], total["verdict"])
    return f"{total['ms']['stable'] / total['ms']['fastest']:.4f} ({verdict}{spread})"


def _again_length(settings: Any) -> str:
    """How long the entry's stable runs timed each config again: ``full`` where as long as the
    autotuner's own timing (and in entries from before the length was an option)."""
    again = settings.get("again_ms") if isinstance(settings, dict) else None
    return f"{again:g} ms" if again is not None else "full"


def _rule_version(settings: Any) -> str:
    """Whether a pick study entry measured the stable rule as it is now, by its recorded settings."""
    now = {k: v for k, v in rule(None).items() if k not in ("floor", "again_ms")}  # options a run set: not another rule
    if isinstance(settings, dict) and all(settings.get(k) == v for k, v in now.items()):
        return "as documented"
    return "an earlier version"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


SYNCED_COLUMNS = (
    ("plain read", "plain read"),
    ("handshake", "write-read, handshake"),
    ("handshake, 120 us in a queued loop", f"write-read, {SHORT_BOUND}"),
    ("spin only", "write-read, spin only"),
    ("no hold", "write-read, no hold"),
    ("stock", "stock"),
)


SYNCED_ROWS = (
    (synced.SYNCED, "hidden us"),
    (synced.DO_BENCH, "hidden us"),
    (synced.DO_BENCH, "samples"),
    (synced.INDUCTOR_MIN, "hidden us"),
    (synced.INDUCTOR_MEDIAN, "hidden us"),
)


def synced_table(folder: Path) -> str:
    """The synced study: host time hidden in each loop under each hold, and do_bench's samples."""
    record = _record("synced", folder)
    summary = record["summary"]
    shapes = list(dict.fromkeys(name.split()[0] for name in summary))
    lines = [
        "| shape | loop | " + " | ".join(label for label, _ in SYNCED_COLUMNS) + " |",
        "|---" * (len(SYNCED_COLUMNS) + 2) + "|",
    ]
    for shape in shapes:
        for loop, what in SYNCED_ROWS:
            if not any(f"{shape} {loop}: {flush}" in summary for _, flush in SYNCED_COLUMNS):
                continue  # a loop this record did not run
            cells = []
            for _, flush in SYNCED_COLUMNS:
                row = summary.get(f"{shape} {loop}: {flush}")
                if row is None:
                    cells.append("-")
                elif what == "hidden us":
                    cells.append(str(row["hidden_us"]))
                else:
                    low, high = row["samples_at_0_range"]
                    cells.append(f"{row['samples_at_0']:.0f} [{low}-{high}]")
            first = shape.replace("x", " x ") if (loop, what) == SYNCED_ROWS[0] else ""
            lines.append(f"| {first} | {loop}: {what} | " + " | ".join(cells) + " |")
    bound = record.get("queued_hold_ns")
    loops = (
        "do_bench's and Inductor's queued loops"
        if any(f" {synced.INDUCTOR_MIN}: " in name for name in summary)
        else "do_bench's queued loop"
    )
    caption = (
        f"(`synced` study of {_date(record)}, {record['machine']['gpu']}, {record['rounds']} rounds; "
        f"the hold's bound {record['hold_ns'] // 1000} us"
        + (f", {bound // 1000} us in {loops}" if bound else ", before do_bench's longer bound")
        + f"; delays measured up to {max(int(d) for d in next(iter(summary.values()))['us_by_delay'])} us.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


def hosttime_table(folder: Path) -> str:
    """The hosttime study: host time per call under each flush, do_bench's samples, and where
    a write-read's time goes (its parts alone, and the flush in place)."""
    record = _record("hosttime", folder)
    summary = record["summary"]

    def us(row: str, key: str = "median_us") -> float:
        return float(summary[row][key])

    lines = [
        "| host time per call, us (median) | " + " | ".join(hosttime.FLUSHES) + " |",
        "|---" * (len(hosttime.FLUSHES) + 1) + "|",
        "| clear_cache alone | " + " | ".join(f"{us(f'clear_cache, {f}'):.1f}" for f in hosttime.FLUSHES) + " |",
        "| do_bench's loop body, GPU caught up (the reads hold) | "
        + " | ".join(f"{us(f'iteration, {f}, GPU caught up'):.1f}" for f in hosttime.FLUSHES)
        + " |",
        "| do_bench samples in 100 ms | "
        + " | ".join(str(record["do_bench_samples"][f]) for f in hosttime.FLUSHES)
        + " |",
        "| 100 ms / samples: the pace do_bench's estimate saw | "
        + " | ".join(f"{1e5 / record['do_bench_samples'][f]:.1f}" for f in hosttime.FLUSHES)
        + " |",
    ]
    parts = {row.removeprefix(hosttime.PART): us(row) for row in summary if row.startswith(hosttime.PART)}
    launches = parts[hosttime.WRITE_LAUNCH] + parts[hosttime.READ_LAUNCH]
    # the stream query is asked inside the hold decision, and the event record is do_bench's
    not_checks = (hosttime.WRITE_LAUNCH, hosttime.READ_LAUNCH, hosttime.STREAM_QUERY, hosttime.EVENT_RECORD)
    checks = {name: t for name, t in parts.items() if name not in not_checks}
    whole = us("clear_cache, write-read")
    notes = [
        f"write-read `clear_cache` {whole:.1f} us against stock's {us('clear_cache, stock'):.1f}; "
        f"its parts timed alone: the two launches {launches:.1f} us, the checks around them "
        f"{sum(checks.values()):.1f} ({', '.join(f'{n} {t:.1f}' for n, t in checks.items())}), "
        f"{whole - launches - sum(checks.values()):.1f} us in none of them."
    ]
    in_place = {row.removeprefix(hosttime.IN_PLACE): row for row in summary if row.startswith(hosttime.IN_PLACE)}
    if in_place:
        cells = [f"{name} {us(row):.1f} (p10 {us(row, 'p10_us'):.1f})" for name, row in in_place.items()]
        notes.append(f"`_flush.flush` in place, medians (p10): {'; '.join(cells)}.")
    profiles = record.get("do_bench_reads", {})  # records before it: none; a failed profile: its error
    reads = {f: found for f, found in profiles.items() if isinstance(found, dict) and found.get("loop_reads_us")}
    if reads:
        cells = [
            f"under {f}, its estimate's {', '.join(f'{r:.0f}' for r in found['estimate_reads_us'])} us and its "
            f"loop's a median of {found['loop_reads_us']['median_us']:.0f} (p90 {found['loop_reads_us']['p90_us']:.0f})"
            for f, found in reads.items()
        ]
        profiled = "One do_bench profiled by kineto (which slows each launch), its read kernels"
        notes.append(f"{profiled}: {'; '.join(cells)}.")
    caption = (
        f"(`hosttime` study of {_date(record)}, {record['machine']['gpu']}, a host with "
        f'"{record["cpu"]}"; medians of {record["batches"]} x {record["calls"]} calls, the 4096 x 4096 '
        "one-row GEMM as the timed call.)"
    )
    bullets = "".join(_prose(note, bullet=True) for note in notes)
    return "\n".join(lines) + "\n\n" + bullets + "\n" + _prose(caption)


def startup_table(folder: Path) -> str:
    """docs/limits.md's start-up table, from the CPU machine's record (whatever the page's GPU folder)."""
    record = _record("startup", RESULTS / "cpu")
    start, extra = record["start_ms"], record["start_extra_ms"]
    after, torch_ms = record["import_after_torch_ms"], record["import_torch_ms"]
    status = record["status_against_import_torch"]
    boot = {value: sum(us for name, us in record["importtime_us"][value]) / 1e3 for value in ("0", "1")}
    rows = [
        ("`python -c pass`, `CLEANFLUSH` unset", f"{start['unset']:.2f} ms", ""),
        ("the same with `CLEANFLUSH=0`",
         f"{extra['0']:+.2f} ms (the start-up hook, {boot['0']:.1f} ms in `-X importtime`)", "within 1 ms"),
        ("the same with `CLEANFLUSH=1`",
         f"{extra['1']:+.2f} ms (the start-up hook, {boot['1']:.1f} ms; neither cleanflush nor wrapt)", "within 1 ms"),
        ("`import cleanflush` after `import torch`, against `import wrapt` after `import torch`",
         f"{after['cleanflush']:.2f} ms against {after['wrapt']:.2f} ms: {record['cleanflush_over_wrapt_ms']:+.1f} ms",
         "at most +5 ms"),
        ("`python -c \"import torch\"`, `CLEANFLUSH=1` against unset",
         f"{torch_ms['1']:.0f} ms against {torch_ms['unset']:.0f} ms: {torch_ms['1'] - torch_ms['unset']:+.0f} ms", ""),
        ("`cleanflush status` against `python -c \"import torch\"`",
         f"{status['status_ms']['median']:.0f} ms against {status['import_torch_ms']['median']:.0f} ms: "
         f"{status['status_over_import_torch_ms']['median']:+.0f} ms (its imports alone: "
         f"{status['probe_imports_over_import_torch_ms']['median']:+.0f} ms)", "at most +1500 ms"),
    ]  # fmt: skip
    lines = ["| what | result | goal |", "|---|---|---|"] + [f"| {a} | {b} | {c} |" for a, b, c in rows]
    caption = (
        f"(`startup` study of {_date(record)}, benchmarks/results/cpu/startup.json: {record['cpus']} CPUs, wrapt "
        f"{record['wrapt']}, fresh interpreters interleaved pair by pair, {record['pairs']} pairs, medians, bytecode "
        "caches warm.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


def launch_table(folder: Path) -> str:
    """docs/limits.md's launch table: what cleanflush adds to a served autotuned call (CPU record)."""
    record = _record("launch", RESULTS / "cpu")
    base = record["ns_a_call"]["triton alone"]
    lines = ["| variant | ns a served call | added |", "|---|---|---|", f"| Triton alone | {base:.0f} | |"]
    lines += [
        f"| {name} | {record['ns_a_call'][name]:.0f} | {added:+.0f} ns ({added / base:+.0%}) |"
        for name, added in record["added_ns"].items()
    ]
    caption = (
        f"(`launch` study of {_date(record)}, benchmarks/results/cpu/launch.json: {record['cpus']} CPUs, triton "
        f"{record['triton']}, {record['processes']} fresh processes a variant interleaved, each the median of "
        f"{record['rounds']} rounds of {record['calls']} calls; added: the median over processes of a variant's "
        f"time less the baseline's beside it; successive baseline processes differ by "
        f"{record['baseline_noise_ns']:.0f} ns (median). The kernel's own launch, which a GPU adds to every row, "
        "is left out.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


H100 = RESULTS / "h100"  # the studies run on an H100 only (ranks, persist, audit), whatever the page's folder


def _audit_records() -> list[dict[str, Any]]:
    """The audit study's span records of gemlite's group-128 GEMV_REVSPLITK entries, in order."""
    paths = sorted(H100.glob("audit-gemlite-revsplitk-128*.json"), key=lambda p: int(re.findall(r"\d+", p.stem)[-2]))
    if not paths:
        raise FileNotFoundError(f"{H100}/audit-gemlite-revsplitk-128*.json is missing (python -m benchmarks audit)")
    return [json.loads(path.read_text()) for path in paths]


def _one_timer_slower(entry: dict[str, Any], min_effect: float) -> bool:
    """A right entry that one timer alone found slower (by the audit's own rule for one timer)."""
    from cleanflush._audit.judge import SLOWER, verdict

    if entry["class"] != "right" or "prices_us" not in entry:
        return False
    shipped, clean = entry["shipped"], entry["clean"]
    return any(
        verdict(prices[shipped]["us"], prices[clean]["us"], entry["noise"][timer], min_effect) == SLOWER
        for timer, prices in entry["prices_us"].items()
    )


def audit_summary(folder: Path) -> str:
    """docs/audit.md's and the H100 README's result: gemlite's group-128 GEMV_REVSPLITK entries audited."""
    records = _audit_records()
    entries = [e for r in records for e in r["audit"]["entries"]]
    count = {c: sum(e["class"] == c for e in entries) for c in ("wrong", "undecided", "right", "not auditable")}
    lone = sum(_one_timer_slower(e, r["audit"]["min_effect"]) for r in records for e in r["audit"]["entries"])
    wrong = [e for e in entries if e["class"] == "wrong"]
    steps = [(r["step"], len(r["audit"]["entries"])) for r in records if "corrected_over_shipped" in r["step"]]
    per_entry = [e["seconds"] for e in entries if e.get("seconds")]
    graph_noise = [e["noise"]["graph"] for e in entries if "noise" in e]
    cupti_noise = [e["noise"]["cupti"] for e in entries if "noise" in e]
    graph_rounds = [p["rounds"] for e in entries for p in e.get("prices_us", {}).get("graph", {}).values()]
    first_slowest = sum(rounds[0] == max(rounds) for rounds in graph_rounds)
    compile_s = statistics.median(s.get("compile", 0.0) for s in per_entry)
    total_s = statistics.median(sum(s.values()) for s in per_entry)
    lines = ["| entry (N x K) | CUPTI after a plain read | CUDA graph over copies | cost a call |", "|---|---|---|---|"]
    for e in wrong:
        n, k = re.findall(r"\d+", e["key"])[1:3]
        ratio = e["ratio"]
        lines.append(f"| {n} x {k} | {ratio['cupti'] - 1:+.1%} | {ratio['graph'] - 1:+.1%} | {e['cost_us']:.2f} us |")
    step = " ".join(
        f"The corrected table, loaded in gemlite over the shipped one, made a decoding step over the span's "
        f"{layers} layers (one CUDA graph, {len(s['corrected_us'])} rounds) {1 - s['corrected_over_shipped']:.1%} "
        f"faster ({statistics.median(s['shipped_us']):.1f} against {statistics.median(s['corrected_us']):.1f} us; "
        f"rounds {min(s['ratios']):.3f}-{max(s['ratios']):.3f})."
        for s, layers in steps
    )
    text = (
        f"Of the {len(entries)} group-128 GEMV_REVSPLITK entries of gemlite's shipped h100.json, audited on an "
        f"H100 with gemlite's `fast` search ({_date(records[0])}): {count['wrong']} wrong by both timers, "
        f"{count['undecided']} undecided, {count['right']} right ({lone} of them slower by one timer and within "
        f"the other's noise), {count['not auditable']} not auditable. The graph timer's noise had a median of "
        f"{statistics.median(graph_noise):.1%} (the CUPTI timer's {statistics.median(cupti_noise):.1%}); its first "
        f"round was its slowest in {first_slowest} of {len(graph_rounds)} prices. {step} An entry took "
        f"{total_s:.1f} s to audit (median; {compile_s:.1f} s of it compiling the configs), against a goal of 30 s."
    )
    return _prose(text) + "\n" + "\n".join(lines) + "\n"


def ranks_table(folder: Path) -> str:
    """The ranks study: agreement with the store off and on, prices, and the pick-file runs."""
    record = _record("ranks", H100)
    lines = [
        "| job (4 ranks, one H100) | alike, store off | alike, store on | agreed pick's price over the ranks' own "
        "| a rank's time, off / on | fresh runs with a pick file: alike, picks taken, wall |",
        "|---|---|---|---|---|---|",
    ]
    for job, data in record["jobs"].items():
        off, on, runs = data["sides"]["off"], data["sides"]["on"], data["runs"]
        ratios = [r["ratio"] for r in data["agreed_over_own"]]
        priced = "none priced"
        if ratios:
            priced = f"{min(ratios):.3f}-{max(ratios):.3f} (mean {statistics.fmean(ratios):.3f})"
        walls = "/".join(f"{w:.0f}" for w in runs["wall_s"])
        lines.append(
            f"| {job} | {off['agreement']['alike']} of {off['agreement']['decisions']} "
            f"| {on['agreement']['alike']} of {on['agreement']['decisions']} "
            f"| {priced} "
            f"| {statistics.median(off['rank_s'].values()):.1f} / {statistics.median(on['rank_s'].values()):.1f} s "
            f"| {runs['agreement']['alike']} of {runs['agreement']['decisions']}, "
            f"{'/'.join(map(str, runs['taken_from_file']))}, {walls} s |"
        )
    dates = ", ".join(
        f"{job} {data['date']}" + (f", its runs {data['runs']['date']}" if "date" in data["runs"] else "")
        for job, data in record["jobs"].items()
    )
    caption = (
        f"(`ranks` study, benchmarks/results/h100/ranks.json ({dates}): under `stable`, every rank tuning at once; "
        "the price is the CUPTI price after a plain read of each priced Triton decision, the agreed pick over "
        "the mean of the store-off ranks' picks; a rank's time is its median wall time in the job.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


KERNEL_SAYS = {"sum": "`sum` is torch's float32 sum of the weight", "gemv": "`gemv` is the one-row GEMV"}


def persist_table(folder: Path) -> str:
    """The persist study's rows: each kernel whose weight lies in a persisting window, after each flush."""
    record = _record("persist", H100)
    # a record from before the cases: the GEMV over half the set-aside alone
    cases = record.get("cases") or [{"kernel": "gemv", **record}]
    names = [f"{c['kernel']}, {c['weight_bytes'] / MiB:.1f} MiB" for c in cases]
    lines = ["| us, median of rounds | " + " | ".join(names) + " |", "|---" * (len(cases) + 1) + "|"]
    lines += [f"| {row} | " + " | ".join(f"{c['us'][row]:.1f}" for c in cases) + " |" for row in cases[0]["us"]]
    limits = sorted({c["limit_after_write_read"] for c in cases}), sorted({c["limit_without_the_reset"] for c in cases})
    caption = (
        f"(`persist` study of {_date(record)}, benchmarks/results/h100/persist.json: "
        + "; ".join(KERNEL_SAYS[k] for k in dict.fromkeys(c["kernel"] for c in cases))
        + f"; a window of {record['window'] / MiB:.1f} MiB; the set-aside "
        f"after write-read {', '.join(map(str, limits[0]))} bytes, after the control "
        f"{', '.join(map(str, limits[1]))} bytes; the check costs the host "
        f"{record['host']['check per flush, ns'] / 1e3:.2f} us a flush.)"
    )
    return "\n".join(lines) + "\n\n" + _prose(caption)


RENDER: dict[str, Callable[[Path], str]] = {
    "pick": pick_table,
    "pick-replay": pick_replay_table,
    "pick-moved": pick_moved,
    "headline": headline,
    "penalty": penalty,
    "cost": cost,
    "prices": prices_table,
    "readkernel": readkernel_table,
    "budget": budget_table,
    "readsize": readsize_table,
    "synced": synced_table,
    "hosttime": hosttime_table,
    "startup": startup_table,
    "launch": launch_table,
    "audit": audit_summary,
    "ranks": ranks_table,
    "persist": persist_table,
}


def folder_of(page: str) -> Path:
    """The records a page quotes: a results folder's README its own folder's, the rest H200's."""
    parts = Path(page).parts
    return ROOT / Path(*parts[:3]) if parts[:2] == ("benchmarks", "results") else H200


def render_page(text: str, folder: Path = H200) -> str:
    """``text`` with every quoted block rendered from the records in ``folder``."""

    def one(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in RENDER:
            raise KeyError(f"unknown quoted block {name!r}; known: {', '.join(RENDER)}")
        return match[1] + RENDER[name](folder) + match[4]

    return BLOCK.sub(one, text)


def main(check: bool = False, root: Path = ROOT) -> int:
    """Rewrite (or, with ``check``, compare) every page's quoted blocks; one line says what it found."""
    stale = []
    try:
        for page in PAGES:
            path = root / page
            text = _page(path)
            fresh = render_page(text, folder_of(page))
            if fresh != text:
                stale.append(page)
                if not check:
                    path.write_text(fresh)
    except FileNotFoundError as exc:  # a copy without the study data (the sdist): one line, not a traceback
        print(f"python -m benchmarks quoted: {exc}", file=sys.stderr)
        return 1
    if check and stale:
        print(f"quoted numbers differ from the records in: {', '.join(stale)} (python -m benchmarks quoted)")
        return 1
    if stale:
        print(f"rewrote the quoted numbers in: {', '.join(stale)}")
    else:
        print(f"quoted numbers agree with the records in all {len(PAGES)} pages")
    return 0


def _page(path: Path) -> str:
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing (the sdist leaves the study data out; a checkout has it)")
    return path.read_text()
