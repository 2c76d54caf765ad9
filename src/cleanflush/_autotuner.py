"""Triton's ``Autotuner`` as cleanflush sees it: the pick rule (``_pick``) applied where it
stores its pick, and its cache counting calls for ``cleanflush ab`` (``_decisions``).

``Autotuner.run`` times each config with ``self._bench(*args, config=config, **kwargs)``, then
stores ``min(timings)`` with ``self.cache[key] = ...`` (``run`` and ``check_disk_cache``'s
``benchmark``, read at triton-lang/triton 0094017; the installed 3.0-3.9 alike).  So the hook
is two things: ``_bench`` wrapped, which notes each timing and the call while the rule is
``stable``, and the autotuner's cache dict wrapped (``TunerCache``), whose ``__setitem__``
applies the rule to the pick about to be stored.  Libraries' subclasses that override
``run`` keep both paths as long as they time through ``_bench`` and store in ``cache``.
A single config, or a key read from Triton's disk cache (``cache_results=True``: the
fastest of the timings the file holds, the same in every process that reads it): nothing
timed, so the autotuner's own pick stands.  ``fastest`` costs nothing:
``_bench`` checks the rule and returns.

A tuner with hooks (``restore_value``, ``reset_to_zero``, a pre- or post-hook) runs them
inside every config's timing; where configs are near, the stable rule has ``_bench`` time
them once more with nothing launched (``NotLaunched`` in the tuner's ``fn`` for that call),
and takes that off each timing (``_pick.stable``'s ``shared``).

Where the tuner times with Triton's own ``do_bench`` (its default), timings again are
``_pick.again_ms()`` long (``CLEANFLUSH_PICK_AGAIN_MS``; ``full``: as long as the sweep's): the
tuner's ``do_bench`` is that function at that length while the rule times, and the same
object after.  Shorter timings cut the rule's tuning time and widen its noise (docs/pick.md,
the measured trade).  A job's own benchmark function is called as the sweep called it.
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from collections.abc import Iterator, MutableMapping
from typing import Any

import wrapt

from . import _patching, _pick
from ._state import warn_once

NAME = "pick"  # its patches' key in STATE; not a flush target, so not in the registry
AUTOTUNER = "triton.runtime.autotuner"


def ms(value: Any) -> float:
    """A timing as the autotuner keeps it (a float, or [median, p20, p80])."""
    return float(value[0] if isinstance(value, (list, tuple)) else value)


def op_name(tuner: Any) -> str:
    """A Triton kernel's name, as decisions name it: its module and function."""
    fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"


class TunerCache(MutableMapping[Any, Any]):
    """An autotuner's cache, wrapped: it keeps the autotuner's own dict and reads and writes
    through it, so a reference the job took to that dict sees every key tuned after.

    It counts the calls of each key (Triton's ``run`` asks ``key in cache`` once a call,
    cached or not; its other reads are by ``[]``), and applies the stable rule as a pick is
    stored, from the timings ``_bench`` noted since the last one."""

    def __init__(self, found: dict[Any, Any], tuner: Any) -> None:
        self.data, self.tuner, self.op = found, tuner, op_name(tuner)
        self.calls = Counter[str]()
        self.timed: dict[Any, Any] = {}  # config -> its timing, since the last pick stored
        self.call: tuple[tuple[Any, ...], dict[str, Any]] | None = None  # what those timings ran
        self.timing_again = False
        self.picked: dict[Any, _pick.Picked] = {}  # key -> what the stable rule found

    def __contains__(self, key: object) -> bool:
        self.calls[repr(key)] += 1
        return key in self.data

    def __getitem__(self, key: Any) -> Any:
        return self.data[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        timed, call = self.timed, self.call
        self.timed, self.call = {}, None  # the call's tensors are not kept past its pick
        if call is not None and len(timed) > 1 and _pick.current_pick() == _pick.STABLE:
            value = self._stable(key, value, timed, call)
        self.data[key] = value

    def __delitem__(self, key: Any) -> None:
        del self.data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def _stable(self, key: Any, own: Any, timed: dict[Any, Any], call: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
        """The stable pick for ``key``, or ``own`` (the autotuner's) where it cannot be made."""
        args, kwargs = call
        bench = vars(self.tuner).get("do_bench")  # what the sweep timed with (triton 3.1 on)
        shorter = shorter_bench(bench, _pick.again_ms())

        def time_again(config: Any) -> float:
            self.timing_again = True
            if shorter is not None:
                vars(self.tuner)["do_bench"] = shorter
            try:
                return _pick.ran(ms(self.tuner._bench(*args, config=config, **kwargs)), config)
            finally:
                self.timing_again = False
                if shorter is not None:
                    vars(self.tuner)["do_bench"] = bench

        def hooks_ms() -> float:
            # the tuner's hooks run inside every config's timing: timed alone by its own
            # _bench and flush, with a config of no hook of its own and nothing launched
            plain = next((c for c in timings if getattr(c, "pre_hook", None) is None), None)
            if plain is None or not has_hooks(self.tuner) or "fn" not in vars(self.tuner):
                return 0.0
            kernel = self.tuner.fn
            self.tuner.fn = NOT_LAUNCHED
            try:
                return time_again(plain)
            finally:
                self.tuner.fn = kernel

        timings = {config: ms(t) for config, t in timed.items()}
        if own not in timings or timings[own] != min(_pick.finite(timings).values(), default=None):
            return own  # a subclass that picks by a rule of its own: its pick stands
        try:
            found = _pick.stable(list(timings), timings, time_again, _pick.floor(), shared=hooks_ms)
        # a config, or the tuner's hooks alone, failing when timed again (Triton's own failures
        # come back as inf; a launch or CUDA error is a RuntimeError): the autotuner's own pick
        except Exception as exc:  # a job's hook may raise anything: its tuning goes on, said once
            warn_once(
                f"pick:{self.op}",
                f"the stable pick of {self.op} kept the autotuner's own pick: timing again raised {exc!r}",
            )
            return own
        self.picked[key] = found
        return found.winner


def shorter_bench(bench: Any, again_ms: float | None) -> Any:
    """Triton's own ``do_bench`` timing ``again_ms`` (a fifth of it warm-up, as do_bench's own
    25 and 100), where ``bench`` (what the tuner timed its sweep with) is that function; None
    where ``again_ms`` is None, or for any other function (a job's own benchmark function,
    or the deprecated ``warmup``/``rep`` arguments' wrapper, keeps its length)."""
    testing = sys.modules.get("triton.testing")
    stock = getattr(testing, "do_bench", None)
    if again_ms is None or bench is None or stock is None:
        return None
    if bench is not stock and bench is not getattr(stock, "__wrapped__", None):
        return None
    return functools.partial(bench, warmup=again_ms / 5, rep=again_ms)


class NotLaunched:
    """A kernel that launches nothing: ``_bench`` with it in the tuner's place times the hooks alone."""

    def run(self, *args: Any, **kwargs: Any) -> None:
        return None


NOT_LAUNCHED = NotLaunched()
# the lists of arguments a tuner restores or zeroes around each timing (names from triton
# 3.2 on, positions before), and the flags 3.2 on sets for a pre- or post-hook of the job's
HOOK_LISTS = ("restore_value", "reset_to_zero", "restore_idx", "reset_idx")
HOOK_FLAGS = ("user_defined_pre_hook", "user_defined_post_hook")


def has_hooks(tuner: Any) -> bool:
    """Whether each of the tuner's timings runs hooks of the tuner's around the kernel."""
    return any(getattr(tuner, name, None) for name in HOOK_LISTS) or any(
        getattr(tuner, name, False) is True for name in HOOK_FLAGS
    )


def cache_of(tuner: Any) -> TunerCache | None:
    """The tuner's cache as a ``TunerCache`` (wrapped now if it is a plain dict), or None
    where it is something else (a subclass's own mapping: left alone)."""
    cache = getattr(tuner, "cache", None)
    if type(cache) is dict:
        cache = tuner.cache = TunerCache(cache, tuner)
        WRAPPED.append(cache)
    return cache if isinstance(cache, TunerCache) else None


WRAPPED: list[TunerCache] = []  # every cache wrapped in this process, put back at uninstall


def _bench(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = wrapped(*args, **kwargs)
    if _pick.current_pick() != _pick.STABLE:
        return result
    cache = cache_of(instance)
    if cache is not None and not cache.timing_again and "config" in kwargs:
        cache.timed[kwargs["config"]] = result
        cache.call = (args, {k: v for k, v in kwargs.items() if k != "config"})
    return result


def apply(module: Any = None) -> None:
    """Apply the pick rule to the Triton autotuner loaded now (a post-import hook, or a re-install)."""
    cls = getattr(sys.modules.get(AUTOTUNER), "Autotuner", None)
    if cls is not None and "_bench" in vars(cls):
        _patching.patch_set(NAME).wrap(cls, "_bench", _bench)


def register() -> None:
    """At the first install: apply when Triton's autotuner is imported."""
    wrapt.register_post_import_hook(apply, AUTOTUNER)


def revert() -> None:
    """Unwrap ``_bench`` and give every autotuner its own cache dict back."""
    _patching.patch_set(NAME).revert()
    for cache in WRAPPED:
        if getattr(cache.tuner, "cache", None) is cache:
            cache.tuner.cache = cache.data
    WRAPPED.clear()
