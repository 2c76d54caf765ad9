"""A harness whose L2 flush is a module-level function its benchmark loops look up at call
time (``kernelbench.timing.clear_l2_cache``, ``deep_ep.utils.testing.flush_l2_cache``,
``sol_execbench.core.bench.timing._clear_cache``): the function is wrapped in its module, so
every caller that reads the module global gets the policy; the stock write stays the
harness's own code.  One instance per harness module, each with the interface of a patch
module (NAME, PACKAGE, HOOKS, apply, revert, status).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from .. import _flush, _patching
from .._state import STATE, TargetStatus, mark_uninstalled, not_loaded_row, record

# (wrapped, args, kwargs) -> what the flush should do: None to run the stock code untouched,
# else (device, bytes the stock write writes)
Where = Callable[[tuple[Any, ...], dict[str, Any]], "tuple[Any, int] | None"]


class ModuleFunction:
    # what its status row says when patched, before the commit it was checked against
    PATCHED = "the flush its benchmarks call"

    def __init__(self, name: str, package: str, module: str, attr: str, where: Where | None, checked: str,
                 reexported_by: str | None = None) -> None:
        self.NAME = name  # as CLEANFLUSH_DISABLE names it
        self.PACKAGE = package  # the distribution, for its version
        # a module that star-imports the function (patched too: callers import it from there)
        self.HOOKS = (module,) + ((reexported_by,) if reexported_by else ())
        self.module, self.attr, self.where, self.checked = module, attr, where, checked
        self.reexported_by = reexported_by
        self.target = f"{module}.{attr}"
        self._patches = _patching.PatchSet()

    def missing(self) -> str:
        return f"{self.module} has no function {self.attr}"

    def _wrapper(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        try:
            where = self.where(args, kwargs) if self.where is not None else None
        except Exception:
            where = None
        if where is None:  # a call shape we do not know, or a flush switched off: stock
            return wrapped(*args, **kwargs)
        device, written = where
        return _flush.around(lambda: wrapped(*args, **kwargs), device, written, self.NAME)

    def version(self) -> str | None:
        from . import installed_version

        return installed_version(self.PACKAGE)

    def apply(self) -> None:
        module = sys.modules.get(self.module)
        if module is None:
            return
        if callable(vars(module).get(self.attr)):
            patch = self._patches.wrap(module, self.attr, self._wrapper)
            reexports = sys.modules.get(self.reexported_by or "")
            if reexports is not None:
                self._patches.wrap_alias(reexports, self.attr, patch, self._wrapper)
            record(TargetStatus(self.target, self.NAME, self.version(), True, f"{self.PATCHED}; {self.checked}"))
        else:
            record(TargetStatus(self.target, self.NAME, self.version(), False,
                                f"unsupported: {self.missing()}; stock flush kept"))

    def revert(self) -> None:
        self._patches.revert()
        mark_uninstalled(self.NAME)

    def status(self) -> list[TargetStatus]:
        # its own rows, and those install() records under its distribution (disabled, failed)
        rows = [row for row in STATE.targets.values() if row.package in (self.NAME, self.PACKAGE)]
        return rows or [not_loaded_row(self.target, self.NAME, self.version())]
