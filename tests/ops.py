"""Record the tensor operations a flush runs, on real CPU tensors."""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

# The ops that touch memory; views, shape queries and the like are not interesting here.
_KEEP = {"zero_", "sum", "fill_", "copy_", "to", "zeros", "empty", "neg", "random_"}


class OpRecorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name in _KEEP:
            self.ops.append((name, args, kwargs))
        return func(*args, **kwargs)

    @property
    def names(self) -> list[str]:
        return [name for name, _, _ in self.ops]


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1 = a0 + a.numel() * a.element_size()
    b1 = b0 + b.numel() * b.element_size()
    return a0 < b1 and b0 < a1


class SmallCudaWrites(TorchFunctionMode):
    """Stand-in for the GPU of a harness that writes ``torch.empty(..., device="cuda")``
    inline (the 8 GB ``bench_kineto`` write): a small CPU tensor of the same dtype."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__name__", "") == "empty" and kwargs.get("device") == "cuda":
            return func(1024, dtype=kwargs["dtype"])
        return func(*args, **kwargs)
