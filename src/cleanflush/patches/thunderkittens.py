"""ThunderKittens: ``common.benchmark_l2_clear`` of its parallel kernels (read at
HazyResearch/ThunderKittens b12a915, kernels/parallel/common.py): a local bf16 buffer of
128 MiB, ``random_(0, 100)`` before each timed call (CUDA events, or a host clock between
syncs).  While it runs, that buffer is handed out as a flushing tensor whose ``random_`` is
the flush (``_local_buffer``).

``common`` is a top-level module of the kernels' folder, and the benchmark scripts bind the
timer by name (``from common import benchmark_l2_clear``): it is wrapped as ``common``
finishes importing, before that line reads it.  A ``common`` module without that function
is left alone, with no row.
"""

from __future__ import annotations

from typing import Any

from .._registry import name_of
from ._local_buffer import ScriptTimer

FLUSH_ELEMENTS = 1024 * 1024 * 128 // 2  # its bf16 buffer: 128 MiB


def _is_flush_buffer(tensor: Any) -> bool:
    import torch

    return bool(tensor.dtype == torch.bfloat16 and tensor.dim() == 1 and tensor.numel() == FLUSH_ELEMENTS)


TARGET = ScriptTimer(
    name_of(__name__),
    "common",
    "benchmark_l2_clear",
    _is_flush_buffer,
    "random_",
    "its local flush buffer's random_ is the flush; checked against ThunderKittens b12a915's layout",
)
apply, revert = TARGET.apply, TARGET.revert
