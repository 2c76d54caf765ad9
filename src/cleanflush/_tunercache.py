"""A Triton autotuner's cache as cleanflush sees it: the one door through which the pick rule
(``_autotuner``), the agreement between ranks and runs (``_agree``) and the decision recorder
(``_decisions``) see a Triton ``Autotuner``'s picks.

``Autotuner.run`` asks ``key in self.cache`` once a call, cached or not; where the key is
missing it times the configs and stores its pick with ``self.cache[key] = min(timings)``; its
other reads are by ``[]`` (``run`` and ``check_disk_cache``, read at triton-lang/triton
0094017; the installed 3.0-3.9 alike).  ``TunerCache`` wraps the autotuner's own dict and reads
and writes through it, so a reference the job took to that dict sees every key tuned after.
It counts the configs the tuner times (``timed``), so a store can be told from a pick served
without tuning (``cleanflush audit``).  Each lookup is handed to the ``LOOKUPS`` hooks (which
may fill the key: a pick agreed elsewhere), each store to the ``STORES`` hooks, in order (each
may replace the value: the rule's pick, the agreed pick).  Libraries' subclasses that override
``run`` keep both paths as long as they store their pick in ``cache``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from ._state import warn_once

# (cache, key): a lookup of ``key``, before the cache answers it (a hook may fill the key)
Lookup = Callable[["TunerCache", Any], None]
# (cache, key, value) -> the value to store: a pick about to be stored
Store = Callable[["TunerCache", Any, Any], Any]
AUTOTUNER = "triton.runtime.autotuner"  # the module of Triton's ``Autotuner``
LOOKUPS: list[Lookup] = []
STORES: list[Store] = []


def ms(value: Any) -> float:
    """A timing as the autotuner keeps it (a float, or [median, p20, p80])."""
    return float(value[0] if isinstance(value, (list, tuple)) else value)


def op_name(tuner: Any) -> str:
    """A Triton kernel's name, as decisions name it: its module and function."""
    fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__name__', '?')}"


class TunerCache(MutableMapping[Any, Any]):
    """An autotuner's cache, wrapped: the autotuner's own dict (``data``) behind the hooks.

    It keeps the dict's own methods beside the mapping's (``copy``, ``|``), so a job that
    copies or merges its tuner's cache goes on working; ``isinstance(cache, dict)`` is False."""

    def __init__(self, found: dict[Any, Any], tuner: Any) -> None:
        self.data, self.tuner, self.op = found, tuner, op_name(tuner)
        self.found: dict[Any, Any] = {}  # key -> the rule's ``Picked`` (``_autotuner`` writes it)
        self.agreed: dict[Any, str] = {}  # key -> where the stored pick came from (``_agree`` writes it)
        # configs timed through the tuner's ``_bench`` (``_autotuner`` counts them): a key stored
        # after none was timed was served, not tuned (Triton's disk cache, a library's own write)
        self.timed = 0
        # every key new to the cache when stored, in the order added (a lookup's agreed pick
        # too): what one call of the tuner added, where a hook of a library's deletes keys
        # meanwhile (``_autotuner._run``); one entry a tuning, none for a key stored again
        self.added: list[Any] = []

    def __contains__(self, key: object) -> bool:
        for hook in LOOKUPS:
            hook(self, key)
        return key in self.data

    def __getitem__(self, key: Any) -> Any:
        return self.data[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        for hook in STORES:
            value = hook(self, key, value)
        self.keep(key, value)

    def keep(self, key: Any, value: Any) -> None:
        """Store ``value`` for ``key`` behind the hooks; a key new to the cache is noted as added."""
        if key not in self.data:
            self.added.append(key)
        self.data[key] = value

    def __delitem__(self, key: Any) -> None:
        del self.data[key]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return repr(self.data)

    def copy(self) -> dict[Any, Any]:
        return self.data.copy()

    def __or__(self, other: Any) -> dict[Any, Any]:
        return self.data | (other.data if isinstance(other, TunerCache) else other)

    def __ror__(self, other: Any) -> dict[Any, Any]:
        return other | self.data  # type: ignore[no-any-return]

    def __ior__(self, other: Any) -> TunerCache:
        self.update(other)
        return self


WRAPPED: list[TunerCache] = []  # every cache wrapped in this process, put back at uninstall


def cache_of(tuner: Any, needed_by: str | None = None) -> TunerCache | None:
    """The tuner's cache as a ``TunerCache`` (wrapped now if it is a plain dict), or None where
    it is something else (a subclass's own mapping: left alone, and said once where
    ``needed_by`` names what cannot apply to it)."""
    cache = getattr(tuner, "cache", None)
    if type(cache) is dict:
        cache = tuner.cache = TunerCache(cache, tuner)
        WRAPPED.append(cache)
    if isinstance(cache, TunerCache):
        return cache
    if needed_by is not None:
        kind = type(cache).__name__
        warn_once(
            f"cache:{op_name(tuner)}",
            f"{op_name(tuner)} keeps its picks in a {kind}, not a dict: {needed_by} cannot see them, "
            "and it keeps its own pick",
        )
    return None


def revert() -> None:
    """Give every autotuner its own cache dict back."""
    for cache in WRAPPED:
        if getattr(cache.tuner, "cache", None) is cache:
            cache.tuner.cache = cache.data
    WRAPPED.clear()
