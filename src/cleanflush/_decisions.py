"""Autotuning decisions, recorded for ``cleanflush ab``: not a flush target.

Active only while ``CLEANFLUSH_DECISIONS`` names a file (``cleanflush ab`` sets it for each
run of the user's command; children inherit it). Each decision is appended to that file as
one JSON line when it is made, in whichever process makes it:

* Triton's ``Autotuner.run``: after a call that benchmarked (a new key in its cache), the
  key, every config's timing and the winner.
* Inductor's algorithm selection (max-autotune): a feedback saver registered with
  ``select_algorithm.add_feedback_saver`` gets every choice's timing per op and input shape;
  the winner is the fastest, as Inductor picks it.
* Inductor's own kernels (``CachingAutotuner.benchmark_all_configs``: the configs of each
  generated Triton kernel, such as the reduction a one-row ``F.linear`` lowers to, which
  never reaches algorithm selection on torch 2.11): per kernel and size hints, every
  config's timing and the fastest.

Choices are named by what they are, not by per-process counters (``triton_mm_12``), so the
same choice can be matched across runs.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # 3.10's typing has no NotRequired; the annotations are strings at run time
    from typing_extensions import NotRequired

import wrapt

from . import _calls, _env, _patching
from ._policy import current_policy
from ._state import warn_once

NAME = "decisions"  # its patches' key in STATE; not a flush target, so not in the registry
AUTOTUNER = "triton.runtime.autotuner"
SELECT = "torch._inductor.select_algorithm"
HEURISTICS = "torch._inductor.runtime.triton_heuristics"
HOOKS = (AUTOTUNER, SELECT, HEURISTICS)


class DecisionLine(TypedDict):
    """A line of ``CLEANFLUSH_DECISIONS``: a decision, or (``kind`` "calls") how many calls an
    autotuned kernel got per key.  ``cleanflush ab`` reads them (``_ab``)."""

    kind: str
    op: str
    key: NotRequired[str]
    winner: NotRequired[str | None]
    timings_ms: NotRequired[dict[str, float]]
    failed_choices: NotRequired[list[str]]
    call: NotRequired[dict[str, str]]  # the recorded call's file, or why there is none
    counts: NotRequired[dict[str, int]]
    pid: NotRequired[int]
    policy: NotRequired[str]


class Tuned(TypedDict):
    """A decision an autotuner made: the lines ``write`` appends, and those ab compares."""

    kind: str
    op: str
    key: str
    winner: str | None
    timings_ms: dict[str, float]
    failed_choices: NotRequired[list[str]]
    call: NotRequired[dict[str, str]]


def write(decision: Tuned) -> None:
    """Append one decision to ``CLEANFLUSH_DECISIONS``; a failure is said once, never raised."""
    path = _env.decisions_path()
    if path is None:
        return
    line = {"pid": os.getpid(), "policy": current_policy(), **decision}
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    except (OSError, TypeError, ValueError) as exc:  # a path that cannot be written, a value json refuses
        warn_once("decisions:write", f"could not record an autotuning decision in {path!r} ({exc})")


def _winner(timings_ms: dict[str, float]) -> str | None:
    """The fastest choice that ran (failed ones are timed inf, or NaN)."""
    finite = {label: t for label, t in timings_ms.items() if t == t and t != float("inf")}
    return min(finite, key=finite.__getitem__) if finite else None


def _ms(value: Any) -> float:
    """A timing as the autotuner keeps it (a float, or [median, p20, p80])."""
    return float(value[0] if isinstance(value, (list, tuple)) else value)


def _op(tuner: Any) -> str:
    """A Triton kernel's name, as decisions name it: its module and function."""
    fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"


def triton_decision(tuner: Any, key: Any, timings: dict[Any, Any], winner: Any) -> Tuned:
    return {
        "kind": "triton",
        "op": _op(tuner),
        "key": repr(key),
        "timings_ms": {str(config): _ms(t) for config, t in timings.items()},
        "winner": str(winner),
    }


class CountedCache(MutableMapping[Any, Any]):
    """An autotuner's cache that counts the calls of each key: Triton's ``Autotuner.run`` asks
    ``key in cache`` once a call, cached or not (its other reads are by ``[]``).  It keeps the
    autotuner's own dict and reads and writes through it, so a reference the job took to that
    dict sees every key tuned after."""

    def __init__(self, found: dict[Any, Any], op: str) -> None:
        self.data, self.op, self.calls = found, op, Counter[str]()
        _COUNTED.append(self)

    def __contains__(self, key: object) -> bool:
        self.calls[repr(key)] += 1
        return key in self.data

    def __getitem__(self, key: Any) -> Any:
        return self.data[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.data[key] = value

    def __delitem__(self, key: Any) -> None:
        del self.data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)


_COUNTED: list[CountedCache] = []  # the caches counting in this process, written at its exit


def _counted_calls() -> None:
    """Append each autotuned kernel's calls per key since the last time to the decisions file
    (at exit; ab adds the lines of a run up)."""
    path = _env.decisions_path()
    for cache in _COUNTED:
        if cache.calls and path is not None:
            try:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"kind": "calls", "op": cache.op, "counts": dict(cache.calls)}) + "\n")
            except OSError:  # the job is ending: the decisions stand without their counts
                return
            cache.calls.clear()


def _forget_parents_counts() -> None:
    # a forked child counts its own calls; its parent writes the ones made before the fork
    for cache in _COUNTED:
        cache.calls.clear()


os.register_at_fork(after_in_child=_forget_parents_counts)


def _write_counts_at_worker_end(_: object = None) -> None:
    """In a multiprocessing worker (fork, forkserver or spawn), which ends with ``os._exit``
    after multiprocessing's own finalizers, never atexit's: write the counts from one."""
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _counted_calls, exitpriority=0)


def _count_in_workers() -> None:
    """Have every multiprocessing worker started from now on write its counts at its end.
    A worker's finalizers are cleared as it starts, and its after-fork hooks run then: one of
    those registers the finalizer (in spawned workers too, where this runs as they load)."""
    import multiprocessing
    import multiprocessing.util

    # keyed by the function itself (the registry holds its key weakly; a function lives on)
    multiprocessing.util.register_after_fork(_write_counts_at_worker_end, _write_counts_at_worker_end)
    if multiprocessing.parent_process() is not None:  # loaded in a worker already running its target
        _write_counts_at_worker_end()


def _autotuner_run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    cache = getattr(instance, "cache", None)
    if type(cache) is dict:  # count this kernel's calls from now on
        cache = instance.cache = CountedCache(cache, _op(instance))
    before = set(cache) if isinstance(cache, (dict, CountedCache)) else None
    timings_before = getattr(instance, "configs_timings", None)
    folder = _env.calls_folder()
    grids = None
    if folder is not None and callable(kwargs.get("grid")):  # what each config's grid is, for its record
        grids = _calls.GridRecorder(kwargs["grid"], _calls.config_names(instance))
        kwargs = {**kwargs, "grid": grids}
    # an in-place kernel's data as the autotuner timed it, before this call writes it
    kept = _calls.before_call(instance, args, kwargs) if folder is not None else None
    result = wrapped(*args, **kwargs)

    def made() -> list[Tuned]:
        # a new key whose timings are new: it was benchmarked now (a key filled from Triton's
        # disk cache leaves the previous key's timings in place; nothing to record then)
        if before is None or getattr(instance, "configs_timings", None) is timings_before:
            return []
        timings = dict(getattr(instance, "configs_timings", {}) or {})
        found = [triton_decision(instance, key, timings, instance.cache[key]) for key in set(instance.cache) - before]
        if folder is not None:  # in an ab run: each decision's call, recorded to price its picks
            for decision in found:
                decision["call"] = _call_record(instance, kept or args, kwargs, grids, folder, decision)
        return found

    _record("triton", "a Triton autotuning decision", made)
    return result


def _call_record(
    tuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], grids: Any, folder: str, decision: Tuned
) -> dict[str, str]:
    """Where the call that made ``decision`` is recorded (in ``cleanflush ab``'s ``folder``), or why it is not."""
    name = _calls.file_for(decision["op"], decision["key"])
    timed = list(dict(getattr(tuner, "configs_timings", {}) or {}))
    why = _calls.record(tuner, args, kwargs, grids, timed, os.path.join(folder, name))
    return {"file": name} if why is None else {"error": why}


def _record(kind: str, what: str, made: Callable[[], list[Tuned]]) -> None:
    """Write the decisions ``made()`` reads off an autotuner; where it cannot read them (an
    autotuner of another layout) say so once, and let the job run on."""
    try:
        decisions = made()
    except Exception as exc:  # an autotuner of another layout: said once, the job runs on unrecorded
        warn_once(f"decisions:{kind}", f"could not read {what} ({exc!r})")
        return
    for decision in decisions:
        write(decision)


def kernel_decision(tuner: Any, timings: dict[Any, Any]) -> Tuned:
    meta = getattr(tuner, "inductor_meta", None) or {}
    name = meta.get("kernel_name") or getattr(getattr(tuner, "fn", None), "__name__", "?")
    labelled = {str(getattr(launcher, "config", launcher)): _ms(t) for launcher, t in timings.items()}
    return {
        "kind": "inductor-kernel",
        "op": str(name),
        "key": str(getattr(tuner, "size_hints", "")),
        "timings_ms": labelled,
        "winner": _winner(labelled),
    }


def _benchmark_all_configs(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    timings = wrapped(*args, **kwargs)
    _record("kernel", "an Inductor kernel's autotuning", lambda: [kernel_decision(instance, dict(timings))])
    return timings


def choice_label(choice: Any) -> str:
    """A name for a choice that is the same in every process: its kind, without Inductor's
    running index, and its description (the config)."""
    name = re.sub(r"_\d+$", "", str(getattr(choice, "name", type(choice).__name__)))
    description = str(getattr(choice, "description", "") or "")
    return f"{name} {description}".strip()


def _shape(node: Any) -> str:
    try:
        return f"{'x'.join(str(s) for s in node.get_size())} {node.get_dtype()}".replace("torch.", "")
    except (AttributeError, TypeError, NotImplementedError):  # a node without a size or dtype: named by its kind
        return type(node).__name__


def inductor_decision(timings: dict[Any, float], name: str, input_nodes: list[Any]) -> Tuned:
    labelled = {choice_label(choice): float(t) for choice, t in timings.items()}
    return {
        "kind": "inductor",
        "op": name,
        "key": ", ".join(_shape(n) for n in input_nodes),
        "timings_ms": labelled,
        "winner": _winner(labelled),
    }


def _inductor_feedback(timings: Any, name: Any, input_nodes: Any, *rest: Any) -> None:
    decision = lambda: [inductor_decision(dict(timings), str(name), list(input_nodes))]  # noqa: E731
    _record("inductor", "an Inductor autotuning decision", decision)


# (module, class, method, wrapper): the methods whose calls make a decision
_WRAPS = (
    (AUTOTUNER, "Autotuner", "run", _autotuner_run),
    (HEURISTICS, "CachingAutotuner", "benchmark_all_configs", _benchmark_all_configs),
)


def apply(module: Any = None) -> None:
    """Record decisions from every autotuner loaded now (a post-import hook, or a re-install)."""
    if _env.decisions_path() is None:
        return
    patches = _patching.patch_set(NAME)
    for module_name, cls_name, method, wrapper in _WRAPS:
        cls = getattr(sys.modules.get(module_name), cls_name, None)
        if cls is not None and method in vars(cls):
            patches.wrap(cls, method, wrapper)
    select: Any = sys.modules.get(SELECT)
    cache: Any = select.get_algorithm_selector_cache() if hasattr(select, "get_algorithm_selector_cache") else None
    if hasattr(cache, "add_feedback_saver") and _inductor_feedback not in _savers(cache):
        cache.add_feedback_saver(_inductor_feedback)


def _savers(cache: Any) -> list[Any]:
    fns = getattr(cache, "feedback_saver_fns", None)
    return fns if isinstance(fns, list) else []


def register() -> None:
    """At the first install: record from each autotuner module when it is imported (while
    ``CLEANFLUSH_DECISIONS`` is set then), and each kernel's calls when the process ends."""
    for module in HOOKS:
        wrapt.register_post_import_hook(apply, module)
    atexit.register(_counted_calls)
    if _env.decisions_path() is not None:  # an ab run: workers' counts too
        _count_in_workers()


def revert() -> None:
    _patching.patch_set(NAME).revert()
    select: Any = sys.modules.get(SELECT)
    if hasattr(select, "get_algorithm_selector_cache"):
        fns = _savers(select.get_algorithm_selector_cache())
        if _inductor_feedback in fns:
            fns.remove(_inductor_feedback)
