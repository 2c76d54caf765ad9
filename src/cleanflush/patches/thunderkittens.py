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

import sys
from typing import Any

from .. import _patching
from .._registry import name_of
from .._state import Site
from . import _local_buffer

NAME = name_of(__name__)
MODULE = "common"
TIMER = "benchmark_l2_clear"
FLUSH_ELEMENTS = 1024 * 1024 * 128 // 2  # its bf16 buffer: 128 MiB
CHECKED = "checked against ThunderKittens b12a915's layout"


def _is_flush_buffer(tensor: Any) -> bool:
    import torch

    return bool(tensor.dtype == torch.bfloat16 and tensor.dim() == 1 and tensor.numel() == FLUSH_ELEMENTS)


def _timer(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _local_buffer.run(
        lambda: wrapped(*args, **kwargs), _is_flush_buffer, NAME, f"{MODULE}.{TIMER}", write="random_"
    )


def apply() -> list[Site]:
    module = sys.modules.get(MODULE)
    if module is None or not callable(vars(module).get(TIMER)):
        return []
    _patching.patch_set(NAME).wrap(module, TIMER, _timer)
    return [Site(f"{MODULE}.{TIMER}", "patched", f"its local flush buffer's random_ is the flush; {CHECKED}")]


def revert() -> None:
    _patching.patch_set(NAME).revert()
