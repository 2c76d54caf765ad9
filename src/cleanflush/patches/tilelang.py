"""TileLang: ``do_bench`` and its autotuner time through three helpers that receive the
flush buffer as their ``cache`` argument and ``cache.zero_()`` it before each timed call
(CUDA events, CUPTI inside a ``tilelang::cache_flush`` range whose device time is
subtracted, CUDA-graph replays).  Each helper gets the buffer as a flushing tensor; the
CUPTI helper's flushes write-read as one kernel, so the range it subtracts holds no gap
between two kernels (it would be taken off the kernel's time).

The helpers are module globals looked up at call time, found by feature in one of two
modules: ``tilelang.profiler.bench._bench_with_*`` (tile-ai/tilelang a35008a; in the 0.1.15
wheel imported there from ``torch_bench`` under those names), and
``tilelang.profiler._torch_gpu._bench_with_*`` (tilelang 1ae8122).
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from .. import _flush, _patching
from .._registry import name_of
from .._state import Site
from . import _tensor

NAME = name_of(__name__)
# The modules whose benchmark calls the helpers as its globals.  Not where 0.1.15 defines
# them (torch_bench): bench copies them at import, so a wrapper there would be copied too
# and could not be taken back off bench on uninstall.
MODULES = ("tilelang.profiler.bench", "tilelang.profiler._torch_gpu")
HELPERS = tuple(f"_bench_with_{kind}" for kind in ("cuda_events", "cupti", "cudagraph"))


def _helper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        call = inspect.signature(wrapped).bind(*args, **kwargs)
    except (TypeError, ValueError):  # a call the signature rejects: the stock code's own error
        return wrapped(*args, **kwargs)
    cache = call.arguments.get("cache")
    if not _is_tensor(cache) or cache is None:  # no cache argument, or not a tensor: say so, run it stock
        why = f"{wrapped.__name__} got no cache tensor (got {type(cache).__name__})"
        return _flush.fall_back(NAME, why, lambda: wrapped(*args, **kwargs), counted=False)
    one_kernel = wrapped.__name__.endswith("cupti")
    # the read buffer and the one-kernel write-read made now, before the helper's profiler starts
    _flush.prepare(cache.device, one_kernel=one_kernel)
    call.arguments["cache"] = _tensor.flushing_tensor(cache, NAME, one_kernel=one_kernel)
    return wrapped(*call.args, **call.kwargs)


def _is_tensor(value: Any) -> bool:
    import torch

    return isinstance(value, torch.Tensor)


def apply() -> list[Site]:
    patches = _patching.patch_set(NAME)
    found, loaded = [], False
    for module_name in MODULES:
        module = sys.modules.get(module_name)
        loaded |= module is not None
        names = [name for name in HELPERS if callable(vars(module).get(name))] if module is not None else []
        for name in names:
            patches.wrap(module, name, _helper)
        if names:
            found.append(
                Site(
                    f"{module_name}._bench_with_*",
                    "patched",
                    f"the cache tensor its {', '.join(names)} zero is the flush",
                )
            )
    if loaded and not list(patches):
        found.append(
            Site(
                "tilelang.profiler",
                "unsupported",
                f"none of {', '.join(MODULES)} has a timing helper that takes the cache; stock flush kept",
            )
        )
    return found


def revert() -> None:
    _patching.patch_set(NAME).revert()
