"""tritonbench's profiler timer (``_do_bench_profiler``): it sums the time of every CUDA
kernel in its trace except the stock fill kernel, so our read kernel would be counted as
part of the kernel under test.  We make it drop ``cleanflush_l2_sweep`` too, in the layout
its module has (read at meta-pytorch/tritonbench 2cd46d0 and a later index version):

* ``evt.name != CACHE_CLEAR_KERNEL`` (an exact name, a module global read at call time):
  the global becomes a ``str`` equal to both names;
* ``not _is_cache_clear_kernel(evt.name)`` (a substring test): the function is wrapped to
  say yes to our kernel as well.

Its other timers (CUDA graph, GPU events) zero the cache tensor from
``get_empty_cache_for_benchmark`` directly; the Triton patch makes that tensor flush.
Where the sweep cannot be built the read is torch's sum, which this does not drop.
"""

from __future__ import annotations

import sys
from typing import Any

from .. import _patching
from .._read import READ_KERNEL
from .._registry import name_of
from .._state import Site

NAME = name_of(__name__)
MODULE = "tritonbench.components.do_bench.run"
TARGET = f"{MODULE} profiler timer"


class AlsoTheRead(str):
    """``CACHE_CLEAR_KERNEL`` that also equals the read kernel's name: in ``evt.name != it``
    a ``str`` subclass on the right is asked first."""

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, str):
            return NotImplemented
        return str.__eq__(self, other) or other == READ_KERNEL

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__


def _is_cache_clear_kernel(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    name = args[0] if args else next(iter(kwargs.values()), None)  # its one argument, however passed
    return wrapped(*args, **kwargs) or name == READ_KERNEL


def apply() -> list[Site]:
    module = sys.modules.get(MODULE)
    if module is None:
        return []
    patches = _patching.patch_set(NAME)
    if callable(vars(module).get("_is_cache_clear_kernel")):
        patches.wrap(module, "_is_cache_clear_kernel", _is_cache_clear_kernel)
        detail = "its profiler timer drops the read kernel as it drops the stock fill (_is_cache_clear_kernel)"
    elif isinstance(vars(module).get("CACHE_CLEAR_KERNEL"), str):
        patches.replace(module, "CACHE_CLEAR_KERNEL", AlsoTheRead)
        detail = "its profiler timer drops the read kernel as it drops the stock fill (CACHE_CLEAR_KERNEL)"
    else:
        return [
            Site(
                TARGET,
                "unsupported",
                "no CACHE_CLEAR_KERNEL or _is_cache_clear_kernel in this tritonbench; "
                "its profiler timer counts the read",
            )
        ]
    return [Site(TARGET, "patched", detail)]


def revert() -> None:
    _patching.patch_set(NAME).revert()
