"""GPU timing shared by ``cleanflush verify``, the GPU tests and the benchmarks: the one
timed loop, the kernel, and the clean references.

The references are plain torch code on buffers of their own: nothing here imports
``cleanflush._flush``, so a broken flush cannot move the yardstick it is judged by.
Imported only when measuring: it imports torch.
"""

from __future__ import annotations

import csv
import functools
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

MiB = 1 << 20
REFERENCE_READ_BYTES = 256 * MiB  # the reference read: at least this, and at least 2 x L2


def one_row_gemm(
    n: int = 4096, k: int = 4096, dtype: torch.dtype = torch.bfloat16, device: torch.device | str = "cuda"
) -> tuple[Callable[[], Any], torch.Tensor, torch.Tensor]:
    """The one-row GEMM: F.linear with one input row and an N x K weight."""
    weight = torch.randn(n, k, device=device, dtype=dtype)
    x = torch.randn(1, k, device=device, dtype=dtype)
    return (lambda: torch.nn.functional.linear(x, weight)), x, weight


def _cuda_device(device: torch.device | str) -> torch.device:
    """``device`` with its index: "cuda" means the current device."""
    device = torch.device(device)
    return torch.device("cuda", torch.cuda.current_device()) if device.index is None else device


def l2_bytes(device: torch.device | str = "cuda") -> int:
    return int(torch.cuda.get_device_properties(_cuda_device(device)).L2_cache_size)


def warm_up(fn: Callable[[], Any], seconds: float = 1.0) -> None:
    """Run ``fn`` for ``seconds`` so the SM clock leaves its idle state."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(50):
            fn()
        torch.cuda.synchronize()


def timed_loop(
    flush: Callable[[], Any], fn: Callable[[], Any], iters: int, between: Callable[[], Any] | None = None
) -> list[float]:
    """do_bench's inner loop: flush, (``between``), start event, call, end event; returns
    each call's time in us."""
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    torch.cuda.synchronize()
    for start, end in pairs:
        flush()
        if between is not None:
            between()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e3 for start, end in pairs]


@functools.cache
def _reference_buffer(device: torch.device) -> torch.Tensor:
    return torch.ones(max(2 * l2_bytes(device), REFERENCE_READ_BYTES) // 4, dtype=torch.float32, device=device)


def read_flush_reference(fn: Callable[[], Any], iters: int = 200, device: torch.device | str = "cuda") -> list[float]:
    """Reference: a plain float32 ``sum()`` of a buffer of its own (256 MiB, at least
    2 x L2; no write at all), then start event, call, end event.  Returns us per call."""
    buffer = _reference_buffer(_cuda_device(device))
    return timed_loop(buffer.sum, fn, iters)


def graph_per_call(calls: list[Callable[[], Any]], replays: int = 20) -> list[float]:
    """Time ``calls`` captured back to back in one CUDA graph: ms per call, one value per
    replay.  Warmed up once outside capture (cuBLAS workspaces, Triton compilation)."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / len(calls))
    return times


def rotating_copies(weight_bytes: int, device: torch.device | str = "cuda", min_bytes_factor: int = 5) -> int:
    """How many weight copies a rotating graph needs to read more than ``min_bytes_factor`` x L2."""
    return max(2, -(-min_bytes_factor * l2_bytes(device) // weight_bytes))


def rotating_weight_graph(
    n: int,
    k: int,
    dtype: torch.dtype = torch.bfloat16,
    device: torch.device | str = "cuda",
    min_bytes_factor: int = 5,
    replays: int = 20,
) -> list[float]:
    """Reference: a CUDA graph cycling through enough weight copies to exceed 5 x L2.

    Each call reads a cold weight and there are no launch gaps.  Returns ms per call, one
    value per replay.
    """
    device = _cuda_device(device)
    copies = rotating_copies(n * k * torch.empty((), dtype=dtype).element_size(), device, min_bytes_factor)
    weights = [torch.randn(n, k, device=device, dtype=dtype) for _ in range(copies)]
    x = torch.randn(1, k, device=device, dtype=dtype)
    return graph_per_call([functools.partial(torch.nn.functional.linear, x, w) for w in weights], replays)


def median(values: list[float]) -> float:
    return statistics.median(values)


NCU_METRIC = "dram__bytes_write.sum"
# bytes, and times in us; Nsight Compute versions spell the units either way
_UNITS = {
    "byte": 1.0,
    "Kbyte": 1e3,
    "Mbyte": 1e6,
    "Gbyte": 1e9,
    "B": 1.0,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "nsecond": 1e-3,
    "usecond": 1.0,
    "msecond": 1e3,
    "second": 1e6,
    "ns": 1e-3,
    "us": 1.0,
    "ms": 1e3,
    "s": 1e6,
    "sector": 1.0,
    "Ksector": 1e3,
    "Msector": 1e6,
    "Gsector": 1e9,
}


def ncu_metrics(
    program: list[str], metrics: tuple[str, ...] = (NCU_METRIC,), timeout: float = 600
) -> list[tuple[str, dict[str, float]]]:
    """Run ``python *program`` under Nsight Compute and return (kernel name, {metric: value})
    for every kernel launched inside an NVTX range named ``timed``, in launch order.  Byte
    metrics come back in bytes, time metrics in microseconds, sector counts as counts.

    The profiler leaves the cache and the clocks alone (``--cache-control none
    --clock-control none``) and replays the whole program per pass, so each kernel sees the
    L2 state the program left, as in a real benchmark.
    """
    options = "--cache-control none --clock-control none --replay-mode application --profile-from-start off"
    command = ["ncu", *options.split(), "--nvtx", "--nvtx-include", "timed/", "--csv", "--metrics", ",".join(metrics)]
    out = subprocess.run([*command, sys.executable, *program], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"ncu failed ({out.returncode}): {(out.stderr or out.stdout).strip()[-500:]}")
    return _ncu_rows(out.stdout, metrics)


def _ncu_rows(csv_text: str, metrics: tuple[str, ...]) -> list[tuple[str, dict[str, float]]]:
    """(kernel name, {metric: value}) per kernel of Nsight Compute's CSV, in launch order."""
    rows = [r for r in csv.reader(csv_text.splitlines()) if len(r) > 10]
    if not rows:
        raise RuntimeError("ncu reported no kernels")
    col = {name: i for i, name in enumerate(rows[0])}
    kernels: dict[str, tuple[str, dict[str, float]]] = {}  # launch id -> (name, metrics)
    for r in rows[1:]:
        if r[col["Metric Name"]] in metrics:
            unit = r[col["Metric Unit"]]
            if unit not in _UNITS:
                raise RuntimeError(f"ncu reported {r[col['Metric Name']]} in an unknown unit {unit!r}")
            value = float(r[col["Metric Value"]].replace(",", "")) * _UNITS[unit]
            name, values = kernels.setdefault(r[col["ID"]], (r[col["Kernel Name"]], {}))
            values[r[col["Metric Name"]]] = value
    return list(kernels.values())


def ncu_write_bytes(program: list[str], timeout: float = 600) -> list[tuple[str, float]]:
    """(kernel name, DRAM bytes written) for every kernel in an NVTX range ``timed``."""
    return [(name, values[NCU_METRIC]) for name, values in ncu_metrics(program, (NCU_METRIC,), timeout)]


def verify_program(n: int, k: int, dtype: str, device: int, calls: int, flushes: tuple[str, ...]) -> list[str]:
    """The arguments that run ``cleanflush._verify.ncu_program``: ``calls`` timed GEMMs after
    each flush in ``flushes``."""
    return ["-m", "cleanflush._verify.ncu_program", str(n), str(k), dtype, str(device), str(calls), *flushes]


def split_phases(kernels: list[tuple[str, float]], calls: int, phases: int) -> list[float]:
    """Bytes written per timed call in each of ``phases`` equal runs of ``kernels``."""
    per = len(kernels) // phases if phases else 0
    if per == 0 or len(kernels) % phases:
        raise RuntimeError(f"expected the same kernels in each of {phases} phases, got {len(kernels)}")
    return [sum(b for _, b in kernels[i * per : (i + 1) * per]) / calls for i in range(phases)]
