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
  config's timing and the one kept (the fastest, or the stable rule's pick).
* Their coordinate descent (``CachingAutotuner.coordinate_descent_tuning``, on in the
  max-autotune modes), which walks on from that kept config: every config it timed and the
  one it kept, which is the one the kernel runs.

Under ``cleanflush audit`` (``CLEANFLUSH_AUDIT`` set too), a Triton pick served without tuning
(a preloaded table, Triton's disk cache, a library's table) goes to the audit's recorder
(``_audit.served``) instead, with its call.

Choices are named by what they are, not by per-process counters (``triton_mm_12``), so the
same choice can be matched across runs.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # 3.10's typing has no NotRequired; the annotations are strings at run time
    from typing_extensions import NotRequired

import wrapt

from . import _agree, _calls, _env, _patching, _tunercache
from ._inductor_pick import HEURISTICS, SELECT, agreed_in, picked_in
from ._labels import choice_label, launcher_label, shapes_key
from ._pick import current_pick
from ._policy import current_policy
from ._state import warn_once
from ._stats import ran
from ._tunercache import AUTOTUNER, TunerCache, cache_of, ms, op_name

NAME = "decisions"  # its patches' key in STATE; not a flush target, so not in the registry
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
    rule: NotRequired[str]  # the pick rule the process ran under
    rank: NotRequired[int]  # the rank of a distributed job that made it
    pick: NotRequired[dict[str, Any]]  # what the rule found (``_pick.Picked.line``)
    agreed: NotRequired[str]  # where the pick came from, where not from this process's own tuning


class Tuned(TypedDict):
    """A decision an autotuner made: the lines ``write`` appends, and those ab compares."""

    kind: str
    op: str
    key: str
    winner: str | None
    timings_ms: dict[str, float]
    failed_choices: NotRequired[list[str]]
    call: NotRequired[dict[str, str]]
    pick: NotRequired[dict[str, Any]]  # what the rule found (``_pick.Picked.line``)
    agreed: NotRequired[str]  # where the pick came from, where not from this process's own tuning


def write(decision: Tuned) -> None:
    """Append one decision to ``CLEANFLUSH_DECISIONS``; a failure is said once, never raised."""
    path = _env.decisions_path()
    if path is None:
        return
    line: dict[str, Any] = {"pid": os.getpid(), "policy": current_policy(), "rule": current_pick(), **decision}
    rank = _agree.rank()
    if rank is not None:
        line["rank"] = rank
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    except (OSError, TypeError, ValueError) as exc:  # a path that cannot be written, a value json refuses
        warn_once("decisions:write", f"could not record an autotuning decision in {path!r} ({exc})")


def _winner(timings_ms: dict[str, float]) -> str | None:
    """The fastest choice that ran (failed ones are timed inf, or NaN)."""
    timed = {label: t for label, t in timings_ms.items() if ran(t)}
    return min(timed, key=timed.__getitem__) if timed else None


def triton_decision(tuner: Any, key: Any, timings: dict[Any, Any], winner: Any) -> Tuned:
    found: Tuned = {
        "kind": "triton",
        "op": op_name(tuner),
        "key": repr(key),
        "timings_ms": {str(config): ms(t) for config, t in timings.items()},
        "winner": str(winner),
    }
    cache = getattr(tuner, "cache", None)
    if isinstance(cache, TunerCache):
        picked = cache.found.get(key)
        if picked is not None:
            found["pick"] = picked.line()
        if key in cache.agreed:
            found["agreed"] = cache.agreed[key]
    return found


# op -> its calls per key since the last time they were written: each lookup of a key is a call
# (Triton's ``run`` asks ``key in cache`` once a call, cached or not)
COUNTS: dict[str, Counter[str]] = {}


def _count(cache: TunerCache, key: Any) -> None:
    if _env.decisions_path() is not None:
        COUNTS.setdefault(cache.op, Counter())[repr(key)] += 1


def _counted_calls() -> None:
    """Append each autotuned kernel's calls per key since the last time to the decisions file
    (at exit; ab adds the lines of a run up)."""
    path = _env.decisions_path()
    for op, counts in list(COUNTS.items()):
        if counts and path is not None:
            try:
                with open(path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"kind": "calls", "op": op, "counts": dict(counts)}) + "\n")
            except OSError:  # the job is ending: the decisions stand without their counts
                return
    COUNTS.clear()


def _forget_parents_counts() -> None:
    # a forked child counts its own calls; its parent writes the ones made before the fork
    COUNTS.clear()


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
    cache = cache_of(instance)  # counting this kernel's calls from now on
    before = set(cache) if cache is not None else None
    timings_before = getattr(instance, "configs_timings", None)
    folder = _env.calls_folder()
    grids = None
    if folder is not None and callable(kwargs.get("grid")):  # what each config's grid is, for its record
        grids = _calls.GridRecorder(kwargs["grid"], _calls.config_names(instance))
        kwargs = {**kwargs, "grid": grids}
    # an in-place kernel's data as the autotuner timed it, before this call writes it
    kept = _calls.before_call(instance, args, kwargs) if folder is not None else None
    audit = _audit_watch(instance, cache, args, kwargs)
    result = wrapped(*args, **kwargs)

    def made() -> list[Tuned]:
        # a new key whose timings are new: it was benchmarked now (a key filled from Triton's
        # disk cache leaves the previous key's timings in place; nothing to record then); or a
        # new key whose pick was agreed elsewhere (another rank, the pick file), not tuned here;
        # under ``cleanflush audit``, a key served without tuning is the audit's, not a decision
        if cache is None or before is None:
            return []
        tuned = getattr(instance, "configs_timings", None) is not timings_before
        timings = dict(getattr(instance, "configs_timings", {}) or {}) if tuned else {}
        fresh = list(set(cache.data) - before)
        served = _audit_served(audit, fresh, kept or args, kwargs, grids, folder)
        new = [key for key in fresh if key not in served and (tuned or key in cache.agreed)]
        found = [triton_decision(instance, key, timings, cache.data[key]) for key in new]
        if folder is not None and _env.audit_path() is None:  # in an ab run: each decision's call, to price its picks
            for decision in found:
                if decision["timings_ms"]:
                    decision["call"] = _call_record(instance, kept or args, kwargs, grids, folder, decision)
                else:
                    decision["call"] = {"error": "it was not tuned in this process (its pick was agreed elsewhere)"}
        return found

    _record("triton", "a Triton autotuning decision", made)
    return result


def _audit_watch(tuner: Any, cache: TunerCache | None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Under ``cleanflush audit``: what its recorder (``_audit.served``) sees of a call before it runs."""
    if cache is None or _env.audit_path() is None or _env.calls_folder() is None:
        return None
    from ._audit import served

    try:
        return served.watch(tuner, cache, args, kwargs)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:  # a tuner of another layout: not audited
        warn_once("decisions:audit", f"could not see whether {cache.op} was served without tuning ({exc!r})")
        return None


def _audit_served(
    audit: Any, fresh: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any], grids: Any, folder: str | None
) -> set[Any]:
    """The keys the call was served without tuning (recorded by ``_audit.served``), under ``cleanflush audit``."""
    if audit is None or folder is None:
        return set()
    from ._audit import served

    return served.served(audit, fresh, args, kwargs, grids, folder)


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


def kernel_decision(tuner: Any, timings: dict[Any, Any], kind: str = "inductor-kernel") -> Tuned:
    meta = getattr(tuner, "inductor_meta", None) or {}
    name = meta.get("kernel_name") or getattr(getattr(tuner, "fn", None), "__name__", "?")
    labelled = {launcher_label(launcher): ms(t) for launcher, t in timings.items()}
    return {
        "kind": kind,
        "op": str(name),
        "key": str(getattr(tuner, "size_hints", "")),
        "timings_ms": labelled,
        "winner": _winner(labelled),
    }


def _benchmark_all_configs(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    timings = wrapped(*args, **kwargs)
    picked, agreed = picked_in(timings), agreed_in(timings)

    def decision() -> list[Tuned]:
        found = kernel_decision(instance, dict(timings))
        if picked is not None:
            found["pick"] = picked.line(launcher_label)
        if agreed is not None:
            found["agreed"] = agreed
        return [found]

    _record("kernel", "an Inductor kernel's autotuning", decision)
    return timings


def _coordinate_descent(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Where coordinate descent walked from the kernel's kept config: every config it timed
    (named as its tuner's cache names them) and the one it kept."""
    winner = wrapped(*args, **kwargs)

    def decision() -> list[Tuned]:
        if not getattr(winner.config, "found_by_coordesc", False):
            return []  # not tuned (a template, a fixed config): the kept config stands
        tuner = instance.coordesc_tuner
        hashable = sys.modules[type(tuner).__module__].triton_config_to_hashable

        def name(key: Any) -> str:
            return ", ".join(f"{field}: {value}" for field, value in key)

        timed = {name(k): t for k, t in tuner.cached_benchmark_results.items()}
        found = kernel_decision(instance, timed, "inductor-coordesc")
        found["winner"] = name(hashable(winner.config))
        return [found]

    _record("coordesc", "an Inductor kernel's coordinate descent", decision)
    return winner


def inductor_decision(timings: dict[Any, float], name: str, input_nodes: list[Any]) -> Tuned:
    labelled = {choice_label(choice): float(t) for choice, t in timings.items()}
    return {
        "kind": "inductor",
        "op": name,
        "key": shapes_key(input_nodes),
        "timings_ms": labelled,
        "winner": _winner(labelled),
    }


def _inductor_feedback(timings: Any, name: Any, input_nodes: Any, *rest: Any) -> None:
    picked, agreed = picked_in(timings), agreed_in(timings)

    def decision() -> list[Tuned]:
        found = inductor_decision(dict(timings), str(name), list(input_nodes))
        if picked is not None:
            found["pick"] = picked.line(choice_label)
        if agreed is not None:
            found["agreed"] = agreed
        return [found]

    _record("inductor", "an Inductor autotuning decision", decision)


# (module, class, method, wrapper): the methods whose calls make a decision
_WRAPS = (
    (AUTOTUNER, "Autotuner", "run", _autotuner_run),
    (HEURISTICS, "CachingAutotuner", "benchmark_all_configs", _benchmark_all_configs),
    (HEURISTICS, "CachingAutotuner", "coordinate_descent_tuning", _coordinate_descent),
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
    _tunercache.LOOKUPS.append(_count)
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
