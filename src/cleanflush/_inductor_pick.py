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

Both return the kept choice at the fastest's time less a billionth, as a ``Kept`` dict that
also carries the rule's ``Picked``: Inductor's ``min()``, and every later lookup in its cache,
keep the choice, and the decision recorder around them reads the pick off the value it is
handed (``picked_in``).  A choice that fails when timed again keeps Inductor's pick, said once.

**Coordinate descent** (``coordinate_descent_tuning``, on in the max-autotune modes) walks from
the kept config to a neighbour whenever ``CoordescTuner.has_improvement`` says it is faster by
over 0.1%; under a rule that ``descends_beyond_floor`` a step needs more than the floor, or than
the timer's resolution where that is larger (``_pick.resolution``).  Nothing is timed again
there: the step's band is not the measured noise.

A rule that does not choose (``fastest``) changes nothing: each wrapper returns what it wrapped
returned.
"""

from __future__ import annotations

import inspect
import math
import sys
from contextvars import ContextVar
from typing import Any

import wrapt

from . import _agree, _patching, _pick
from ._labels import choice_label, launcher_label, shapes_key
from ._policy import current_policy

NAME = "pick-inductor"  # its patches' key in STATE; not a flush target, so not in the registry
SELECT = "torch._inductor.select_algorithm"
HEURISTICS = "torch._inductor.runtime.triton_heuristics"
COORDESC = "torch._inductor.runtime.coordinate_descent_tuner"
HOOKS = (SELECT, HEURISTICS, COORDESC)
NEEDED = ("name", "input_nodes", "layout", "input_gen_fns", "choices")
NUDGE = 1e-9  # the kept choice's time under the fastest's: min() keeps it whatever the order


class Kept(dict[Any, Any]):
    """The timings Inductor is handed back, and what the rule found beside them: Inductor hands
    its feedback savers the timings ``autotune`` returned, and ``benchmark_all_configs`` returns
    them to the decision recorder around it."""

    picked: _pick.Picked[Any] | None = None  # what the rule found
    agreed: str | None = None  # where the kept choice came from, where not from this process's tuning


def picked_in(timings: Any) -> _pick.Picked[Any] | None:
    """What the rule found for the timings a decision recorder was handed, or None."""
    return timings.picked if isinstance(timings, Kept) else None


def agreed_in(timings: Any) -> str | None:
    """Where the kept choice came from, where another rank or run chose it, or None."""
    return timings.agreed if isinstance(timings, Kept) else None


# While the window waits to be timed again: the launchers Inductor closed meanwhile (this context's)
_CLOSED_MEANWHILE: ContextVar[list[Any] | None] = ContextVar("cleanflush_closed_meanwhile", default=None)


def _autotune(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    timings = wrapped(*args, **kwargs)
    rule = _pick.current_rule()
    chooses = rule.choose is not None
    if not isinstance(timings, dict) or len(timings) < 2 or not (chooses or _agree.active(chooses)):
        return timings
    try:
        call = inspect.signature(wrapped).bind(*args, **kwargs).arguments
    except TypeError:  # a call this layout does not take: Inductor's own pick
        return timings
    if chooses and not call.get("is_collective"):
        hint = (
            {"hint_override": call.get("hint_override")} if "hint_override" in _parameters(instance.benchmark) else {}
        )

        def time_again(choice: Any) -> float:
            inputs = (call["input_nodes"], call["layout"], call["input_gen_fns"])
            return _pick.again(instance.benchmark([choice], *inputs, **hint).get(choice, math.inf), choice)

        timings = _keep(rule, timings, call["choices"], time_again, call["name"])
    if not _agree.active(chooses):
        return timings
    configs = tuple(choice_label(c) for c in call["choices"])
    decision = _agree.Decision("inductor", str(call["name"]), shapes_key(call["input_nodes"]), configs)
    return _agreed(timings, decision, choice_label, rule)


def _benchmark_all_configs(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rule = _pick.current_rule()
    chooses = rule.choose is not None
    agreeing = _agree.active(chooses)
    if not chooses and not agreeing:
        return wrapped(*args, **kwargs)
    order = list(getattr(instance, "launchers", None) or [])
    decision = kernel_decision(instance, order)
    found = (_agree.in_file(decision, _agree.here()) or _agree.published(decision, chooses)) if agreeing else None
    taken = next((one for one in order if launcher_label(one) == found.pick), None) if found else None
    if found is not None and taken is not None:  # agreed elsewhere: nothing tuned here
        return _taken(instance, order, taken, found)
    closed: list[Any] = []
    kept: Any = None
    try:
        waiting = _CLOSED_MEANWHILE.set(closed)
        try:
            kept = timings = wrapped(*args, **kwargs)
        finally:
            _CLOSED_MEANWHILE.reset(waiting)
        if isinstance(timings, dict) and len(timings) > 1 and chooses:

            def time_again(launcher: Any) -> float:
                return _pick.again(instance.bench(launcher, *args, **kwargs), getattr(launcher, "config", launcher))

            kept = _keep(rule, timings, order, time_again, decision.op)
            instance.reset_to_zero_args(*args, **kwargs)  # as the sweep leaves them for the call that follows
        if isinstance(kept, dict) and len(kept) > 1 and agreeing:
            kept = _agreed(kept, decision, launcher_label, rule)
    finally:  # every launcher Inductor closed meanwhile but the kept one, also on a failure
        winner = min(kept, key=kept.__getitem__) if isinstance(kept, dict) and kept else None
        for launcher in closed:
            if launcher is not winner:
                instance._close_static_launcher(launcher)
    return kept


def kernel_decision(instance: Any, launchers: list[Any]) -> _agree.Decision:
    """An Inductor kernel's choice among its configs, as ranks and runs agree on it."""
    name = (getattr(instance, "inductor_meta", None) or {}).get("kernel_name", "an Inductor kernel")
    configs = tuple(launcher_label(one) for one in launchers)
    key = str(getattr(instance, "size_hints", ""))
    return _agree.Decision("inductor-kernel", str(name), key, configs, _agree.kernel_hash(instance))


def _taken(instance: Any, order: list[Any], taken: Any, found: _agree.Agreed) -> Kept:
    """A kernel's configs not tuned: the one agreed elsewhere is kept, every other closed as
    Inductor closes the losers it timed."""
    close = getattr(instance, "_close_static_launcher", None)
    for launcher in order:
        if launcher is not taken and callable(close):
            close(launcher)
    kept = Kept({taken: found.ms if found.ms is not None else 0.0})
    kept.agreed = found.source
    return kept


def _agreed(timings: dict[Any, Any], decision: _agree.Decision, label: Any, rule: _pick.Rule) -> dict[Any, Any]:
    """``timings`` with the pick agreed for ``decision`` (the pick file's, or the one published
    first by any rank) at the fastest's time less a billionth; this process's pick is published,
    and kept in the pick file."""
    chooses = rule.choose is not None
    ms = {c: float(t) for c, t in timings.items()}
    own = min(ms, key=ms.__getitem__)
    found = _agree.in_file(decision, _agree.here()) or _agree.publish(decision, label(own), ms[own], chooses)
    taken = next((c for c in ms if label(c) == found.pick), None) if found is not None else None
    kept = Kept(timings)
    kept.picked = picked_in(timings)
    if found is not None and taken is not None and taken is not own:
        kept[taken] = ms[own] * (1 - NUDGE)
    if found is not None and taken is not None:
        kept.agreed = found.source
    elif found is not None:  # a value written by hand: this process's own pick stands
        _agree.not_offered(decision, found)
    if kept.agreed != _agree.FROM_FILE:
        final = min(kept, key=kept.__getitem__)
        timed = {label(c): t for c, t in ms.items()}
        _agree.write(_agree.entry(decision, label(final), rule.name, current_policy(), timed))
    return kept


def _close_static_launcher(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    closed = _CLOSED_MEANWHILE.get()
    if closed is None or len(args) != 1:
        return wrapped(*args, **kwargs)
    closed.append(args[0])  # closed once the rule has kept its pick: it may be timed again first
    return None


def _has_improvement(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    better = wrapped(*args, **kwargs)
    if not better or not _pick.current_rule().descends_beyond_floor or len(args) != 2 or kwargs:
        return better
    baseline, test = args
    return test < baseline * (1 - _pick.least(_pick.floor(), _pick.resolution((baseline, test), baseline)))


def _keep(rule: _pick.Rule, timings: dict[Any, Any], order: list[Any], time_again: Any, name: str) -> dict[Any, Any]:
    """``timings`` with the rule's pick at the fastest's time less a billionth, as a ``Kept``
    carrying the pick; on a failure, ``timings`` as they are (said once)."""
    ms = {c: float(t) for c, t in timings.items()}
    picked = _pick.choose(rule, [c for c in order if c in timings], ms, time_again, name)
    if picked is None:
        return timings
    kept = Kept(timings)
    if picked.winner is not picked.fastest:
        kept[picked.winner] = ms[picked.fastest] * (1 - NUDGE)
    kept.picked = picked
    return kept


def _parameters(function: Any) -> set[str]:
    try:
        return set(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # no signature to read: nothing assumed
        return set()


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
