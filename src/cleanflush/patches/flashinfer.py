"""FlashInfer: ``flashinfer.testing`` (read at flashinfer-ai/flashinfer fb28d72 and in the
flashinfer-python 0.7.4 wheel, whose ``flashinfer/testing/utils.py`` the CPU tests run).

* ``bench_gpu_time_with_cuda_event`` and ``bench_gpu_time_with_cupti`` (the timer of
  flashinfer-bench) allocate a local 2 x L2 int8 buffer and ``zero_()`` it before every
  call: while one runs, its buffer is handed out as a flushing tensor (``_local_buffer``).
  Callers bind these names at import (``flashinfer.testing`` re-exports them,
  flashinfer-bench imports them from there), so the re-exports are patched as well; a
  module that copied the name before cleanflush was installed keeps the stock function
  (``CLEANFLUSH=1`` installs first).
* ``bench_kineto`` is DeepGEMM's, with its 8 GB inline write (``_kineto``).
* ``bench_gpu_time_with_cudagraph`` rotates its inputs and flushes nothing.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from .. import _flush, _patching
from .._registry import name_of
from .._state import Site, record
from . import _local_buffer
from ._kineto import BenchKineto

NAME = name_of(__name__)
MODULE = "flashinfer.testing.utils"
REEXPORTS = "flashinfer.testing"
TIMERS = ("bench_gpu_time_with_cuda_event", "bench_gpu_time_with_cupti")
CHECKED = "checked against flashinfer-python 0.7.4"

_kineto = BenchKineto(NAME, MODULE, CHECKED)


def _is_flush_buffer(tensor: Any) -> bool:
    import torch

    return bool(tensor.dim() == 1 and tensor.dtype == torch.int8)


def _flush_asked(wrapped: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether this call zeroes a flush buffer; KeyError for a signature without the
    arguments that say so (a layout we do not know)."""
    call = inspect.signature(wrapped).bind(*args, **kwargs)
    call.apply_defaults()
    given = call.arguments
    if any(given[name] is not None for name in ("l2_flush", "l2_flush_size_mb", "l2_flush_device")):
        return given["l2_flush"] is not False  # the deprecated spelling, which defaults to on
    return bool(given["cold_l2_cache"]) and not given.get("use_cuda_graph")  # graphs: rotation


def _timer(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    where = f"{MODULE}.{wrapped.__name__}"
    try:
        asked = _flush_asked(wrapped, args, kwargs)
    except KeyError as exc:  # a signature we do not know: say so, run it stock
        why = f"its signature has no {exc} argument"
        record(NAME, Site(where, "unsupported", f"{why}; its stock flush ran"))
        return _flush.fall_back(NAME, f"{where}: {why}", lambda: wrapped(*args, **kwargs), counted=False)
    except (TypeError, ValueError):  # a call the signature rejects: the stock code's own error
        return wrapped(*args, **kwargs)
    if not asked:
        return wrapped(*args, **kwargs)
    return _local_buffer.run(lambda: wrapped(*args, **kwargs), _is_flush_buffer, NAME, where)


def apply() -> list[Site]:
    utils = sys.modules.get(MODULE)
    if utils is None:
        return []
    patches = _patching.patch_set(NAME)
    found = []
    for name in TIMERS:
        target = f"{MODULE}.{name}"
        if not callable(vars(utils).get(name)):
            found.append(Site(target, "unsupported", f"{MODULE} has no function {name}; stock flush kept"))
            continue
        patch = patches.wrap(utils, name, _timer)
        reexports = sys.modules.get(REEXPORTS)
        if reexports is not None:
            patches.wrap_alias(reexports, name, patch, _timer)
        found.append(Site(target, "patched", f"its local flush buffer zeroes through the flush; {CHECKED}"))
    return found + _kineto.apply()


def revert() -> None:
    _patching.patch_set(NAME).revert()
