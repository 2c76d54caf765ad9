"""The measurements behind a verdict, on the GPU: imported only when verify runs."""

from __future__ import annotations

import shutil
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import cleanflush

from .. import _persist, _policies, _stats
from .controls import CONTROLS, UNINSTALLED, flushing
from .probe import GpuProbe
from .verdict import Record, Timings, new_record

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
        return [p.name for p in _policies.BY_NAME.values() if p.reads] + list(
            CONTROLS
        )  # the clean ones, then the controls
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


def measure(options: Options, progress: Callable[[str], None]) -> Record:
    """Run every measurement on the GPU; return the record ``verdict`` reads."""
    torch, triton = _load(options)
    from .. import _measure

    torch.cuda.set_device(options.device)
    device = torch.device("cuda", options.device)
    names = candidates(options)
    progress("checking the machine")
    probe = GpuProbe(options.device, str(getattr(torch.cuda.get_device_properties(device), "uuid", "") or "") or None)
    others, clock_before = probe.other_processes(), probe.sm_clock_mhz()
    fn, _, _ = _measure.one_row_gemm(options.n, options.k, getattr(torch, options.dtype), device)
    _measure.warm_up(fn, 1.0)
    machine = {
        "other_processes": others,
        "sm_clock_mhz_before": clock_before,
        "sm_clock_mhz_after": probe.sm_clock_mhz(),
    }
    record = _new_record(options, names, device, probe, machine)
    start = record["persisting_l2"] = _persist.reading(device)  # before any flush of ours could reset it
    inductor = None if options.controls else _inductor(progress)  # the controls break only the do_bench path
    record["flushes"] = _timed_rounds(options, names, fn, inductor, record["timings_us"], progress)
    end = _persist.reading(device)
    start.update(resets=end["resets"] - start["resets"], end=end["limit_bytes"])
    if options.ncu:
        progress("Nsight Compute: DRAM bytes the timed GEMM writes after each flush")
        record["ncu"] = _ncu(options, [UNINSTALLED, *names])
    return record


def _inductor(progress: Callable[[str], None]) -> Any:
    """Inductor's benchmarker, or None where this torch has none or it does not import (said)."""
    try:
        from torch._inductor.runtime import benchmarking

        return benchmarking.InductorBenchmarker() if hasattr(benchmarking, "InductorBenchmarker") else None
    except Exception as exc:  # an Inductor that does not import here: judged on do_bench alone, said
        progress(f"Inductor not measured: {exc!r}")
        return None


def _new_record(options: Options, names: list[str], device: Any, probe: GpuProbe, machine: dict[str, Any]) -> Record:
    """The record's header: the kernel, the machine, the software, what cleanflush does here."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(device)
    return new_record(
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
            "sm_clock_mhz_before": machine["sm_clock_mhz_before"],
            "sm_clock_mhz_after": machine["sm_clock_mhz_after"],
            "warm_up_s": 1.0,
            "other_processes": machine["other_processes"],
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


def _timed_rounds(
    options: Options,
    names: list[str],
    fn: Callable[[], Any],
    inductor: Any,
    t: Timings,
    progress: Callable[[str], None],
) -> dict[str, dict[str, int]]:
    """Fill the timings ``t`` round by round, interleaved; return the flushes each candidate made."""
    import torch
    import triton.testing

    from .. import _measure

    device, dtype = torch.device("cuda", options.device), getattr(torch, options.dtype)
    flushes: dict[str, dict[str, int]] = {name: {} for name in [UNINSTALLED, *names]}

    def do_bench() -> float:
        return _stats.central_mean(triton.testing.do_bench(fn, return_mode="all")) * 1e3

    def timed(kind: Literal["do_bench", "inductor"], name: str, run: Callable[[], float]) -> None:
        with flushing(name):
            t[kind].setdefault(name, []).append(_counted(run, flushes[name]))

    for r in range(options.rounds):
        progress(f"round {r + 1}/{options.rounds}")
        timed("do_bench", UNINSTALLED, do_bench)
        for name in names:
            timed("do_bench", name, do_bench)
            # right after the candidate: the verdict compares the two round by round
            reference = _measure.read_flush_reference(fn, REFERENCE_ITERS, device)
            t["reference"].setdefault(name, []).append(_stats.central_mean(reference))
            t["reference_min"].setdefault(name, []).append(min(reference))
            if inductor is not None:
                timed("inductor", UNINSTALLED, lambda: inductor.benchmark_gpu(fn) * 1e3)
                timed("inductor", name, lambda: inductor.benchmark_gpu(fn) * 1e3)
        graph = _measure.rotating_weight_graph(options.n, options.k, dtype, device, replays=10)
        t["rotating_graph"].append(1e3 * statistics.median(graph))
    return flushes


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
