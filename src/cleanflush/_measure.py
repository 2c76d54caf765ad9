"""Timing references shared by ``cleanflush verify`` and the GPU tests.

Imported only when measuring: it imports torch.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

from . import _flush

MiB = 1 << 20


def one_row_gemm(n: int = 4096, k: int = 4096, dtype: torch.dtype = torch.bfloat16,
                 device: torch.device | str = "cuda") -> tuple[Callable[[], Any], torch.Tensor, torch.Tensor]:
    """The write-up's kernel: F.linear with one input row and an N x K weight."""
    weight = torch.randn(n, k, device=device, dtype=dtype)
    x = torch.randn(1, k, device=device, dtype=dtype)
    return (lambda: torch.nn.functional.linear(x, weight)), x, weight


def warm_up(fn: Callable[[], Any], seconds: float = 1.0) -> None:
    """Run ``fn`` for ``seconds`` so the SM clock leaves its idle state."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        for _ in range(50):
            fn()
        torch.cuda.synchronize()


def read_flush_event_loop(fn: Callable[[], Any], iters: int = 200, device: torch.device | str = "cuda") -> list[float]:
    """Reference: a clean read flush (no write at all), then start event, call, end event.

    The read covers 256 MiB and at least 2 x L2, so the GPU is busy while the host queues
    the timed call.  Returns milliseconds per call.
    """
    device = torch.device(device)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
    for start, end in pairs:
        _flush.read(device)
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in pairs]


def rotating_weight_graph(n: int, k: int, dtype: torch.dtype = torch.bfloat16, device: str = "cuda",
                          min_bytes_factor: int = 5, replays: int = 20) -> list[float]:
    """Reference: a CUDA graph cycling through enough weight copies to exceed 5 x L2.

    Each call reads a cold weight and there are no launch gaps.  Returns ms per call, one
    value per replay.
    """
    l2 = _flush.l2_bytes(torch.device(device, torch.cuda.current_device()))
    copy_bytes = n * k * torch.empty((), dtype=dtype).element_size()
    copies = max(2, -(-min_bytes_factor * l2 // copy_bytes))
    weights = [torch.randn(n, k, device=device, dtype=dtype) for _ in range(copies)]
    x = torch.randn(1, k, device=device, dtype=dtype)
    for w in weights:  # warm-up outside capture (cuBLAS workspace, handles)
        torch.nn.functional.linear(x, w)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for w in weights:
            torch.nn.functional.linear(x, w)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / copies)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values)


def iqr(values: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]
