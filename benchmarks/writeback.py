"""The write-back a timed GEMM pays, against the size of the zero_ flush before it.

For X in 0..256 MiB: clean L2 (a 256 MiB read), zero_ X MiB, then the timed one-row GEMM
inside an NVTX range.  Nsight Compute (``--cache-control none --clock-control none``,
application replay) reads the GEMM's DRAM write bytes and duration.  A second range times a
2 x L2 float32 read after the same zero_: what it writes back is how many dirty lines L2
held, so its plateau is the dirty capacity of this L2.  The two cleanflush flushes close
the table (zero_ 256 MiB + read 2 x L2, and the 256 MiB read alone).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .common import Results, progress

SIZES_MIB = [0, 2, 4, 8, 12, 16, 20, 24, 28, 32, 40, 48, 64, 96, 128, 192, 256]
REPS = 3
METRICS = ("dram__bytes_write.sum", "dram__bytes_read.sum", "gpu__time_duration.sum")

# Runs under ncu.  Prints nothing; the kernel order inside "timed" ranges is the protocol:
# for each case, REPS GEMMs (cuBLAS, one or two kernels each) and then REPS probe reads.
SCRIPT = """
import torch
from cleanflush import _measure, _read
from benchmarks.common import read_alone
MiB = 1 << 20
dev = torch.device("cuda", 0)
fn, _, _ = _measure.one_row_gemm({n}, {k})
zbuf = torch.empty(256 * MiB // 4, dtype=torch.int32, device=dev)
_read.prepare(dev)
l2 = _read.l2_bytes(dev)
probe = torch.zeros(2 * l2 // 4, dtype=torch.float32, device=dev)
sink = torch.zeros((), device=dev)
def clean():
    read_alone(dev, 256 * MiB)  # clean reads: L2 holds no dirty line afterwards
def run(flush, timed):
    clean(); flush(); torch.cuda.nvtx.range_push("timed"); timed(); torch.cuda.nvtx.range_pop()
cases = [(lambda x=x: zbuf[: x * MiB // 4].zero_()) for x in {sizes}]
cases.append(lambda: (zbuf.zero_(), read_alone(dev, _read.read_bytes(l2, zbuf.numel() * 4))))  # write-read
cases.append(lambda: read_alone(dev, _read.read_bytes(l2, 0)))                                 # read
_measure.warm_up(fn, 1.0)
torch.cuda.profiler.start()
for flush in cases:
    for _ in range({reps}):
        run(flush, fn)
    for _ in range({reps}):
        run(flush, lambda: torch.sum(probe, dim=0, out=sink))
torch.cuda.synchronize()
torch.cuda.profiler.stop()
"""


def _is_probe(kernel: str) -> bool:
    # torch's reduce_kernel; ncu prints short names, and cuBLAS has a splitKreduce_kernel
    return "reduce_kernel" in kernel and "splitK" not in kernel


def split_cases(
    kernels: list[tuple[str, dict[str, float]]], labels: list[str], sizes: list[int], reps: int
) -> list[tuple[str, int, list[dict[str, float]], list[dict[str, float]]]]:
    """Cut ncu's launch-ordered kernels into (label, size, GEMM kernels, probe kernels) per
    case: GEMM kernels (cuBLAS, one or two per call) until the first probe, then ``reps``
    probes.  Raises when the sequence is not what the script launches."""
    cases = []
    i = 0
    for label, x in zip(labels, sizes):
        gemm: list[dict[str, float]] = []
        while i < len(kernels) and not _is_probe(kernels[i][0]):
            gemm.append(kernels[i][1])
            i += 1
        probes = [v for name, v in kernels[i : i + reps] if _is_probe(name)]
        i += reps
        if not gemm or len(gemm) % reps or len(probes) != reps:
            raise RuntimeError(
                f"unexpected kernel sequence at {label!r}: {len(gemm)} GEMM kernels, {len(probes)} probes"
            )
        cases.append((label, x, gemm, probes))
    if i != len(kernels):
        raise RuntimeError(f"{len(kernels) - i} kernels left over")
    return cases


def run(out: Path, shapes: list[tuple[int, int]] | None = None) -> Path:
    """The write-back study for the first of ``shapes`` (default: 4096 x 4096)."""
    from cleanflush import _measure

    n, k = (shapes or [(4096, 4096)])[0]
    labels = [f"zero_ {x} MiB" for x in SIZES_MIB] + [
        "zero_ 256 MiB + cleanflush read (write-read)",
        "cleanflush read 256 MiB (read)",
    ]
    progress(f"writeback: {len(labels)} flushes x {REPS} GEMMs under Nsight Compute (about a minute)")
    script = SCRIPT.format(n=n, k=k, sizes=SIZES_MIB, reps=REPS)
    kernels = _measure.ncu_metrics(["-c", script], METRICS)
    results = Results(out, "writeback")
    for label, x, gemm, probes in split_cases(kernels, labels, SIZES_MIB + [256, 0], REPS):
        per_call = len(gemm) // REPS
        calls = [gemm[c * per_call : (c + 1) * per_call] for c in range(REPS)]

        def total(call: list[dict[str, float]], metric: str) -> float:
            return sum(kv[metric] for kv in call)

        results.add(
            flush=label,
            zero_mib=x,
            gemm_write_mb=statistics.median(total(c, METRICS[0]) for c in calls) / 1e6,
            gemm_read_mb=statistics.median(total(c, METRICS[1]) for c in calls) / 1e6,
            gemm_us=statistics.median(total(c, METRICS[2]) for c in calls),
            probe_writeback_mb=statistics.median(p[METRICS[0]] for p in probes) / 1e6,
            probe_us=statistics.median(p[METRICS[2]] for p in probes),
            gemm_kernels_per_call=per_call,
        )
    rows = results.rows
    sweep = [r for r in rows if r["flush"].startswith("zero_") and r["flush"].endswith(" MiB")]
    plateau = [r["probe_writeback_mb"] for r in sweep if r["zero_mib"] >= 64]
    summary: dict[str, Any] = {
        "shape": [n, k],
        "reps": REPS,
        "metrics": METRICS,
        "ncu": "--cache-control none --clock-control none --replay-mode application",
        "dirty_capacity_mb": statistics.median(plateau),
        "gemm_write_plateau_mb": statistics.median(r["gemm_write_mb"] for r in sweep if r["zero_mib"] >= 64),
    }
    progress(
        f"writeback: dirty capacity {summary['dirty_capacity_mb']:.1f} MB, "
        f"GEMM write-back plateau {summary['gemm_write_plateau_mb']:.1f} MB"
    )
    for r in rows:
        progress(
            f"  {r['flush']:46s} GEMM writes {r['gemm_write_mb']:7.3f} MB in {r['gemm_us']:6.2f} us; "
            f"probe writes back {r['probe_writeback_mb']:6.2f} MB"
        )
    return results.write(**summary)
