"""Inductor's algorithm selection (max-autotune) as the pick rule sees it.

``AlgorithmSelectorCache.autotune(name, input_nodes, layout, input_gen_fns, choices, ...)``
times every choice and returns ``{choice: ms}``; ``__call__`` then keeps
``min(timings, key=timings.__getitem__)``, and ``lookup`` stores the timings in Inductor's
local autotune cache (torch 2.13, read in torch/_inductor/select_algorithm.py).  Its own
``benchmark(choices, input_nodes, layout, input_gen_fns)`` makes the example inputs anew and
times any subset again (Inductor's feedback savers re-benchmark through it), so under
``stable`` the window is timed again there, and the kept choice is returned at the fastest's
time less a billionth: Inductor's ``min()``, and every later lookup in its cache, keep it.
The measured timings stay in the decision line (``pick``).  ``fastest`` returns at once.

A collective decision (``is_collective``: every rank times together) keeps Inductor's pick:
timing again on one rank alone would wait for the others.  A choice that fails when timed
again keeps Inductor's pick, said once.  Inductor's generated kernels' configs
(``CachingAutotuner``) are not covered: it closes each losing launcher as it benchmarks.
"""

from __future__ import annotations

import inspect
import math
import sys
from typing import Any

import wrapt

from . import _patching, _pick
from ._state import warn_once

NAME = "pick-inductor"  # its patches' key in STATE; not a flush target, so not in the registry
SELECT = "torch._inductor.select_algorithm"
NEEDED = ("name", "input_nodes", "layout", "input_gen_fns", "choices")
NUDGE = 1e-9  # the kept choice's time under the fastest's: min() keeps it whatever the order

# The last decision the rule made, for its decision line (``_decisions``): Inductor hands its
# feedback savers the timings ``autotune`` returned, in the same call.
LAST: dict[str, Any] = {}


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
    choices = [c for c in call["choices"] if c in timings]
    hint = {"hint_override": call.get("hint_override")} if "hint_override" in _parameters(instance.benchmark) else {}

    def time_again(choice: Any) -> float:
        inputs = (call["input_nodes"], call["layout"], call["input_gen_fns"])
        found = instance.benchmark([choice], *inputs, **hint)
        again = float(found.get(choice, math.inf))
        if not math.isfinite(again):
            raise RuntimeError(f"{choice} failed when timed again")
        return again

    ms = {c: float(t) for c, t in timings.items()}
    try:
        picked = _pick.stable(choices, ms, time_again, _pick.floor())
    # a choice that fails when timed again (Inductor's own failures come back as inf; a
    # compile or launch error is a RuntimeError), or a call it does not take: its own pick,
    # said once, and the compile goes on
    except (RuntimeError, AssertionError, LookupError, TypeError, ValueError, OSError) as exc:
        warn_once(f"pick:{call['name']}", f"the stable pick of {call['name']} kept Inductor's own pick ({exc!r})")
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
    """What the rule found for the timings a feedback saver was handed, or None."""
    return LAST.get("picked") if LAST.get("timings") is timings else None


def apply(module: Any = None) -> None:
    """Apply the pick rule to Inductor's algorithm selection loaded now (a post-import hook,
    or a re-install); left alone where ``autotune`` does not take what the rule needs."""
    cls: Any = getattr(sys.modules.get(SELECT), "AlgorithmSelectorCache", None)
    method = vars(cls).get("autotune") if cls is not None else None
    if method is None or not hasattr(cls, "benchmark"):
        return
    if not set(NEEDED) <= _parameters(method) or not {"choices", "input_nodes"} <= _parameters(cls.benchmark):
        return
    _patching.patch_set(NAME).wrap(cls, "autotune", _autotune)


def register() -> None:
    """At the first install: apply when Inductor's algorithm selection is imported."""
    wrapt.register_post_import_hook(apply, SELECT)


def revert() -> None:
    _patching.patch_set(NAME).revert()
    LAST.clear()
