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
  tensor (``_local_buffer``).

On triton 3.0-3.3 the active driver class (``triton.backends.backends[name].driver``)
is a separate copy of the importable ``CudaDriver``, so both are patched.  Detection is
by feature: which of the two methods a class defines, not the version string.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from .. import _flush, _patching
from . import _local_buffer
from .._state import STATE, TargetStatus, count_flush, mark_uninstalled, not_loaded_row, record, warn_once

NAME = "triton"  # as CLEANFLUSH_DISABLE names it
HOOKS = ("triton.backends", "triton.backends.nvidia.driver", "triton.backends.amd.driver", "triton.testing")
DO_BENCH = "triton.testing.do_bench"
PACKAGE = "triton"
_IMPORTABLE = (
    ("triton.backends.nvidia.driver", "CudaDriver"),
    ("triton.backends.amd.driver", "HIPDriver"),
)

_patches = _patching.PatchSet()


def _version() -> str | None:
    from . import installed_version

    return installed_version("triton", "pytorch-triton")


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
        warn_once("triton:call", f"clear_cache called as (args={len(args)}, kwargs={sorted(kwargs)}), "
                  "not clear_cache(cache); its stock flush is kept")
        count_flush("triton", "write")
        return wrapped(*args, **kwargs)
    cache = _flush.plain_tensor(args[0] if args else kwargs["cache"])  # ours would flush a second time
    return _flush.flush(cache, lambda: wrapped(cache), "triton")


def _get_empty_cache(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    cache = wrapped(*args, **kwargs)
    try:
        _flush.prepare(cache.device)  # before any CUDA-graph capture of the flush
    except Exception:  # the flush itself warns, falls back and counts the write
        pass
    try:
        # for every caller that zeroes it directly: triton 3.2's do_bench, tritonbench, Helion
        return _flush.flushing_tensor(cache, "triton")
    except Exception:  # not a tensor we know: the stock one
        return cache


def patch_class(label: str, cls: type) -> TargetStatus:
    """Patch one driver class according to the methods it has; return its status row."""
    target = f"{label}.clear_cache"
    clear_owner = _patching.defining_class(cls, "clear_cache")
    empty_owner = _patching.defining_class(cls, "get_empty_cache_for_benchmark")
    if clear_owner is not None and empty_owner is not None:
        _patches.wrap(clear_owner, "clear_cache", _clear_cache)
        _patches.wrap(empty_owner, "get_empty_cache_for_benchmark", _get_empty_cache)
        detail = ("do_bench, autotuner and Proton helpers flush through it; harnesses that zero "
                  "its cache tensor directly (tritonbench, Helion) flush through that tensor")
        return TargetStatus(target, PACKAGE, _version(), True, detail)
    if empty_owner is not None:
        target = f"{label}.get_empty_cache_for_benchmark"
        _patches.wrap(empty_owner, "get_empty_cache_for_benchmark", _get_empty_cache)
        detail = "triton 3.2 layout: do_bench's inline zero_() runs the flush"
        return TargetStatus(target, PACKAGE, _version(), True, detail)
    return TargetStatus(
        target, PACKAGE, _version(), False,
        "unsupported: this driver has neither clear_cache nor get_empty_cache_for_benchmark "
        "(triton < 3.2 flushes inline in do_bench); stock flush kept",
    )


def apply() -> None:
    rows = [patch_class(label, cls) for label, cls in driver_classes()]
    if any(row.patched for row in rows) or "triton.backends" not in sys.modules:
        for row in rows:
            record(row)
        return
    # triton 3.0-3.1: the driver has no flush; do_bench zeroes a buffer of its own
    testing = sys.modules.get("triton.testing")
    if testing is None:
        record(TargetStatus(DO_BENCH, PACKAGE, _version(), False,
                            "triton 3.0-3.1 layout: patched when triton.testing is imported"))
    elif _has_inline_flush(vars(testing).get("do_bench")):
        _patches.wrap(testing, "do_bench", _do_bench)
        record(TargetStatus(DO_BENCH, PACKAGE, _version(), True,
                            "triton 3.0-3.1 layout: the 256 MB buffer it allocates zeroes through the flush"))
    else:
        record(TargetStatus(DO_BENCH, PACKAGE, _version(), False, "unsupported: neither the driver "
                            "nor triton.testing.do_bench has a flush cleanflush knows; stock flush kept"))


def _has_inline_flush(do_bench: Any) -> bool:
    """triton 3.0-3.1's do_bench: ``fast_flush`` picks the dtype of its local buffer."""
    try:
        return "fast_flush" in inspect.signature(do_bench).parameters
    except (TypeError, ValueError):
        return False


def _is_do_bench_buffer(tensor: Any) -> bool:
    """``torch.empty(int(256e6 // 4), dtype=torch.int)``, or 256e6 int8 without fast_flush."""
    import torch

    return tensor.dim() == 1 and (tensor.dtype, tensor.numel()) in (
        (torch.int32, int(256e6 // 4)), (torch.int8, int(256e6)))


def _do_bench(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _local_buffer.run(lambda: wrapped(*args, **kwargs), _is_do_bench_buffer, "triton",
                             DO_BENCH, PACKAGE, _version())


def revert() -> None:
    _patches.revert()
    mark_uninstalled(PACKAGE)


def driver_patched() -> bool:
    """Whether do_bench's flush goes through cleanflush now (a driver class is patched)."""
    return any(row.patched and row.package == PACKAGE and not row.target.startswith("triton.testing")
               for row in STATE.targets.values())


def do_bench_patched() -> bool:
    """Whether ``triton.testing.do_bench`` flushes through cleanflush: through a patched
    driver, or (triton 3.0-3.1) wrapped itself."""
    row = STATE.targets.get(DO_BENCH)
    return driver_patched() or bool(row and row.patched)


def status() -> list[TargetStatus]:
    rows = [row for row in STATE.targets.values() if row.package == PACKAGE]
    version = _version()
    if not rows:
        if sys.modules.get("triton") is not None and "triton.backends" not in sys.modules:
            return [TargetStatus(
                DO_BENCH, PACKAGE, version, False,
                "unsupported: this triton has no driver backends (before 3.0); stock flush kept",
            )]
        return [not_loaded_row("triton", PACKAGE, version)]
    testing = sys.modules.get("triton.testing")
    if testing is not None:
        proton = [n for n in ("do_bench_proton", "do_bench_cudagraph_proton") if hasattr(testing, n)]
        if proton:
            covered = driver_patched()
            rows.append(TargetStatus(
                "triton.testing." + " / ".join(proton), PACKAGE, version, covered,
                "flushes through the driver's clear_cache" if covered else "driver not patched",
            ))
    return rows
