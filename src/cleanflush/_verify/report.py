"""What ``cleanflush verify`` prints: the machine, a table of timings, the verdict."""

from __future__ import annotations

from typing import Any

from .._stats import quartiles
from .controls import UNINSTALLED
from .verdict import PASS_SHARE, ControlsVerdict, Record, Verdict, expected, penalty_share


def _table(rows: list[tuple[str, ...]], left: int = 1) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        for r in rows
    ]


def _row(label: str, stat: str, values: list[float], base: float | None) -> tuple[str, ...]:
    q1, median, q3 = quartiles(values)
    rel = f"{median / base - 1:+.1%}" if base else ""
    return (label, stat, f"{median:.2f}", f"{q1:.2f}-{q3:.2f}", rel)


def header(record: Record) -> list[str]:
    m, s, k = record["machine"], record["software"], record["kernel"]
    clock = (
        f"SM {m['sm_clock_mhz_before'] or '?'} -> {m['sm_clock_mhz_after'] or '?'} MHz "
        f"after {m['warm_up_s']:.0f} s warm-up"
    )
    others = m["other_processes"]
    other = (
        "other processes: unknown (no NVML, no nvidia-smi)"
        if others is None
        else "no other processes on this GPU"
        if not others
        else f"WARNING: {len(others)} other process(es) on this GPU {others}: results are unreliable"
    )
    return [
        f"cleanflush verify: F.linear, 1 x {k['k']} @ {k['n']} x {k['k']} {k['dtype']}, cuda:{k['device']}, "
        f"{record['rounds']} rounds",
        "",
        f"machine   {m['gpu']} | L2 {m['l2_bytes'] / 2**20:.0f} MiB | driver {m['driver'] or '?'} | {clock}",
        f"          {other}",
        f"software  torch {s['torch']} | triton {s['triton']} | cleanflush {s['cleanflush']} | "
        f"policy {record['policy']}",
        "",
    ]


def timings(record: Record) -> list[str]:
    t = record["timings_us"]
    first = record["candidates"][0]
    ref = quartiles(t["reference"][first])[1]
    rows: list[tuple[str, ...]] = [("method", "stat", "median us", "q1-q3 us", "vs clean ref")]
    for name, values in t["do_bench"].items():
        label = "stock flush" if name == UNINSTALLED else name
        rows.append(
            _row(f"do_bench, {label}", "mean", values, quartiles(t["reference"].get(name, t["reference"][first]))[1])
        )
    for name, values in t.get("inductor", {}).items():
        label = "stock flush" if name == UNINSTALLED else name
        ref_min = quartiles(t["reference_min"][first if name == UNINSTALLED else name])[1]
        rows.append(_row(f"Inductor benchmark_gpu, {label}", "min", values, ref_min))
    rows.append(_row("reference: plain read loop", "mean", t["reference"][first], None))
    if t.get("inductor"):
        rows.append(_row("reference: plain read loop", "min", t["reference_min"][first], None))
    if t.get("rotating_graph"):
        rows.append(_row("reference: rotating-weight CUDA graph", "mean", t["rotating_graph"], ref))
    lines = _table(rows, left=2)
    lines.append("(do_bench: mean of the central 80% of its samples; Inductor: its own min; each flush's")
    lines.append(" reference is the plain read loop timed right after it, with no cleanflush code in it)")
    return lines


def flushes(record: Record) -> list[str]:
    lines = []
    for name, counts in record["flushes"].items():
        ran = ", ".join(f"{key} x {n}" for key, n in sorted(counts.items())) or "none"
        lines.append(f"flushes under {name}: {ran}")
    return lines


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:g} MiB"


def persisting_line(found: dict[str, Any] | None) -> str | None:
    """Whether part of L2 was set aside for persisting lines when verify started, and whether
    the flushes it timed reset it (None: a record from before verify read it)."""
    if found is None:
        return None
    if found["error"]:
        return f"persisting L2: {found['error']}"
    limit = found["limit_bytes"]
    if limit is None:
        return "persisting L2: this GPU sets none aside"
    allows = f"the {_mib(found['max_bytes'])} this GPU allows; read through {found['binding']}"
    if not limit:
        return f"persisting L2: none set aside at the start (limit 0 of {allows})"
    resets = found["resets"]
    done = (
        f"cleanflush's flushes set it to 0 ({resets} reset{'' if resets == 1 else 's'})"
        if resets
        else "NOT reset by the flushes timed here"
    )
    end = "" if found.get("end") is None else f"; it read {_mib(found['end'])} at the end"
    return f"persisting L2: {_mib(limit)} set aside at the start (of {allows}); {done}{end}"


def _persisting(record: Record) -> list[str]:
    line = persisting_line(record.get("persisting_l2"))
    return [] if line is None else [line]


def format_report(record: Record, verdict: Verdict) -> str:
    lines = header(record) + timings(record) + [""] + flushes(record) + _persisting(record)
    patched = [r for r in record["targets"] if r["patched"]]
    lines.append(f"targets: {len(patched)} of {len(record['targets'])} patched (`cleanflush status` for details)")
    ncu = record.get("ncu")
    if ncu:
        lines.append(
            "ncu: "
            + (
                f"could not run: {ncu['error']}"
                if "error" in ncu
                else "DRAM MB the timed GEMM writes: " + ", ".join(f"{name} {mb:.3f}" for name, mb in ncu.items())
            )
        )
    lines += ["", verdict["result"]]
    lines += [f"  - {reason}" for reason in verdict["reasons"]]
    return "\n".join(lines)


def format_controls(record: Record, verdicts: ControlsVerdict) -> str:
    """The controls run: every candidate, what it must be judged, what it was, by how much."""
    t = record["timings_us"]
    ncu = record.get("ncu") or {}
    rows: list[tuple[str, ...]] = [("flush", "must be", "judged", "ok", "penalty removed", "margin", "ncu MB")]
    for name, v in verdicts["candidates"].items():
        share = penalty_share(t["do_bench"][UNINSTALLED], t["do_bench"][name], t["reference"][name])["share"]
        margin = "" if v["margin"] is None else f"{v['margin']:+.2f}"
        mb = f"{ncu[name]:.3f}" if name in ncu else "-"
        ok = "yes" if v["result"] == expected(name) else "WRONG"
        rows.append((name, expected(name), v["result"], ok, f"{share:.0%}", margin, mb))
    lines = header(record) + timings(record) + [""] + flushes(record) + _persisting(record) + [""]
    lines += _table(rows, left=4)
    lines.append(
        f"(a clean flush must remove at least {PASS_SHARE:.0%} of the stock penalty; margin: share "
        f"removed minus {PASS_SHARE:.0%}, positive on the PASS side)"
    )
    if "error" in ncu:
        lines.append(f"ncu: could not run: {ncu['error']}")
    lines += [
        "",
        f"{verdicts['result']}: {len(verdicts['candidates']) - len(verdicts['wrong'])} of "
        f"{len(verdicts['candidates'])} flushes judged as they must be"
        + (f"; wrong: {', '.join(verdicts['wrong'])}" if verdicts["wrong"] else ""),
    ]
    for name, v in verdicts["candidates"].items():
        lines.append(f"{name}: {v['result']}")
        lines += [f"  - {reason}" for reason in v["reasons"]]
    return "\n".join(lines)


def _row_of(record: Record) -> tuple[str, ...]:
    """One table row: the GEMM, what the stock flush costs and what the candidate left."""
    k, t, v = record["kernel"], record["timings_us"], record["verdict"]
    name = record["candidates"][0]
    shares = penalty_share(t["do_bench"][UNINSTALLED], t["do_bench"][name], t["reference"][name])
    shape = f"cuda:{k['device']}  {k['n']} x {k['k']} {k['dtype']}"
    penalty = f"{shares['penalty_us']:+.2f} ({shares['penalty_us'] / shares['reference_us']:+.1%})"
    if "candidates" in v:  # a controls run: how many flushes were judged as they must be
        right = len(v["candidates"]) - len(v["wrong"])
        return (
            shape,
            penalty,
            f"{shares['noise_us']:.2f}",
            "-",
            f"{right} of {len(v['candidates'])} right",
            v["result"],
        )
    return (shape, penalty, f"{shares['noise_us']:.2f}", f"{shares['share']:.0%}", name, v["result"])


def format_summary(records: list[Record], result: str) -> str:
    """Several GEMMs or devices: one row each, the overall verdict, and the reasons of every
    row that did not pass."""
    rows: list[tuple[str, ...]] = [("GEMM", "stock penalty us", "noise us", "removed", "flush", "verdict")]
    rows += [_row_of(record) for record in records]
    title = f"cleanflush verify: F.linear with one input row, {len(records)} GEMMs, {records[0]['rounds']} rounds each"
    lines = [title, ""] + header(records[0])[2:] + _table(rows, left=1) + [""]
    lines.append(
        "(the penalty: stock do_bench over the plain read loop timed right after the flush, median of the "
        f"rounds; a PASS removes {PASS_SHARE:.0%} of it, less the noise; do_bench and Inductor, the "
        "flush counts and Nsight Compute are judged for every row)"
    )
    for record in records:
        v, k = record["verdict"], record["kernel"]
        if v["result"] != "PASS":
            lines.append(f"{k['n']} x {k['k']} {k['dtype']} on cuda:{k['device']}: {v['result']}")
            reasons = v["reasons"] if "reasons" in v else [r for c in v["candidates"].values() for r in c["reasons"]]
            lines += [f"  - {reason}" for reason in reasons]
    lines += ["", result]
    return "\n".join(lines)
