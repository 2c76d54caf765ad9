"""The ``bench_kineto`` lineage (DeepGEMM's, copied into FlashInfer and SGLang): before
each profiled call it writes an 8 GB ``torch.empty(...).zero_()`` inline, then reads the
kernel times from torch's profiler table by name substring.

The write cannot be reached, so the benchmark is run with ``fn`` replaced by "the clean
read, then ``fn``": the read lands between the stock write and the call, as in every other
harness.  It is profiled too, but the table picks kernels by the names the caller asks
for, and the read kernel's name (``cleanflush_l2_sweep``) contains none of them; where it
would, or where the read would be torch's sum (a ``reduce_kernel``, which DeepGEMM's tests
ask for by ``'reduce'``), the stock benchmark runs, said once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .. import _flush, _policies
from .._policy import current_policy
from .._read import READ_KERNEL
from . import current_cuda_device
from ._function import ModuleFunction

FLUSH_BYTES = int(8e9 // 4) * 4  # its int32 buffer of 8e9 bytes, on the current CUDA device


def cuda_device() -> Any:
    """Where the stock write goes (``device="cuda"``): the current CUDA device."""
    return current_cuda_device()


def clean_fn(fn: Callable[[], Any], device: Any, target: str) -> Callable[[], Any]:
    """``fn`` with the clean read before it; not on the first call, which every copy makes
    once before profiling, with no flush before it."""
    called = False

    def fn_after_clean_read() -> Any:
        nonlocal called
        if called:
            _flush.flush(target, device=device, written=FLUSH_BYTES)  # the write is inline: the read after it
        called = True
        return fn()

    return fn_after_clean_read


class BenchKineto(ModuleFunction):
    """One module's ``bench_kineto``, with the interface of a patch module."""

    PATCHED = "the read runs between its 8 GB write and each call"

    def __init__(
        self,
        name: str,
        module: str,
        checked: str,
        reexported_by: str | None = None,
        device: Callable[[], Any] = cuda_device,
    ) -> None:
        super().__init__(name, module, "bench_kineto", None, checked, reexported_by)
        self.device = device

    def missing(self) -> str:
        return f"{self.module} has no bench_kineto"

    def _stock(self, why: str, wrapped: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The whole benchmark stock (its flushes cannot be counted one by one)."""
        return _flush.fall_back(
            self.name, f"{self.target} runs stock: {why}", lambda: wrapped(*args, **kwargs), counted=False
        )

    def _wrapper(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            call = inspect.signature(wrapped).bind(*args, **kwargs)
        except (TypeError, ValueError):
            return wrapped(*args, **kwargs)  # the stock code says what is wrong with the call
        call.apply_defaults()
        given = call.arguments
        if "fn" not in given or "flush_l2" not in given:
            return self._stock("its signature has no fn or flush_l2", wrapped, args, kwargs)
        if not given["flush_l2"] or not _policies.get(current_policy()).reads:
            return wrapped(*args, **kwargs)
        names = given.get("kernel_names")
        names = (names,) if isinstance(names, str) else names
        clash = [name for name in names or () if isinstance(name, str) and name in READ_KERNEL]
        if clash:
            why = f"the read kernel {READ_KERNEL} would match kernel name {clash[0]!r}"
            return self._stock(why, wrapped, args, kwargs)
        try:
            device = self.device()
        except (RuntimeError, AssertionError) as exc:  # no CUDA device: the benchmark as it was
            return self._stock(f"no CUDA device ({exc})", wrapped, args, kwargs)
        problem = _flush.prepare(device)
        if problem:  # torch's sum would be picked by kernel-name filters, or no read at all
            return self._stock(problem, wrapped, args, kwargs)
        given["fn"] = clean_fn(given["fn"], device, self.name)
        return wrapped(*call.args, **call.kwargs)
