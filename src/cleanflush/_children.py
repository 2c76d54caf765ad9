"""The policy of a ``multiprocessing`` child is the one its parent had when it started it.

Fork children copy the parent as it is, and spawn children get its environment; a forkserver
child is forked from a server started earlier, with the environment of that moment.  So
``Process.start`` is wrapped: the process object, which every start method but fork pickles
for the child, carries the starting context's ``CLEANFLUSH``, and unpickling it in the child
(before its target runs) puts that value in place (``_cleanflush_boot.adopt``).
"""

from __future__ import annotations

import importlib
from typing import Any

import wrapt

from . import _env, _patching, _policy
from ._state import STATE

NAME = "multiprocessing"  # its patches' key in STATE; not a flush target
MODULE = "multiprocessing.process"


class CarriedPolicy:
    """What a process object carries to its child: the ``CLEANFLUSH`` value to adopt."""

    def __init__(self, value: str | None) -> None:
        self.value = value

    def __reduce__(self) -> tuple[Any, tuple[str | None]]:
        # The start-up module's hook: a child adopts the value without importing cleanflush
        # (and wrapt) unless it imports torch or triton.  Looked up, not imported by name: the
        # start-up module is the one that imports cleanflush.
        boot = importlib.import_module("_cleanflush_boot")
        return boot.adopt, (self.value,)


def _start(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    value = _policy.selected() if STATE.installed else _env.value(_env.POLICY_VAR)
    instance._cleanflush_policy = CarriedPolicy(value)
    return wrapped(*args, **kwargs)


def apply(module: Any = None) -> None:
    process = module or __import__(MODULE, fromlist=["BaseProcess"])
    if STATE.installed and "start" in vars(process.BaseProcess):
        _patching.patch_set(NAME).wrap(process.BaseProcess, "start", _start)


def register() -> None:
    """At the first install: wrap ``Process.start`` when multiprocessing is imported."""
    wrapt.register_post_import_hook(apply, MODULE)


def revert() -> None:
    _patching.patch_set(NAME).revert()
