"""CuTe DSL: ``cutlass.testing`` (read at NVIDIA/cutlass 7107b05,
python/CuTeDSL/cutlass/testing.py, and in the nvidia-cutlass-dsl 4.8.1 wheel).  Its
autotuner's timer, ``_benchmark_for_autotune`` (behind ``tune()`` and
``cute.testing.autotune_jit``), zeroes exactly L2 with a raw ``cuMemsetD32Async`` before
every timed call, and ``benchmark()`` zeroes 2 x L2 once before its loop: both through the
module global ``cuda_driver`` (``cuda.bindings.driver``), with no torch in the loop.

That global becomes a proxy of the driver module whose ``cuMemsetD32Async`` is the flush:
the stock memset, then the read, on the memset's stream.  Every other name is the driver's
own, and the driver module itself is untouched (other users of its memset are not flushes).
"""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any

import wrapt

from .. import _flush, _patching
from .._registry import name_of
from .._state import Site
from . import current_cuda_device

NAME = name_of(__name__)
MODULE = "cutlass.testing"
GLOBAL = "cuda_driver"
CHECKED = "checked against nvidia-cutlass-dsl 4.8.1"


if TYPE_CHECKING:  # wrapt's proxy is generic in its type hints from wrapt 2 only
    _Proxy = wrapt.ObjectProxy[Any]
else:
    _Proxy = wrapt.ObjectProxy


class FlushingDriver(_Proxy):
    """``cuda.bindings.driver`` as ``cutlass.testing`` sees it: its memsets flush clean."""

    def cuMemsetD32Async(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (the driver's name)
        driver = self.__wrapped__

        def stock() -> Any:
            return driver.cuMemsetD32Async(*args, **kwargs)

        try:
            _, _, count, stream = args
            device, on_stream = where(int(stream))
        except (ValueError, TypeError, RuntimeError, AssertionError) as exc:  # another call, no CUDA torch
            return _flush.fall_back(NAME, f"its memset could not be followed by the read ({exc!r})", stock)
        with on_stream:
            result = _flush.flush(NAME, write=stock, device=device, written=4 * int(count))
        return (driver.CUresult.CUDA_SUCCESS,) if result is None else result  # None: `read` skipped it


def where(handle: int) -> tuple[Any, Any]:
    """(device, a context that makes the memset's stream torch's current one) for a driver
    stream handle (0: the legacy default stream); the device is the current one, whose
    context cutlass.testing allocated its buffer in."""
    import torch

    device = current_cuda_device()
    if torch.cuda.current_stream(device).cuda_stream == handle:
        # the usual case (its default stream): a stream switch would cost the host time
        # that the flush's read must cover before the timed call is queued
        return device, contextlib.nullcontext()
    external = torch.cuda.ExternalStream
    stream = torch.cuda.default_stream(device) if handle == 0 else external(handle, device=device)  # type: ignore[no-untyped-call]
    return device, torch.cuda.stream(stream)


def apply() -> list[Site]:
    module = sys.modules.get(MODULE)
    if module is None:
        return []
    driver = vars(module).get(GLOBAL)
    if not callable(getattr(driver, "cuMemsetD32Async", None)):
        return [
            Site(
                f"{MODULE}.{GLOBAL}", "unsupported", f"{MODULE} has no {GLOBAL} with cuMemsetD32Async; stock flush kept"
            )
        ]
    _patching.patch_set(NAME).replace(module, GLOBAL, FlushingDriver)
    return [
        Site(
            f"{MODULE}.{GLOBAL}",
            "patched",
            f"its cuMemsetD32Async (the flush of _benchmark_for_autotune and benchmark) is the flush; {CHECKED}",
        )
    ]


def revert() -> None:
    _patching.patch_set(NAME).revert()
