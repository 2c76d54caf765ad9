"""SOL-ExecBench: ``sol_execbench.core.bench.timing._clear_cache(cache)``, ``cache.zero_()`` on
an int8 buffer of 2 x L2 (read at NVIDIA/SOL-ExecBench 2f55c0f).  Both its CUPTI timer
(the default) and its CUDA-event timer call it as a module global before each iteration;
evaluations run in ``subprocess`` children, which the autoload reaches.
"""

from __future__ import annotations

from typing import Any

from .._registry import name_of
from ._function import ModuleFunction


def _where(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, int]:
    cache: Any = args[0] if args else kwargs.get("cache")
    if len(args) + len(kwargs) != 1 or not hasattr(cache, "device"):
        raise TypeError("not _clear_cache(cache) with a tensor")
    return cache.device, cache.numel() * cache.element_size()


TARGET = ModuleFunction(
    name_of(__name__),
    "sol_execbench.core.bench.timing",
    "_clear_cache",
    _where,
    "checked against SOL-ExecBench 2f55c0f's layout",
)
apply, revert = TARGET.apply, TARGET.revert
