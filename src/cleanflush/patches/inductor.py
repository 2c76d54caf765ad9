"""PyTorch Inductor: its benchmarkers flush L2 with an inline ``buffer.zero_()``.

The write is inline, so we add only the read, right after it and before the timer starts:

* ``InductorBenchmarker.benchmark_gpu`` (and the estimation loop of
  ``TorchProfilerBenchmarker``): each loop iteration is ``buffer.zero_();
  start_event.record(); _callable(); end_event.record()``.  Inside a patched benchmark
  call, ``get_event_pairs`` hands out start events whose ``record()`` enqueues the read
  first.  ``InductorBenchmarker``'s loops queue every call and synchronize once, as triton's
  ``do_bench`` does, so its reads may hold as long (``_hold.queued_loop``): its minimum is
  otherwise clean only where its memory warm-up's writes still keep the GPU behind the host
  (its first few calls; benchmarks/synced.py).  The profiler's timings are its kernels' own,
  which no host time reaches.
* ``TorchProfilerBenchmarker``'s profiled loop and ``utils._do_bench_using_profiling``:
  ``buffer.zero_(); with record_function(NAME): fn()``.  Inside a patched benchmark call,
  entering a ``record_function`` with that NAME enqueues the read first, so the profiler
  never counts the read as part of the benchmarked callable.
* ``TritonBenchmarker`` calls ``triton.testing.do_bench``: the Triton patch covers it.

The methods themselves are wrapped, not replaced, so upstream's decorators, loop, sample
counts, return modes, counters and cudagraph routing stay exactly as they are.  Classes
are patched (the ``benchmarker`` singleton is bound by name all over Inductor), and an
unknown shape leaves the stock code in place with a warning and a status line.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from contextvars import ContextVar
from typing import Any, NamedTuple

import wrapt

from .. import _flush, _hold, _patching
from .._registry import name_of
from .._state import Site, warn_once
from . import triton as triton_patch

NAME = name_of(__name__)
BENCHMARKING = "torch._inductor.runtime.benchmarking"
UTILS = "torch._inductor.utils"
PROFILER = "torch.autograd.profiler"
_READ_NOTE = "policy read runs as write-read here: the stock write is inline"
# The profiler regions that open a timed call, as the patched modules name them.
_REGIONS = ((BENCHMARKING, "_CALLABLE_PROFILE_EVENT_NAME"), (UTILS, "_DO_BENCH_PROFILE_EVENT_NAME"))
# Upstream's inline writes, where they are not one L2: ROCm's 256 MiB in the profiler
# benchmarker, and _do_bench_using_profiling's 256e6 bytes (torch 2.13 benchmarking.py, utils.py).
ROCM_PROFILER_WRITE = 256 * 1024 * 1024
PROFILING_WRITE = 256 * 10**6


class _Site(NamedTuple):
    """The patched benchmark running now, in this context."""

    target: str
    written: int | None  # bytes of its inline write, None for one L2
    device_type: Any  # as the caller passed it; None: upstream picks, as ``default`` does
    default: tuple[str, str]  # (module, function) upstream asks for the device type when none is named


_active: ContextVar[_Site | None] = ContextVar("cleanflush_inductor", default=None)


def _regions() -> set[str]:
    """The record_function names that open a timed region in the modules loaded now."""
    return {name for module, attr in _REGIONS if (name := getattr(sys.modules.get(module), attr, None))}


def _device(site: _Site, device_type: Any) -> Any:
    import torch

    kind = getattr(device_type, "type", device_type) or upstream_default(*site.default)
    index = getattr(torch, kind).current_device()
    return torch.device(kind, index) if isinstance(index, int) else torch.device(kind)


def _device_or_warn(site: _Site, device_type: Any) -> Any:
    """The device to read on, or None (with one warning) when there is none to find."""
    try:
        return _device(site, device_type)
    except (AttributeError, RuntimeError, AssertionError) as exc:  # a device type torch cannot resolve: no read
        warn_once(f"device:{site.target}", f"{site.target}: no device for the read ({exc!r}); stock flush kept")
        return None


def upstream_default(module: str, name: str) -> str:
    """The device type upstream's ``module.name()`` picks when the caller names none (CUDA,
    XPU...); CUDA where that torch has no such function."""
    return str(getattr(sys.modules.get(module), name, lambda: "cuda")())


@functools.cache  # the same wrapper at every install: a re-install wraps it again
def _benchmark(target: str, written: int | None, default: tuple[str, str], queued: bool) -> _patching.Wrapper:
    """The wrapper of a benchmark call: its flushes read for ``target``; ``queued``: its loop
    times by events and never waits for the GPU, so its reads may hold up to the long bound."""

    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        token = _active.set(_Site(target, written, kwargs.get("device_type"), default))
        try:
            with _hold.queued_loop() if queued else contextlib.nullcontext():
                return wrapped(*args, **kwargs)
        finally:
            _active.reset(token)

    return wrapper


class _ReadBeforeStart(wrapt.ObjectProxy):  # type: ignore[type-arg]
    """A start event whose ``record()`` first enqueues the clean read."""

    def __init__(self, event: Any, device: Any, site: _Site) -> None:
        super().__init__(event)
        self._self_flush = (device, site.written, site.target)

    def record(self, *args: Any, **kwargs: Any) -> Any:
        device, written, target = self._self_flush
        _flush.flush(target, device=device, written=written)  # the write is inline: the read after it
        return self.__wrapped__.record(*args, **kwargs)


def _get_event_pairs(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    pairs = wrapped(*args, **kwargs)
    site = _active.get()
    if site is None:
        return pairs
    if not isinstance(pairs, list) or not all(isinstance(p, tuple) and len(p) == 2 for p in pairs):
        warn_once(
            f"pairs:{site.target}",
            f"{site.target}: get_event_pairs returned {type(pairs).__name__}, "
            "not a list of (start, end) pairs; its stock flush is kept",
        )
        return pairs
    device = _device_or_warn(site, kwargs.get("device_type", site.device_type))
    if device is None:
        return pairs
    return [(_ReadBeforeStart(start, device, site), end) for start, end in pairs]


def _record_function_enter(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    site = _active.get()
    if site is not None and getattr(instance, "name", None) in _regions():
        device = _device_or_warn(site, site.device_type)
        if device is not None:
            _flush.flush(site.target, device=device, written=site.written)  # the write is inline: the read after it
    return wrapped(*args, **kwargs)


def _patch_record_function() -> None:
    profiler = sys.modules[PROFILER]
    owner = _patching.defining_class(profiler.record_function, "__enter__")
    _patching.patch_set(NAME).wrap(owner, "__enter__", _record_function_enter)


def _unsupported(target: str, reason: str, known: bool = False) -> Site:
    """Keep the stock code and say why in status; warn too when the layout is a surprise
    (a known older torch is not news at every import)."""
    if not known:
        warn_once(f"inductor:{target}", f"{target}: {reason}; its stock flush is kept")
    return Site(target, "unsupported", f"{reason}; stock flush kept")


def _apply_benchmarking(module: Any) -> list[Site]:
    import torch

    patches = _patching.patch_set(NAME)
    inductor = getattr(module, "InductorBenchmarker", None)
    target = "InductorBenchmarker.benchmark_gpu"
    default = (module.__name__, "_get_default_gpu_device_type")
    if inductor is None:
        found = [Site(target, "unsupported", "not in this torch (added in 2.7); TritonBenchmarker is the default")]
    elif "benchmark_gpu" in vars(inductor) and "get_event_pairs" in vars(inductor):
        patches.wrap(inductor, "get_event_pairs", _get_event_pairs)
        patches.wrap(inductor, "benchmark_gpu", _benchmark(target, None, default, queued=True))
        found = [
            Site(
                target,
                "patched",
                f"read after the inline L2-sized zero_(), before each start event; {_hold.queued_note()}; {_READ_NOTE}",
            )
        ]
    else:
        found = [_unsupported(target, "no get_event_pairs/benchmark_gpu on InductorBenchmarker")]

    profiler_cls = getattr(module, "TorchProfilerBenchmarker", None)
    target = "TorchProfilerBenchmarker.benchmark_gpu"
    region = getattr(module, "_CALLABLE_PROFILE_EVENT_NAME", None)
    if profiler_cls is None:
        return found  # torch < 2.13: the class does not exist, nothing to report
    if region and "benchmark_gpu" in vars(profiler_cls) and inductor is not None:
        _patch_record_function()
        written = ROCM_PROFILER_WRITE if torch.version.hip else None
        patches.wrap(profiler_cls, "benchmark_gpu", _benchmark(target, written, default, queued=False))
        found.append(
            Site(
                target,
                "patched",
                f"read after the inline zero_(), outside the profiled {region!r} region; {_READ_NOTE}",
            )
        )
    else:
        found.append(_unsupported(target, "unknown TorchProfilerBenchmarker layout"))
    return found


def _apply_utils(module: Any) -> list[Site]:
    target = "torch._inductor.utils._do_bench_using_profiling"
    region = getattr(module, "_DO_BENCH_PROFILE_EVENT_NAME", None)
    if "_do_bench_using_profiling" in vars(module) and region:
        _patch_record_function()
        _patching.patch_set(NAME).wrap(
            module,
            "_do_bench_using_profiling",
            _benchmark(target, PROFILING_WRITE, (module.__name__, "get_gpu_type"), queued=False),
        )
        return [Site(target, "patched", f"read after the inline zero_(), outside the profiled region; {_READ_NOTE}")]
    if "_do_bench_using_profiling" in vars(module):
        return [
            _unsupported(
                target,
                "this torch's _do_bench_using_profiling has no named profiler region "
                "to put the read in front of (torch 2.13 has one)",
                known=True,
            )
        ]
    if hasattr(module, "do_bench_using_profiling"):
        return [
            _unsupported(
                target,
                "torch < 2.10 inlines the flush in do_bench_using_profiling, which call sites import by name",
                known=True,
            )
        ]
    return []


def apply() -> list[Site]:
    found = []
    if BENCHMARKING in sys.modules:
        found += _apply_benchmarking(sys.modules[BENCHMARKING])
    if UTILS in sys.modules:
        found += _apply_utils(sys.modules[UTILS])
    return found


def revert() -> None:
    _patching.patch_set(NAME).revert()


def derived() -> list[Site]:
    """TritonBenchmarker flushes through triton's do_bench: patched where that is."""
    if not hasattr(sys.modules.get(BENCHMARKING), "TritonBenchmarker"):
        return []
    state = triton_patch.do_bench_state()
    return [
        Site(
            "TritonBenchmarker.benchmark_gpu",
            state,
            "flushes through triton.testing.do_bench: "
            + ("patched there" if state == "patched" else "its flush is not patched"),
        )
    ]
