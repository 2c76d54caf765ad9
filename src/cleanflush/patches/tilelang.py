"""TileLang: ``do_bench`` and its autotuner time through three helpers that receive the
flush buffer as their ``cache`` argument and ``cache.zero_()`` it before each timed call
(CUDA events, CUPTI inside a ``tilelang::cache_flush`` range whose device time is
subtracted, CUDA-graph replays).  Each helper gets the buffer as a flushing tensor.

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
from .._state import STATE, TargetStatus, mark_uninstalled, not_loaded_row, record, warn_once

NAME = PACKAGE = "tilelang"
# The modules whose benchmark calls the helpers as its globals.  Not where 0.1.15 defines
# them (torch_bench): bench copies them at import, so a wrapper there would be copied too
# and could not be taken back off bench on uninstall.
HOOKS = ("tilelang.profiler.bench", "tilelang.profiler._torch_gpu")
HELPERS = tuple(f"_bench_with_{kind}" for kind in ("cuda_events", "cupti", "cudagraph"))

_patches = _patching.PatchSet()


def _helper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    try:
        call = inspect.signature(wrapped).bind(*args, **kwargs)
    except (TypeError, ValueError):  # a call the signature rejects: the stock code's own error
        return wrapped(*args, **kwargs)
    try:
        call.arguments["cache"] = _flush.flushing_tensor(call.arguments["cache"], NAME)
    except Exception as exc:  # no cache argument, or not a tensor: say so, run it stock
        why = f"{wrapped.__name__} got no cache tensor ({type(exc).__name__}: {exc}); its stock flush ran"
        warn_once(f"tilelang:{wrapped.__name__}", f"tilelang: {why}")
        return wrapped(*args, **kwargs)
    return wrapped(*call.args, **call.kwargs)


def _version() -> str | None:
    from . import installed_version

    return installed_version(PACKAGE)


def apply() -> None:
    loaded = False
    for module_name in HOOKS:
        module = sys.modules.get(module_name)
        loaded |= module is not None
        names = [name for name in HELPERS if callable(vars(module).get(name))] if module is not None else []
        for name in names:
            _patches.wrap(module, name, _helper)
        if names:
            record(TargetStatus(f"{module_name}._bench_with_*", NAME, _version(), True,
                                f"the cache tensor its {', '.join(names)} zero is the flush"))
    if loaded and not list(_patches):
        record(TargetStatus("tilelang.profiler", NAME, _version(), False, "unsupported: none of "
                            f"{', '.join(HOOKS)} has a timing helper that takes the cache; stock flush kept"))


def revert() -> None:
    _patches.revert()
    mark_uninstalled(PACKAGE)


def status() -> list[TargetStatus]:
    rows = [row for row in STATE.targets.values() if row.package == PACKAGE]
    return rows or [not_loaded_row("tilelang.profiler", PACKAGE, _version())]
