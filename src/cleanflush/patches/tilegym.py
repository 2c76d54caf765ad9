"""TileGym: ``bench_utils.profile_with_l2flush`` (read at NVIDIA/TileGym 28ab0a2,
tests/benchmark/bench_utils.py), a kernel-only timer: a local float32 buffer of exactly L2,
``zero_()`` and a sync before each profiled call.  While it runs, that buffer is handed out
as a flushing tensor (``_local_buffer``).

``bench_utils`` is a top-level module of the benchmark folder, and the benchmarks bind the
timer by name (``from bench_utils import profile_with_l2flush``): it is wrapped as
``bench_utils`` finishes importing, before that line reads it.  A ``bench_utils`` module
without that function is left alone, with no row.
"""

from __future__ import annotations

from typing import Any

from .. import _read
from .._registry import name_of
from ._local_buffer import ScriptTimer


def _is_flush_buffer(tensor: Any) -> bool:
    import torch

    if tensor.dtype != torch.float32 or tensor.dim() != 1:
        return False
    return bool(tensor.numel() == _read.l2_bytes(tensor.device) // 4 > 0)


TARGET = ScriptTimer(
    name_of(__name__),
    "bench_utils",
    "profile_with_l2flush",
    _is_flush_buffer,
    "zero_",
    "its local flush buffer zeroes through the flush; checked against TileGym 28ab0a2's layout",
)
apply, revert = TARGET.apply, TARGET.revert
