"""Triton: the driver's ``clear_cache``, which every Triton benchmark flushes through.

* triton 3.3+: ``do_bench``, the autotuner, ``do_bench_proton`` and
  ``do_bench_cudagraph_proton`` (3.8+) call ``driver.active.clear_cache(cache)``; we wrap
  ``clear_cache`` on each driver class, so the stock write runs and our read follows.
* ``get_empty_cache_for_benchmark`` is wrapped too: it allocates the read buffer before
  anything captures the flush into a CUDA graph, and returns the cache tensor as a subclass
  whose ``zero_`` runs the flush.  triton 3.2's ``do_bench`` zeroes that tensor inline, and
  so do harnesses that take ``cache.zero_`` instead of ``clear_cache`` (tritonbench's
  CUDA-graph, profiler and GPU-event timers, Helion's pretuned benchmarks).  ``clear_cache``
  hands the stock code the plain tensor, so a flush through it runs once.
* triton 3.0-3.1: the driver has neither method; ``do_bench`` allocates its 256 MB buffer
  and zeroes it inline.  While ``do_bench`` runs, that allocation hands out a flushing
  tensor (``_local_buffer``).  Their autotuner calls its own copy of the name
  (``from ..testing import do_bench`` in triton/runtime/autotuner.py, 3.0.0 and 3.1.0), which
  is wrapped too.

``do_bench`` itself is wrapped as well, from 3.2 on only for the hold's bound: its loop
queues every call and synchronizes once, so a read there may hold longer (``_hold.queued_loop``).

On triton 3.0-3.3 the active driver class (``triton.backends.backends[name].driver``)
is a separate copy of the importable ``CudaDriver``, so both are patched.  Detection is
by feature: which of the two methods a class defines, not the version string.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from .. import _flush, _hold, _patching
from .._registry import name_of
from .._state import Site, State, TargetStatus, sites
from . import _local_buffer, _tensor

NAME = name_of(__name__)
DO_BENCH = "triton.testing.do_bench"
AUTOTUNER = "triton.runtime.autotuner"  # binds do_bench by name on 3.0-3.1
_IMPORTABLE = (
    ("triton.backends.nvidia.driver", "CudaDriver"),
    ("triton.backends.amd.driver", "HIPDriver"),
)


def driver_classes() -> list[tuple[str, type]]:
    """(label, class) for every driver class loaded now: the registry's and the importable."""
    found: list[tuple[str, type]] = []
    backends = getattr(sys.modules.get("triton.backends"), "backends", None) or {}
    for name, backend in backends.items():
        found.append((f"triton.backends.backends[{name!r}].driver", backend.driver))
    for module, name in _IMPORTABLE:
        cls = getattr(sys.modules.get(module), name, None)
        if cls is not None:
            found.append((f"{module}.{name}", cls))
    unique: dict[int, tuple[str, type]] = {}
    for label, cls in found:
        # The importable name reads better when both are the same class (3.4+).
        if id(cls) not in unique or not label.startswith("triton.backends.backends"):
            unique[id(cls)] = (label, cls)
    return list(unique.values())


def _clear_cache(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if len(args) + len(kwargs) != 1 or (kwargs and "cache" not in kwargs):
        # not the clear_cache(cache) we know: the stock code with the caller's arguments
        why = f"clear_cache was called as (args={len(args)}, kwargs={sorted(kwargs)}), not clear_cache(cache)"
        return _flush.fall_back(NAME, why, lambda: wrapped(*args, **kwargs))
    cache = args[0] if args else kwargs["cache"]
    # the whole stock write on the plain tensor behind ours, whose zero_ would flush a second
    # time; where cleanflush owns the write, the stock clear_cache on a head of the cache (it
    # zeroes what it is given)
    return _flush.flush(NAME, write=lambda: wrapped(_tensor.plain_tensor(cache)), cache=cache, write_part=wrapped)


def _get_empty_cache(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    cache = wrapped(*args, **kwargs)
    device = getattr(cache, "device", None)
    if device is None:  # not a tensor: nothing to hand out, and clear_cache says so when it flushes it
        return cache
    _flush.prepare(device)  # before any CUDA-graph capture of the flush; a read that cannot run says so then
    # for every caller that zeroes it directly: triton 3.2's do_bench, tritonbench, Helion
    return _tensor.flushing_tensor(cache, NAME)


def patch_class(label: str, cls: type) -> Site:
    """Patch one driver class according to the methods it has; return its status."""
    patches = _patching.patch_set(NAME)
    target = f"{label}.clear_cache"
    clear_owner = _patching.defining_class(cls, "clear_cache")
    empty_owner = _patching.defining_class(cls, "get_empty_cache_for_benchmark")
    if clear_owner is not None and empty_owner is not None:
        patches.wrap(clear_owner, "clear_cache", _clear_cache)
        patches.wrap(empty_owner, "get_empty_cache_for_benchmark", _get_empty_cache)
        detail = (
            "do_bench, autotuner and Proton helpers flush through it; harnesses that zero "
            "its cache tensor directly (tritonbench, Helion) flush through that tensor"
        )
        return Site(target, "patched", detail)
    if empty_owner is not None:
        patches.wrap(empty_owner, "get_empty_cache_for_benchmark", _get_empty_cache)
        return Site(
            f"{label}.get_empty_cache_for_benchmark",
            "patched",
            "triton 3.2 layout: do_bench's inline zero_() runs the flush",
        )
    return Site(
        target,
        "unsupported",
        "this driver has neither clear_cache nor get_empty_cache_for_benchmark "
        "(triton < 3.2 flushes inline in do_bench); stock flush kept",
    )


def apply() -> list[Site]:
    if "triton.backends" not in sys.modules and sys.modules.get("triton") is not None:
        return [Site(DO_BENCH, "unsupported", "this triton has no driver backends (before 3.0); stock flush kept")]
    found = [patch_class(label, cls) for label, cls in driver_classes()]
    if any(site.state == "patched" for site in found):
        return found + _wrap_queued_loop()
    if "triton.backends" not in sys.modules:
        return found
    # triton 3.0-3.1: the driver has no flush; do_bench zeroes a buffer of its own
    testing = sys.modules.get("triton.testing")
    if testing is None:
        return [Site(DO_BENCH, "pending", "triton 3.0-3.1 layout: patched when triton.testing is imported")]
    if _has_inline_flush(vars(testing).get("do_bench")):
        patches = _patching.patch_set(NAME)
        patch = patches.wrap(testing, "do_bench", _do_bench)
        autotuner = sys.modules.get(AUTOTUNER)
        if autotuner is not None:
            patches.wrap_alias(autotuner, "do_bench", patch, _do_bench)
        return [
            Site(
                DO_BENCH,
                "patched",
                "triton 3.0-3.1 layout: the 256 MB buffer it allocates zeroes through the flush "
                "(the autotuner's copy of do_bench too)",
            )
        ]
    return [
        Site(
            DO_BENCH,
            "unsupported",
            "neither the driver nor triton.testing.do_bench has a flush cleanflush knows; stock flush kept",
        )
    ]


def _wrap_queued_loop() -> list[Site]:
    """triton 3.2+: ``do_bench`` runs as a queued loop (the driver flushes); a copy bound by
    name before install keeps the shorter hold."""
    testing = sys.modules.get("triton.testing")
    if testing is None or not callable(vars(testing).get("do_bench")):
        return []  # wrapped when triton.testing is imported
    _patching.patch_set(NAME).wrap(testing, "do_bench", _queued_do_bench)
    return [
        Site(
            DO_BENCH,
            "patched",
            f"flushes through the driver; {_hold.queued_note()}",
        )
    ]


def _queued_do_bench(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    with _hold.queued_loop():
        return wrapped(*args, **kwargs)


def _has_inline_flush(do_bench: Any) -> bool:
    """triton 3.0-3.1's do_bench: ``fast_flush`` picks the dtype of its local buffer."""
    try:
        return "fast_flush" in inspect.signature(do_bench).parameters
    except (TypeError, ValueError):  # not a function inspect can read
        return False


def _is_do_bench_buffer(tensor: Any) -> bool:
    """``torch.empty(int(256e6 // 4), dtype=torch.int)``, or 256e6 int8 without fast_flush."""
    import torch

    return tensor.dim() == 1 and (tensor.dtype, tensor.numel()) in (
        (torch.int32, int(256e6 // 4)),
        (torch.int8, int(256e6)),
    )


def _do_bench(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    with _hold.queued_loop():
        return _local_buffer.run(lambda: wrapped(*args, **kwargs), _is_do_bench_buffer, NAME, DO_BENCH)


def revert() -> None:
    _patching.patch_set(NAME).revert()


def _state_of(rows: list[TargetStatus]) -> State:
    """``patched`` where one of ``rows`` is, else why not (the first row's state)."""
    if any(row.patched for row in rows):
        return "patched"
    return rows[0].state if rows else "pending"


def do_bench_state() -> State:
    """Whether ``triton.testing.do_bench`` flushes through cleanflush: through a patched
    driver, or on triton 3.0-3.1 wrapped itself."""
    return _state_of(sites(NAME))


def derived() -> list[Site]:
    """Proton's helpers (triton 3.8+) flush through the driver: patched where it is."""
    testing = sys.modules.get("triton.testing")
    proton = [name for name in ("do_bench_proton", "do_bench_cudagraph_proton") if hasattr(testing, name)]
    if not proton:
        return []
    drivers = [row for row in sites(NAME) if row.target != DO_BENCH]
    state = _state_of(drivers) if drivers else "unsupported"  # 3.0-3.1: do_bench is, the driver is not
    return [
        Site(
            "triton.testing." + " / ".join(proton),
            state,
            "flushes through the driver's clear_cache" if state == "patched" else "the driver is not patched",
        )
    ]
