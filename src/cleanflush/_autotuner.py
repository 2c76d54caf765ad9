"""The pick rule (``_pick``) on Triton's ``Autotuner``, through its cache (``_tunercache``).

``Autotuner.run`` times each config with ``self._bench(*args, config=config, **kwargs)`` and
stores ``min(timings)`` in its cache (triton-lang/triton 0094017; the installed 3.0-3.9 alike).
So the hook is ``_bench`` wrapped, which notes each timing (and the call, where the rule times
again) while a rule that chooses is selected, and a store hook on the cache that applies the
rule to the pick about to be stored.  A lookup that misses starts a new sweep: what an earlier
sweep that raised noted is dropped.  Libraries' subclasses that override ``run`` keep both paths
as long as they time through ``_bench`` and store in ``cache``.  A single config, or a key read
from Triton's disk cache (``cache_results=True``): nothing timed, so nothing to choose among.
A pick agreed elsewhere (another rank, the pick file) is stored at the lookup where it is one of
the tuner's configs; where a pruner makes configs of its own, ``prune_configs`` hands the tuner
that config alone, so the key is not tuned again.
Under a rule that changes picks, the disk cache is written with the kept config at the
fastest's time less a billionth, so every process that reads the file keeps the writer's pick.
``fastest`` costs nothing: ``_bench`` asks the rule and returns.

A tuner with hooks (``restore_value``, ``reset_to_zero``, a pre- or post-hook) runs them
inside every config's timing; where configs are near, the rule has ``_bench`` time them once
more with nothing launched (``NotLaunched`` in the tuner's ``fn`` for that call), and takes that
off each timing (``_pick.stable``'s ``shared``).

Where the tuner times with Triton's own ``do_bench`` (its default), timings again are
``_pick.again_ms()`` long: the tuner's ``do_bench`` is that function at that length while the
rule times, and the same object after.  A job's own benchmark function is called as the sweep
called it.
"""

from __future__ import annotations

import functools
import inspect
import sys
from dataclasses import dataclass, field
from typing import Any

import wrapt

from . import _agree, _patching, _pick, _tunercache
from ._policy import current_policy
from ._tunercache import AUTOTUNER, TunerCache, cache_of, ms

NAME = "pick"  # its patches' key in STATE; not a flush target, so not in the registry
NUDGE = 1e-9  # the kept config's time under the fastest's, in a disk cache: min() keeps it


@dataclass
class Sweep:
    """What one tuner's sweep timed since its last pick was stored (the rule's own state)."""

    timed: dict[Any, Any] = field(default_factory=dict)  # config -> its timing
    call: tuple[tuple[Any, ...], dict[str, Any]] | None = None  # what those timings ran
    timing_again: bool = False  # the rule's own timings are not the sweep's
    wanted: str | None = None  # a pick agreed elsewhere that none of the tuner's own configs is
    offered: list[Any] = field(default_factory=list)  # the pruner's config that is that pick


# id of a tuner's cache -> its sweep (every wrapped cache lives until uninstall: ids stay its own)
SWEEPS: dict[int, Sweep] = {}


def _on_lookup(cache: TunerCache, key: Any) -> None:
    """A key missing from the cache: the sweep about to run is new, unless a pick agreed
    elsewhere (another rank, an earlier run) is found for it: then it is stored, and nothing
    is tuned."""
    if key in cache.data:
        return
    SWEEPS.pop(id(cache), None)
    rule = _pick.current_rule()
    if not _agree.active(rule.choose is not None):
        return
    decision = decision_of(cache, key)
    found = _agree.in_file(decision, _agree.here()) or _agree.published(decision, rule.choose is not None)
    config = _config(list(getattr(cache.tuner, "configs", ())), found.pick) if found is not None else None
    if found is not None and config is not None:
        cache.keep(key, config)
        cache.agreed[key] = found.source
    elif found is not None:  # a pruner may make it: looked for among what the pruner offers
        SWEEPS[id(cache)] = Sweep(wanted=found.pick)


def _on_store(cache: TunerCache, key: Any, value: Any) -> Any:
    """The pick about to be stored for ``key``: the rule's, where it chooses and can; then the
    pick file's, or the one published first where ranks agree through a store."""
    # the sweep stays while the rule times again (its timings are flagged on it, not noted),
    # then goes: the call's tensors are not kept past its pick
    try:
        return _kept(cache, key, value, SWEEPS.get(id(cache)))
    finally:
        SWEEPS.pop(id(cache), None)


def _kept(cache: TunerCache, key: Any, value: Any, sweep: Sweep | None) -> Any:
    """``_on_store``'s pick, from the sweep this call timed (None: nothing timed here)."""
    rule = _pick.current_rule()
    timed = sweep.timed if sweep is not None else {}
    if sweep is not None and rule.choose is not None and len(timed) > 1 and (sweep.call or not rule.times_again):
        picked = _choose(cache, rule, value, sweep)
        if picked is not None:
            cache.found[key] = picked
            value = picked.winner
    if not _agree.active(rule.choose is not None):
        return value
    # the pick file's, else the one published first: found among the configs this call timed
    # too (a pruner may make configs of its own, which the lookup could not name); a file's
    # pick that none of them is does not stop the ranks agreeing through the store
    decision, chooses = decision_of(cache, key), rule.choose is not None
    configs = [*timed, *(sweep.offered if sweep is not None else []), *getattr(cache.tuner, "configs", ())]
    found = _agree.in_file(decision, _agree.here())
    taken = _config(configs, found.pick) if found is not None else None
    if taken is None:
        spent = ms(timed[value]) if value in timed else None
        found = _agree.publish(decision, str(value), spent, chooses)
        taken = _config(configs, found.pick) if found is not None else None
    if found is not None and taken is not None:
        cache.agreed[key] = found.source
        return taken
    if found is not None:  # a value written by hand, or a pruner that made other configs here
        _agree.not_offered(decision, found)
    return value


def _config(configs: list[Any], label: str) -> Any:
    """The config of ``configs`` whose label is ``label``, or None."""
    return next((c for c in configs if str(c) == label), None)


def decision_of(cache: TunerCache, key: Any) -> _agree.Decision:
    """A Triton autotuning decision as ranks and runs agree on it."""
    configs = tuple(str(c) for c in getattr(cache.tuner, "configs", ()) or ())
    if id(cache) not in KERNELS:
        KERNELS[id(cache)] = _agree.kernel_hash(cache.tuner)
    return _agree.Decision("triton", cache.op, repr(key), configs, KERNELS[id(cache)])


KERNELS: dict[int, str] = {}  # id of a tuner's cache -> its kernel's hash, read once


def _choose(cache: TunerCache, rule: _pick.Rule, own: Any, sweep: Sweep) -> _pick.Picked[Any] | None:
    """The rule's pick from the sweep's timings, or None (the autotuner's ``own`` stands)."""
    tuner = cache.tuner
    timings = {config: ms(t) for config, t in sweep.timed.items()}
    if own not in timings or timings[own] != min(_pick.ran_only(timings).values(), default=None):
        return None  # a subclass that picks by a rule of its own: its pick stands
    args, kwargs = sweep.call or ((), {})
    bench = vars(tuner).get("do_bench")  # what the sweep timed with (triton 3.1 on)
    shorter = shorter_bench(bench, _pick.again_ms())

    def time_again(config: Any) -> float:
        sweep.timing_again = True
        if shorter is not None:
            vars(tuner)["do_bench"] = shorter
        try:
            return _pick.again(ms(tuner._bench(*args, config=config, **kwargs)), config)
        finally:
            sweep.timing_again = False
            if shorter is not None:
                vars(tuner)["do_bench"] = bench

    def hooks_ms() -> float:
        # the tuner's hooks run inside every config's timing: timed alone by its own _bench
        # and flush, with a config of no hook of its own and nothing launched
        plain = next((c for c in timings if getattr(c, "pre_hook", None) is None), None)
        if plain is None or not has_hooks(tuner) or "fn" not in vars(tuner):
            return 0.0
        kernel = tuner.fn
        tuner.fn = NOT_LAUNCHED
        try:
            return time_again(plain)
        finally:
            tuner.fn = kernel

    return _pick.choose(rule, list(timings), timings, time_again, cache.op, shared=hooks_ms)


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


def _bench(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    result = wrapped(*args, **kwargs)
    seen = getattr(instance, "cache", None)
    if isinstance(seen, TunerCache):  # a config timed: what is stored next was tuned, not served
        seen.timed += 1
    rule = _pick.current_rule()
    chooses = rule.choose is not None
    if "config" not in kwargs or not (chooses or _agree.active(chooses)):
        return result
    # seen from here too: a library's subclass may tune through its own run, not Autotuner.run
    cache = cache_of(instance, needed_by=f"the {rule.name} pick rule" if chooses else "agreeing on picks")
    if cache is None:
        return result
    sweep = SWEEPS.setdefault(id(cache), Sweep())  # what the rule chooses among, and agreement finds a pick in
    if not sweep.timing_again:
        sweep.timed[kwargs["config"]] = result
        if chooses and rule.times_again:
            sweep.call = (args, {k: v for k, v in kwargs.items() if k != "config"})
    return result


def _prune_configs(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The pruner's configs; where a pick agreed elsewhere is one of them, that config alone
    (a pruner that makes configs of its own: the others are not timed again)."""
    pruned = wrapped(*args, **kwargs)
    cache = getattr(instance, "cache", None)
    sweep = SWEEPS.get(id(cache)) if isinstance(cache, TunerCache) else None
    if sweep is None or sweep.wanted is None or not isinstance(pruned, list):
        return pruned
    agreed = _config(pruned, sweep.wanted)
    sweep.wanted = None  # once: the pruner's next call (a warm-up) is its own
    if agreed is None:  # other configs than the agreed pick's: tuned here
        return pruned
    sweep.offered = [agreed]
    return [agreed]


def _check_disk_cache(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Triton's disk cache of picks, written with the kept config at the fastest's time less a
    billionth where the rule kept another: every reader's ``min()`` keeps the writer's pick."""
    try:
        call = inspect.signature(wrapped).bind(*args, **kwargs).arguments
    except TypeError:  # a layout this does not know: the file keeps the sweep's timings
        return wrapped(*args, **kwargs)
    key, bench = call.get("tuning_key"), call.get("bench_fn")
    if not callable(bench):
        return wrapped(*args, **kwargs)
    real: list[Any] = []

    def benchmark() -> None:
        bench()
        timings, cache = getattr(instance, "configs_timings", None), getattr(instance, "cache", None)
        kept = cache.data.get(key) if isinstance(cache, TunerCache) else None
        if not isinstance(timings, dict) or kept not in timings:
            return
        fastest = min(timings, key=lambda c: ms(timings[c]))
        if kept is not fastest:
            real.append(timings)
            instance.configs_timings = nudged(timings, kept, fastest)

    try:
        return wrapped(**{**call, "bench_fn": benchmark})
    finally:  # what the job sees after is what was measured
        if real:
            instance.configs_timings = real[0]


def nudged(timings: dict[Any, Any], kept: Any, fastest: Any) -> dict[Any, Any]:
    """``timings`` with ``kept`` at ``fastest``'s time less a billionth (a float, or a list whose
    first is the median)."""
    under = ms(timings[fastest]) * (1 - NUDGE)
    value = timings[kept]
    return {**timings, kept: [under, *value[1:]] if isinstance(value, (list, tuple)) else under}


def _run(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Where picks are agreed with other ranks or runs, the tuner's cache is seen (its hooks
    agree each key), and every key this call tuned (or took from another rank) is kept in the
    pick file.  A call served from the cache costs a few attribute reads here: it runs at every
    launch of an autotuned kernel (benchmarks/launch.py)."""
    cache = getattr(instance, "cache", None)
    if type(cache) is not TunerCache:  # an ABC's isinstance costs more than the rest of a served call
        if not _agree.active(_pick.current_rule().choose is not None):
            return wrapped(*args, **kwargs)
        cache = cache_of(instance, needed_by="agreeing on picks")
        if cache is None:
            return wrapped(*args, **kwargs)
    added = len(cache.added)
    timings_before = getattr(instance, "configs_timings", None)
    result = wrapped(*args, **kwargs)
    if len(cache.added) == added or _agree.file_path() is None:  # nothing tuned, or nowhere to keep it
        return result
    timings = getattr(instance, "configs_timings", None)
    timed = {str(c): ms(t) for c, t in timings.items()} if timings is not timings_before and timings else {}
    rule = _pick.current_rule().name
    # every key this call added and still held (a library's hook may delete keys meanwhile)
    for key in dict.fromkeys(cache.added[added:]):
        if key in cache.data and cache.agreed.get(key) != _agree.FROM_FILE:  # what the file gave, it holds already
            kept = _agree.entry(decision_of(cache, key), str(cache.data[key]), rule, current_policy(), timed)
            _agree.write(kept)
    return result


def apply(module: Any = None) -> None:
    """Apply the pick rule to the Triton autotuner loaded now (a post-import hook, or a re-install)."""
    cls = getattr(sys.modules.get(AUTOTUNER), "Autotuner", None)
    if cls is None:
        return
    patches = _patching.patch_set(NAME)
    wrappers = {"_bench": _bench, "check_disk_cache": _check_disk_cache, "run": _run, "prune_configs": _prune_configs}
    for method, wrapper in wrappers.items():
        if method in vars(cls):
            patches.wrap(cls, method, wrapper)


def register() -> None:
    """At the first install: the cache's hooks, and apply when Triton's autotuner is imported."""
    _tunercache.LOOKUPS.append(_on_lookup)
    _tunercache.STORES.append(_on_store)
    wrapt.register_post_import_hook(apply, AUTOTUNER)


def revert() -> None:
    """Unwrap what ``apply`` wrapped; the caches go back with ``_tunercache.revert``."""
    _patching.patch_set(NAME).revert()
    SWEEPS.clear()
    KERNELS.clear()
