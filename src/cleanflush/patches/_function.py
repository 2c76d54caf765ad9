"""A harness whose L2 flush is a module-level function its benchmark loops look up at call
time (``kernelbench.timing.clear_l2_cache``, ``deep_ep.utils.testing.flush_l2_cache``,
``sol_execbench.core.bench.timing._clear_cache``): the function is wrapped in its module, so
every caller that reads the module global gets the policy; the stock write stays the
harness's own code.  One instance per harness module, giving that patch module its
``apply`` and ``revert``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .. import _flush, _patching
from .._state import Site

# (args, kwargs) of a call -> None where the harness asked for no flush, else (device, bytes
# the stock write writes); raises for a call shape it does not know
Where = Callable[[tuple[Any, ...], dict[str, Any]], "tuple[Any, int] | None"]


class ModuleFunction:
    # what its status row says when patched, before the commit it was checked against
    PATCHED = "the flush its benchmarks call"

    def __init__(
        self, name: str, module: str, attr: str, where: Where | None, checked: str, reexported_by: str | None = None
    ) -> None:
        self.name = name  # the registry's name, and the label its flushes are counted under
        self.module, self.attr, self.where, self.checked = module, attr, where, checked
        # a module that star-imports the function (patched too: callers import it from there)
        self.reexported_by = reexported_by
        self.target = f"{module}.{attr}"

    def missing(self) -> str:
        return f"{self.module} has no function {self.attr}"

    def _wrapper(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        assert self.where is not None  # subclasses without one replace this wrapper
        try:
            where = self.where(args, kwargs)
        except Exception as exc:  # a call shape we do not know: the stock code with the caller's arguments
            return _flush.fall_back(
                self.name,
                f"{self.target} was called in a way cleanflush does not know ({exc!r})",
                lambda: wrapped(*args, **kwargs),
            )
        if where is None:  # the harness asked for no flush
            return wrapped(*args, **kwargs)
        device, written = where
        return _flush.flush(self.name, write=lambda: wrapped(*args, **kwargs), device=device, written=written)

    def apply(self) -> list[Site]:
        module = sys.modules.get(self.module)
        if module is None:
            return []
        if not callable(vars(module).get(self.attr)):
            return [Site(self.target, "unsupported", f"{self.missing()}; stock flush kept")]
        patches = _patching.patch_set(self.name)
        patch = patches.wrap(module, self.attr, self._wrapper)
        reexports = sys.modules.get(self.reexported_by or "")
        if reexports is not None:
            patches.wrap_alias(reexports, self.attr, patch, self._wrapper)
        return [Site(self.target, "patched", f"{self.PATCHED}; {self.checked}")]

    def revert(self) -> None:
        _patching.patch_set(self.name).revert()
