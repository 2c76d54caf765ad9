"""The measurements behind a verdict, on the GPU: imported only when verify runs."""

from __future__ import annotations

import shutil
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cleanflush

from .. import _stats
from .controls import CONTROLS, STOCK, flushing
from .probe import GpuProbe
from .verdict import new_record

DTYPES = ("bfloat16", "float16", "float32")
REFERENCE_ITERS = 500
# Named sets of weight shapes (N, K), for `--preset`.
PRESETS = {
    # the one-row decode GEMMs of Llama 3.1 8B: q/o, qkv (fused, GQA), down, gate+up, LM head
    "llama-3.1-8b": ((4096, 4096), (6144, 4096), (4096, 14336), (28672, 4096), (128256, 4096)),
}


class CannotRun(Exception):
    """An expected condition under which verify cannot measure here (exit 3)."""


@dataclass
class Options:
    n: int = 4096
    k: int = 4096
    dtype: str = "bfloat16"
    device: int = 0
    rounds: int = 5
    ncu: bool = False
    controls: bool = False
    json_path: str | None = None


def candidates(options: Options) -> list[str]:
    """What verify times do_bench under, beside the stock flush."""
    if options.controls:
        return list(cleanflush.POLICIES[:2]) + list(CONTROLS)  # write-read, read, then the controls
    return [cleanflush.current_policy()]


def devices(wanted: str) -> list[int]:
    """The CUDA device indices ``wanted`` names: comma-separated indices (each checked when it
    is measured), or "all" of this machine's."""
    if wanted != "all":
        return [int(part) for part in wanted.split(",")]
    try:
        import torch
    except ImportError:
        raise CannotRun("torch is not installed") from None
    if not torch.cuda.is_available():
        raise CannotRun("no CUDA device: torch.cuda.is_available() is False")
    return list(range(torch.cuda.device_count()))


def _load(options: Options) -> tuple[Any, Any]:
    try:
        import torch
    except ImportError:
        raise CannotRun("torch is not installed") from None
    if not torch.cuda.is_available():
        raise CannotRun("no CUDA device: torch.cuda.is_available() is False")
    if not 0 <= options.device < torch.cuda.device_count():
        raise CannotRun(f"no CUDA device {options.device}: this machine has {torch.cuda.device_count()}")
    try:
        import triton
        import triton.testing
    except ImportError:
        raise CannotRun("triton is not installed") from None
    return torch, triton


def _counted(run: Callable[[], float], into: dict[str, int]) -> float:
    """``run()``, adding the flushes it made to ``into`` ("target | policy" -> n)."""
    before = cleanflush.flush_counts()
    value = run()
    for (target, policy), n in cleanflush.flush_counts().items():
        if n > before.get((target, policy), 0):
            key = f"{target} | {policy}"
            into[key] = into.get(key, 0) + n - before.get((target, policy), 0)
    return value


def measure(options: Options, progress: Callable[[str], None]) -> dict[str, Any]:
    """Run every measurement on the GPU; return the record ``verdict`` reads."""
    torch, triton = _load(options)
    from .. import _measure

    torch.cuda.set_device(options.device)
    device = torch.device("cuda", options.device)
    props = torch.cuda.get_device_properties(device)
    probe = GpuProbe(options.device, str(getattr(props, "uuid", "") or "") or None)
    dtype = getattr(torch, options.dtype)
    names = candidates(options)

    progress("checking the machine")
    others = probe.other_processes()
    clock_before = probe.sm_clock_mhz()
    fn, _, _ = _measure.one_row_gemm(options.n, options.k, dtype, device)
    _measure.warm_up(fn, 1.0)
    clock_after = probe.sm_clock_mhz()

    inductor = None
    if not options.controls:  # the controls break the do_bench path; Inductor is judged in plain runs
        try:
            from torch._inductor.runtime import benchmarking

            inductor = benchmarking.InductorBenchmarker() if hasattr(benchmarking, "InductorBenchmarker") else None
        except Exception as exc:  # an Inductor that does not import here: judged on do_bench alone, said
            progress(f"Inductor not measured: {exc!r}")

    record = new_record(
        kernel={
            "op": "F.linear, one input row",
            "n": options.n,
            "k": options.k,
            "dtype": options.dtype,
            "device": options.device,
        },
        machine={
            "gpu": props.name,
            "l2_bytes": int(props.L2_cache_size),
            "driver": probe.driver(),
            "sm_clock_mhz_before": clock_before,
            "sm_clock_mhz_after": clock_after,
            "warm_up_s": 1.0,
            "other_processes": others,
            "probe": probe.source,
        },
        software={
            "torch": torch.__version__,
            "triton": triton.__version__,
            "cleanflush": cleanflush.__version__,
            "python": sys.version.split()[0],
        },
        policy=cleanflush.current_policy(),
        installed=cleanflush.is_installed(),
        targets=[row.as_dict() for row in cleanflush.status()],
        rounds=options.rounds,
        candidates=names,
    )
    t = record["timings_us"]
    flushes: dict[str, dict[str, int]] = {name: {} for name in [STOCK, *names]}

    def do_bench() -> float:
        return _stats.central_mean(triton.testing.do_bench(fn, return_mode="all")) * 1e3

    for r in range(options.rounds):
        progress(f"round {r + 1}/{options.rounds}")
        with flushing(STOCK):
            t["do_bench"].setdefault(STOCK, []).append(_counted(do_bench, flushes[STOCK]))
        for name in names:
            with flushing(name):
                t["do_bench"].setdefault(name, []).append(_counted(do_bench, flushes[name]))
            # right after the candidate: the verdict compares the two round by round
            reference = _measure.read_flush_reference(fn, REFERENCE_ITERS, device)
            t["reference"].setdefault(name, []).append(_stats.central_mean(reference))
            t["reference_min"].setdefault(name, []).append(min(reference))
            if inductor is not None:
                with flushing(STOCK):
                    t["inductor"].setdefault(STOCK, []).append(
                        _counted(lambda: inductor.benchmark_gpu(fn) * 1e3, flushes[STOCK])
                    )
                with flushing(name):
                    t["inductor"].setdefault(name, []).append(
                        _counted(lambda: inductor.benchmark_gpu(fn) * 1e3, flushes[name])
                    )
        t["rotating_graph"].append(
            1e3 * statistics.median(_measure.rotating_weight_graph(options.n, options.k, dtype, device, replays=10))
        )
    record["flushes"] = flushes

    if options.ncu:
        progress("Nsight Compute: DRAM bytes the timed GEMM writes after each flush")
        record["ncu"] = _ncu(options, [STOCK, *names])
    return record


def _ncu(options: Options, names: list[str]) -> dict[str, Any]:
    from .. import _measure

    if shutil.which("ncu") is None:
        return {"error": "Nsight Compute (ncu) is not on PATH"}
    calls = 3
    try:
        kernels = _measure.ncu_write_bytes(
            _measure.verify_program(options.n, options.k, options.dtype, options.device, calls, tuple(names))
        )
        per_call = _measure.split_phases(kernels, calls, len(names))
    except Exception as exc:  # ncu's own failure is a finding the verdict reports, not a crash
        return {"error": str(exc)}
    return {name: value / 1e6 for name, value in zip(names, per_call)}
