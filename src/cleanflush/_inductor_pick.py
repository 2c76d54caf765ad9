"""Inductor's autotuning (max-autotune) as the pick rule sees it: its algorithm selection,
its generated kernels' configs, and their coordinate descent.

**Algorithm selection.** ``AlgorithmSelectorCache.autotune(name, input_nodes, layout,
input_gen_fns, choices, ...)`` times every choice and returns ``{choice: ms}``; ``__call__``
then keeps ``min(timings, key=timings.__getitem__)``, and ``lookup`` stores the timings in
Inductor's local autotune cache (torch 2.13, read in torch/_inductor/select_algorithm.py).  Its
own ``benchmark(choices, input_nodes, layout, input_gen_fns)`` makes the example inputs anew
and times any subset again (Inductor's feedback savers re-benchmark through it), so under
``stable`` the window is timed again there.  A collective decision (``is_collective``: every
rank times together) keeps Inductor's pick: timing again on one rank alone would wait for the
others.

**Generated kernels' configs.** ``CachingAutotuner.benchmark_all_configs(*args)`` times each
launcher with ``bench(launcher, *args)`` and returns ``{launcher: ms}``;
``autotune_to_one_config`` keeps the ``min()`` (torch/_inductor/runtime/triton_heuristics.py).
In torch 2.13 it also closes each losing static launcher as it goes
(``_close_static_launcher``), so under ``stable`` those closes wait until the rule has timed
the window again through ``bench``, and then close every launcher but the kept one.

Both return the kept choice at the fastest's time less a billionth: Inductor's ``min()``, and
every later lookup in its cache, keep it.  The measured timings go to the decision line
(``picked_for``).  A choice that fails when timed again keeps Inductor's pick, said once.

**Coordinate descent** (``coordinate_descent_tuning``, on in the max-autotune modes) walks from
the kept config to a neighbour whenever ``CoordescTuner.has_improvement`` says it is faster by
over 0.1%; under ``stable`` a step needs more than the floor, or than the timer's resolution
where that is larger (``_pick.resolution``).  Nothing is timed again there: the step's band is
not the measured noise.

``fastest`` changes nothing: each wrapper returns what it wrapped returned.
"""

from __future__ import annotations

import inspect
import math
import sys
from contextvars import ContextVar
from typing import Any

import wrapt

from . import _patching, _pick
from ._state import warn_once

NAME = "pick-inductor"  # its patches' key in STATE; not a flush target, so not in the registry
SELECT = "torch._inductor.select_algorithm"
HEURISTICS = "torch._inductor.runtime.triton_heuristics"
COORDESC = "torch._inductor.runtime.coordinate_descent_tuner"
HOOKS = (SELECT, HEURISTICS, COORDESC)
NEEDED = ("name", "input_nodes", "layout", "input_gen_fns", "choices")
NUDGE = 1e-9  # the kept choice's time under the fastest's: min() keeps it whatever the order
# a choice that fails when timed again (Inductor's own failures come back as inf; a compile or
# launch error is a RuntimeError), or a call it does not take: Inductor's own pick, said once
FAILURES = (RuntimeError, AssertionError, LookupError, TypeError, ValueError, OSError)

# The last decision the rule made, for its decision line (``_decisions``): Inductor hands its
# feedback savers the timings ``autotune`` returned, in the same call, and ``benchmark_all_configs``
# returns them to the decision recorder around it.
LAST: dict[str, Any] = {}
# While the window waits to be timed again: the launchers Inductor closed meanwhile (this context's)
_CLOSED_MEANWHILE: ContextVar[list[Any] | None] = ContextVar("cleanflush_closed_meanwhile", default=None)


def _autotune(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    timings = wrapped(*args, **kwargs)
    if _pick.current_pick() != _pick.STABLE or not isinstance(timings, dict) or len(timings) < 2:
        return timings
    try:
        call = inspect.signature(wrapped).bind(*args, **kwargs).arguments
    except TypeError:
        return timings
    if call.get("is_collective"):
        return timings
    hint = {"hint_override": call.get("hint_override")} if "hint_override" in _parameters(instance.benchmark) else {}

    def time_again(choice: Any) -> float:
        inputs = (call["input_nodes"], call["layout"], call["input_gen_fns"])
        return _pick.ran(instance.benchmark([choice], *inputs, **hint).get(choice, math.inf), choice)

    return _keep(timings, call["choices"], time_again, call["name"])


def _benchmark_all_configs(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if _pick.current_pick() != _pick.STABLE:
        return wrapped(*args, **kwargs)
    order = list(getattr(instance, "launchers", None) or [])
    closed: list[Any] = []
    kept: Any = None
    try:
        waiting = _CLOSED_MEANWHILE.set(closed)
        try:
            kept = timings = wrapped(*args, **kwargs)
        finally:
            _CLOSED_MEANWHILE.reset(waiting)
        if isinstance(timings, dict) and len(timings) > 1:

            def time_again(launcher: Any) -> float:
                return _pick.ran(instance.bench(launcher, *args, **kwargs), getattr(launcher, "config", launcher))

            name = (getattr(instance, "inductor_meta", None) or {}).get("kernel_name", "an Inductor kernel")
            kept = _keep(timings, order, time_again, str(name))
            instance.reset_to_zero_args(*args, **kwargs)  # as the sweep leaves them for the call that follows
    finally:  # every launcher Inductor closed meanwhile but the kept one, also on a failure
        winner = min(kept, key=kept.__getitem__) if isinstance(kept, dict) and kept else None
        for launcher in closed:
            if launcher is not winner:
                instance._close_static_launcher(launcher)
    return kept


def _close_static_launcher(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    closed = _CLOSED_MEANWHILE.get()
    if closed is None or len(args) != 1:
        return wrapped(*args, **kwargs)
    closed.append(args[0])  # closed once the rule has kept its pick: it may be timed again first
    return None


def _has_improvement(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    better = wrapped(*args, **kwargs)
    if not better or _pick.current_pick() != _pick.STABLE or len(args) != 2 or kwargs:
        return better
    baseline, test = args
    return test < baseline * (1 - max(_pick.floor(), _pick.resolution((baseline, test), baseline)))


def _keep(timings: dict[Any, Any], order: list[Any], time_again: Any, name: str) -> dict[Any, Any]:
    """``timings`` with the stable pick at the fastest's time less a billionth; on a failure,
    ``timings`` as they are (said once)."""
    ms = {c: float(t) for c, t in timings.items()}
    try:
        picked = _pick.stable([c for c in order if c in timings], ms, time_again, _pick.floor())
    except FAILURES as exc:
        warn_once(f"pick:{name}", f"the stable pick of {name} kept Inductor's own pick ({exc!r})")
        return timings
    kept = dict(timings)
    if picked.winner is not picked.fastest:
        kept[picked.winner] = ms[picked.fastest] * (1 - NUDGE)
    LAST.clear()
    LAST.update(timings=kept, picked=picked)
    return kept


def _parameters(function: Any) -> set[str]:
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # no signature to read: nothing assumed
        return set()


def picked_for(timings: Any) -> _pick.Picked | None:
    """What the rule found for the timings a decision recorder was handed, or None."""
    return LAST.get("picked") if LAST.get("timings") is timings else None


def apply(module: Any = None) -> None:
    """Apply the pick rule to Inductor's autotuners loaded now (a post-import hook, or a
    re-install); each is left alone where it does not take what the rule needs."""
    patches = _patching.patch_set(NAME)
    select: Any = getattr(sys.modules.get(SELECT), "AlgorithmSelectorCache", None)
    method = vars(select).get("autotune") if select is not None else None
    if (
        method is not None
        and set(NEEDED) <= _parameters(method)
        and {"choices", "input_nodes"} <= _parameters(getattr(select, "benchmark", None))
    ):
        patches.wrap(select, "autotune", _autotune)
    kernels: Any = getattr(sys.modules.get(HEURISTICS), "CachingAutotuner", None)
    if kernels is not None and {"benchmark_all_configs", "bench", "reset_to_zero_args"} <= set(dir(kernels)):
        patches.wrap(kernels, "benchmark_all_configs", _benchmark_all_configs)
        if "_close_static_launcher" in vars(kernels):
            patches.wrap(kernels, "_close_static_launcher", _close_static_launcher)
    descent: Any = getattr(sys.modules.get(COORDESC), "CoordescTuner", None)
    if descent is not None and "has_improvement" in vars(descent):
        patches.wrap(descent, "has_improvement", _has_improvement)


def register() -> None:
    """At the first install: apply when each of Inductor's autotuners is imported."""
    for module in HOOKS:
        wrapt.register_post_import_hook(apply, module)


def revert() -> None:
    _patching.patch_set(NAME).revert()
    LAST.clear()
