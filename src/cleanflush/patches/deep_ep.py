"""DeepEP: ``deep_ep.utils.testing.flush_l2_cache(enabled=True)``, a 256e6-byte int32
``zero_()`` on the current CUDA device (read at deepseek-ai/DeepEP 855fa9d and dd758ca; the
latter's file ran patched on the H200).  ``bench`` and
``bench_kineto`` look it up as a module global before each timed call.
"""

from __future__ import annotations

from typing import Any

from .._registry import name_of
from . import current_cuda_device
from ._function import ModuleFunction

FLUSH_BYTES = int(256e6) // 4 * 4  # its int32 buffer of 256e6 bytes


def _where(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, int] | None:
    import torch

    enabled = args[0] if args else kwargs.get("enabled", True)
    if not enabled:
        return None  # the harness asked for no flush
    return current_cuda_device() or torch.device("cpu"), FLUSH_BYTES


TARGET = ModuleFunction(
    name_of(__name__), "deep_ep.utils.testing", "flush_l2_cache", _where, "checked against DeepEP 855fa9d's layout"
)
apply, revert = TARGET.apply, TARGET.revert
