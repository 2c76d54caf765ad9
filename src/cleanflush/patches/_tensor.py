"""A harness's cache tensor whose write is the flush: for harnesses that write their cache
inline (``cache.zero_()`` in their own loop: triton 3.2's do_bench, tritonbench, Helion's
pretuned timers, TileLang, FlashInfer, ThunderKittens).  The tensor handed to them is the
same storage as a subclass whose write method (``zero_`` unless named) runs ``_flush.flush``
with the stock write; every other op sees, and returns, a plain tensor.  After
``uninstall()`` a tensor already handed out writes stock.
"""

from __future__ import annotations

from typing import Any

from .. import _flush
from .._state import STATE

# (label, the write method that flushes, one kernel) -> its flushing tensor class, made once
_classes: dict[tuple[str, str, bool], type] = {}


def flushing_tensor(cache: Any, target: str, write: str = "zero_", one_kernel: bool = False) -> Any:
    """``cache`` as a tensor whose ``write()`` is the flush, counted under ``target``
    (``one_kernel``: write-read as one kernel, for a zeroing cache: see ``_flush.flush``)."""
    key = (target, write, one_kernel)
    cls = _classes.get(key)
    if cls is None:  # two threads may both make one: setdefault keeps the first
        cls = _classes.setdefault(key, _flushing_class(target, write, one_kernel))
    return plain_tensor(cache).as_subclass(cls)


def _flushing_class(target: str, write: str, one_kernel: bool) -> type:
    import torch

    stock = getattr(torch.Tensor, write)  # the write itself, which a subclass instance can run as it is

    def flushing_write(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        if not STATE.installed:
            stock(self, *args, **kwargs)
            return self
        _flush.flush(
            target,
            write=lambda: stock(self, *args, **kwargs),
            cache=self,  # the same object every call: the views made for it are kept (``_read.Views``)
            write_part=lambda head: getattr(head, write)(*args, **kwargs),
            one_kernel=one_kernel and not args and not kwargs,
        )
        return self

    # no __torch_function__: every other op sees, and returns, a plain tensor
    namespace = {
        "__torch_function__": torch._C._disabled_torch_function_impl,
        write: flushing_write,
        "__module__": __name__,
        "target": target,
        "_cleanflush_flushing": True,
    }
    return type("CleanFlushCache", (torch.Tensor,), namespace)


def plain_tensor(cache: Any) -> Any:
    """The plain tensor behind a flushing one (anything else as it is)."""
    if vars(type(cache)).get("_cleanflush_flushing", False):
        import torch

        return cache.as_subclass(torch.Tensor)
    return cache
