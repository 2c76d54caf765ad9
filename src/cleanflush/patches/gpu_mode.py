"""GPU MODE: the ``clear_l2_cache`` of reference-kernels' ``utils.py``, which each problem's
``eval.py`` calls before every timed run (read at gpu-mode/reference-kernels f83cb92:
problems/nvidia/utils.py writes a 4 GiB ``torch.randn``, the problem sets' copies a 256 MiB
int64 ``fill_(42)``, ``clear_l2_cache_large`` 62.5 GiB of ``randn``).  KernelBot's
examples/utils.py carries the same function.

``utils`` is a top-level module of the problem's folder, and eval.py binds the function by
name (``from utils import set_seed, clear_l2_cache``, or ``clear_l2_cache_large as
clear_l2_cache``): it is wrapped as ``utils`` finishes importing, before that line reads it.
The benchmarks run in a spawn pool, which the autoload reaches.  A ``utils`` module is taken
for GPU MODE's only when it has ``set_seed`` and a flush that takes no arguments; any other
is left alone, with no row.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from .. import _flush, _patching
from .._registry import name_of
from .._state import Site
from . import current_cuda_device

NAME = name_of(__name__)
MODULE = "utils"
FLUSHES = ("clear_l2_cache", "clear_l2_cache_large")
# the smallest write of those read (the problem sets' 256 MiB): the read after it is 2 x L2
WRITTEN = 256 * 1024 * 1024
CHECKED = "checked against reference-kernels f83cb92's layout"


def _is_flush(value: Any) -> bool:
    if not inspect.isfunction(value):
        return False
    return not inspect.signature(value).parameters


def _flush_call(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if args or kwargs:  # the stock function takes none: its own TypeError
        return wrapped(*args, **kwargs)
    device = written_on()
    if device is None:
        return _flush.fall_back(NAME, "it flushed with no CUDA device to read on", wrapped)
    return _flush.flush(NAME, write=wrapped, device=device, written=WRITTEN)


def written_on() -> Any:
    """The device its write's ``"cuda"`` is: the current one (None without CUDA)."""
    return current_cuda_device()


def apply() -> list[Site]:
    module = sys.modules.get(MODULE)
    if module is None or not callable(vars(module).get("set_seed")):
        return []
    names = [name for name in FLUSHES if _is_flush(vars(module).get(name))]
    patches = _patching.patch_set(NAME)
    for name in names:
        patches.wrap(module, name, _flush_call)
    return [Site(f"{MODULE}.{name}", "patched", f"the flush eval.py calls; {CHECKED}") for name in names]


def revert() -> None:
    _patching.patch_set(NAME).revert()
