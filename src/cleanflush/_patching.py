"""Put a wrapt wrapper on a class attribute and take it off again, exactly.

The original object is read from the defining class's ``__dict__`` (no descriptor
binding) and put back as that same object on revert.  If someone else wrapped the
attribute after us, reverting would drop their wrapper too, so we disable ours instead.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import wrapt

from ._state import warn_once

Wrapper = Callable[[Callable[..., Any], Any, tuple[Any, ...], dict[str, Any]], Any]


@dataclass(eq=False)
class Patch:
    owner: Any  # a class, or the module of a harness function
    name: str
    original: Any
    wrapper: Any = None
    active: bool = True

    def _enabled(self) -> bool:
        return self.active


@dataclass
class _Made:
    """Every patch this process made, and each target's set of applied ones."""

    # (id(owner), name) -> the patch ever made there: a re-install puts the same wrapper back
    patches: dict[tuple[int, str], Patch]
    sets: dict[str, PatchSet]  # target name -> its applied patches
    lock: threading.RLock


MADE = _Made({}, {}, threading.RLock())


def _fresh_lock_in_child() -> None:
    MADE.lock = threading.RLock()  # another thread may have held it at the fork


os.register_at_fork(after_in_child=_fresh_lock_in_child)


def defining_class(cls: type, name: str) -> type | None:
    """The class in ``cls``'s MRO whose ``__dict__`` holds ``name``."""
    for klass in cls.__mro__:
        if name in vars(klass):
            return klass
    return None


def our_patch(owner: type, name: str) -> Patch | None:
    """The live cleanflush patch on ``owner.name``, if that attribute is ours."""
    patch = getattr(vars(owner).get(name), "_self_cleanflush_patch", None)
    return patch if isinstance(patch, Patch) and patch.active else None


def wrap(owner: type, name: str, wrapper: Wrapper) -> Patch:
    """Wrap ``owner.name`` (which ``owner`` itself defines); idempotent, also when several
    threads install at once."""
    with MADE.lock:
        return _wrap(owner, name, wrapper)


def _wrap(owner: type, name: str, wrapper: Wrapper) -> Patch:
    existing = our_patch(owner, name)
    if existing is not None and getattr(existing.wrapper, "_self_wrapper", None) == wrapper:
        return existing
    current = vars(owner)[name]
    # Every patch ever made is kept (MADE.patches): a re-install puts the same wrapper back, so a
    # name that an import copied from it (``from deep_gemm.testing import bench_kineto``)
    # flushes again instead of staying the disabled wrapper of an earlier install.
    patch = MADE.patches.get((id(owner), name))
    if patch is None or not _reusable(patch, owner, current, wrapper):
        patch = Patch(owner, name, current)
        patch.wrapper = wrapt.FunctionWrapper(patch.original, wrapper, enabled=patch._enabled)
        patch.wrapper._self_cleanflush_patch = patch
        MADE.patches[(id(owner), name)] = patch
    patch.active = True
    setattr(owner, name, patch.wrapper)
    return patch


def _reusable(patch: Patch, owner: Any, current: Any, wrapper: Wrapper) -> bool:
    """Whether the patch once made on ``owner`` can be put back over ``current`` as it is."""
    return (
        patch.owner is owner
        and patch.original is current
        and patch.wrapper._self_wrapper == wrapper  # a bound method is made anew each time
        and _turned_on_with(patch)
    )


def _turned_on_with(patch: Patch) -> bool:
    """Whether ``patch``'s wrapper flushes once ``patch`` is applied: it is its own, or an
    alias's whose patch is applied (not one of a module replaced since, turned off for good)."""
    owner = getattr(patch.wrapper, "_self_cleanflush_patch", None)
    return owner is patch or (isinstance(owner, Patch) and owner.active)


def unwrap(patch: Patch) -> None:
    """Restore the exact original object, or disable our wrapper if another sits on it."""
    if vars(patch.owner).get(patch.name) is patch.wrapper:
        setattr(patch.owner, patch.name, patch.original)
    else:
        # a module owner has no __qualname__ (a harness function patched in its module)
        owner = getattr(patch.owner, "__qualname__", None) or getattr(patch.owner, "__name__", repr(patch.owner))
        if isinstance(patch.wrapper, wrapt.FunctionWrapper):
            said = (
                "was wrapped again after cleanflush (or replaced); cleanflush's wrapper is disabled and left "
                "where it is"
            )
        else:
            said = "was set again after cleanflush; left as it is"
        warn_once(f"unwrap:{id(patch.owner)}.{patch.name}", f"{owner}.{patch.name} {said}")
    patch.active = False


class PatchSet:
    """The patches one target module has applied, so that ``revert`` can undo them all.

    Hooks may apply the same target more than once (one call per hooked module); wrapping
    is idempotent and each patch is kept once.  Two sets may wrap one attribute (the pick
    rule's ``benchmark_all_configs`` under the decisions recorder's): the one applied last
    sits outside and must be reverted first.
    """

    def __init__(self) -> None:
        self._patches: list[Patch] = []

    def wrap(self, owner: Any, name: str, wrapper: Wrapper) -> Patch:
        for patch in self._patches:  # ours, though another set's wrapper may sit on it now
            if patch.owner is owner and patch.name == name and patch.active:
                return patch
        patch = wrap(owner, name, wrapper)
        if patch not in self._patches:
            self._patches.append(patch)
        return patch

    def wrap_alias(self, owner: Any, name: str, patch: Patch, wrapper: Wrapper) -> None:
        """``owner.name`` re-exports what ``patch`` wraps: wrap it too while it holds the
        original (imported before we were installed); when it holds our wrapper (copied by
        an import while we were installed), put the original back there on revert."""
        current = vars(owner).get(name)
        if current is patch.original:
            self.wrap(owner, name, wrapper)
        elif current is patch.wrapper and not any(p.owner is owner and p.name == name for p in self._patches):
            alias = MADE.patches[(id(owner), name)] = Patch(owner, name, patch.original, patch.wrapper)
            self._patches.append(alias)

    def replace(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        """Set ``owner.name`` to ``make(original)`` (an object standing in for it, not a
        function wrapper) unless ours is there; revert puts the original back, or leaves
        whatever was set after us.  A re-install sets the same object again."""
        with MADE.lock:
            current = vars(owner)[name]
            patch = MADE.patches.get((id(owner), name))
            if patch is not None and patch.active and current is patch.wrapper:
                return
            if patch is None or patch.owner is not owner or patch.original is not current:
                patch = MADE.patches[(id(owner), name)] = Patch(owner, name, current, make(current))
            patch.active = True
            setattr(owner, name, patch.wrapper)
            if patch not in self._patches:
                self._patches.append(patch)

    def revert(self) -> None:
        while self._patches:
            unwrap(self._patches.pop())

    def __iter__(self) -> Iterator[Patch]:
        return iter(list(self._patches))


def patch_set(name: str) -> PatchSet:
    """The patches target ``name`` has applied."""
    with MADE.lock:
        return MADE.sets.setdefault(name, PatchSet())
