"""The libraries whose own tables ``cleanflush audit`` knows: how each serves a pick from its
table, what its autotuner would offer for the call without the table, and its table's format.

A library is a record (``Library``), as a flush policy (``_policies``) and a pick rule
(``_pick``) are: the recorder (``_audit.served``) asks the job-side fields in the job's own
processes, where the library is loaded; the audit (``_audit.tables``) asks the table fields of
plain JSON.  Adding a library is a record in ``LIBRARIES``, a line in docs/audit.md and tests.
Nothing here imports the library: its modules are looked up in ``sys.modules``.

gemlite (mobiusml/gemlite 0.6.0.post2, the release on PyPI, read for this record;
``load_config``, ``cache_config`` and the pruners' lookup are the same at 1a6815d on GitHub,
but for the signature, below).  ``gemlite.core`` loads ``configs/<gpu>.json`` as it is imported
(the file whose name is a substring of the device's name, ``get_default_cache_config``: an
H200 loads none) into its module global ``GEMLITE_TRITON_CONFIG_CACHE``, ``{family:
{"(M, N, K, group_size, elements_per_sample, type_id)": config}}``; ``load_config`` merges more
files into it and ``cache_config`` writes it back, each config as its ``all_kwargs()``.  The
table never enters an autotuner's cache: each kernel's pruner (``kernel_config_pruner``) looks
the call's signature up (``str((get_closest_m(M), N, K, g, e, t))``; at 1a6815d the first six
key arguments as they are) and, where it is found, offers that one config alone, which the
autotuner times once and stores as its pick.  So a gemlite entry is a sweep of one config of a
kernel that has many, whose signature is in the table and whose config is the table's.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypedDict


class Entry(TypedDict):
    """A table's entry, as the library keys it: its family (a table of one kernel), its key there
    and its config as the table holds it."""

    family: str
    signature: str
    config: dict[str, Any]


@dataclass(frozen=True)
class Library:
    """A library whose autotuned kernels are served from a table of its own."""

    name: str
    owns: Callable[[Any], bool]  # a Triton autotuner of this library's kernels (job side)
    # (tuner, the call's arguments by name, the config served) -> the entry that served it (job side)
    entry: Callable[[Any, dict[str, Any], Any], Entry | None]
    # (tuner) -> a context in which the tuner's pruner offers what it would without the table (job side)
    without_table: Callable[[Any], contextlib.AbstractContextManager[None]]
    table: Callable[[], dict[str, Any] | None]  # the whole table as the library holds it now (job side)
    shipped: Callable[[], str | None]  # the folder of the tables it ships, one per GPU, named for it (job side)
    problem: Callable[[Any], str | None]  # what makes a JSON value no table of this library's (None: one)
    # (table, entry, the clean pick's spec) -> the table with that entry's config replaced
    corrected: Callable[[dict[str, Any], Entry, dict[str, Any]], dict[str, Any]]
    loads: Callable[[str, list[str]], str | None]  # (device name, shipped tables' names) -> the one it loads
    use: str  # how a user loads a corrected table ({path}: where it was written)


# gemlite


def _gemlite_module(tuner: Any) -> Any:
    fn = getattr(tuner, "base_fn", None)
    name = getattr(fn, "__module__", None) or ""
    return sys.modules.get(name) if name.startswith("gemlite.") else None


def _gemlite_owns(tuner: Any) -> bool:
    module = _gemlite_module(tuner)
    return isinstance(getattr(module, "MATMUL_TYPE", None), str) and "gemlite.core" in sys.modules


def _gemlite_table() -> dict[str, Any] | None:
    table = getattr(sys.modules.get("gemlite.core"), "GEMLITE_TRITON_CONFIG_CACHE", None)
    return table if isinstance(table, dict) else None


SIGNATURE_ARGS = ("M", "N", "K", "group_size", "elements_per_sample", "type_id")


def _gemlite_signatures(module: Any, nargs: dict[str, Any]) -> list[str]:
    """The call's signature as the pruner looks it up: 0.6.0.post2's (M through its
    ``get_closest_m``), then 1a6815d's (the first six of ``KEYS`` as they are)."""
    found = []
    closest = getattr(module, "get_closest_m", None)
    if all(name in nargs for name in SIGNATURE_ARGS) and callable(closest):
        m, *rest = (nargs[name] for name in SIGNATURE_ARGS)
        found.append(str((closest(m), *rest)))
    keys = getattr(module, "KEYS", None)
    if isinstance(keys, list) and all(name in nargs for name in keys[:6]):
        found.append(str(tuple(nargs[name] for name in keys[:6])))
    return found


# what gemlite's loader sets itself (EVEN_K, EVEN_N) or drops (launch options it does not pass on)
GEMLITE_LOADER_SETS = ("EVEN_K", "EVEN_N")
GEMLITE_LOADER_DROPS = (
    "num_ctas",
    "num_buffers_warp_spec",
    "num_consumer_groups",
    "reg_dec_producer",
    "reg_inc_consumer",
)


def _gemlite_same(entry: dict[str, Any], config: Any) -> bool:
    """Whether ``config`` (what the pruner offered) is the table's ``entry``, as gemlite's
    loader turns an entry into a config."""
    kwargs = dict(getattr(config, "kwargs", {}))
    for name, value in entry.items():
        if name in ("num_warps", "num_stages"):
            if getattr(config, name, None) != value:
                return False
        elif name not in GEMLITE_LOADER_SETS + GEMLITE_LOADER_DROPS and kwargs.get(name) != value:
            return False
    return all(name in entry for name in kwargs if name not in GEMLITE_LOADER_SETS)


def _gemlite_entry(tuner: Any, nargs: dict[str, Any], config: Any) -> Entry | None:
    module, table = _gemlite_module(tuner), _gemlite_table()
    family = table.get(module.MATMUL_TYPE) if table is not None and module is not None else None
    if not isinstance(family, dict):
        return None
    for signature in _gemlite_signatures(module, nargs):
        found = family.get(signature)
        if isinstance(found, dict) and _gemlite_same(found, config):
            return Entry(family=module.MATMUL_TYPE, signature=signature, config=copy.deepcopy(found))
    return None


@contextlib.contextmanager
def _gemlite_without_table(tuner: Any) -> Iterator[None]:
    """gemlite's table without the tuner's family while the context is open: its pruner reads the
    module global at each call (``from ..core import GEMLITE_TRITON_CONFIG_CACHE``), so a new dict
    there hides it, and the job's own dict is never changed."""
    core, module = sys.modules.get("gemlite.core"), _gemlite_module(tuner)
    held = getattr(core, "GEMLITE_TRITON_CONFIG_CACHE", None)
    if not isinstance(held, dict) or module is None:
        yield
        return
    core.GEMLITE_TRITON_CONFIG_CACHE = {name: t for name, t in held.items() if name != module.MATMUL_TYPE}  # type: ignore[union-attr]
    try:
        yield
    finally:
        core.GEMLITE_TRITON_CONFIG_CACHE = held  # type: ignore[union-attr]


def _gemlite_shipped() -> str | None:
    where = getattr(sys.modules.get("gemlite.core"), "__file__", None)
    return os.path.join(os.path.dirname(where), "configs") if isinstance(where, str) else None


SIGNATURE = re.compile(r"\((-?\d{1,12}, ){0,15}-?\d{1,12}\)")
MOST_ENTRIES = 100_000  # h100.json has 1,624: a table far larger is no table gemlite ships or tunes


def _gemlite_problem(table: Any) -> str | None:
    """What makes ``table`` (read from JSON) no gemlite table: ``{family: {signature: config}}``,
    a config a mapping of names to numbers, booleans or short strings; None where it is one."""
    if not isinstance(table, dict):
        return f"not a mapping of kernel families but a JSON {type(table).__name__}"
    count = 0
    for family, entries in table.items():
        if not isinstance(entries, dict):
            return f"family {str(family)[:40]!r} is not a mapping of signatures to configs"
        for signature, config in entries.items():
            count += 1
            if not SIGNATURE.fullmatch(signature):
                where = f"{str(signature)[:40]!r} in {str(family)[:40]!r}"
                return f"{where} is not a signature like (1, 4096, 4096, 128, 8, 104)"
            if not isinstance(config, dict) or not all(_plain(name, value) for name, value in config.items()):
                return f"the config of {signature} in {str(family)[:40]!r} is not a mapping of names to numbers"
    return f"{count} entries: more than {MOST_ENTRIES}" if count > MOST_ENTRIES else None


def _plain(name: Any, value: Any) -> bool:
    if not isinstance(name, str) or len(name) > 64:
        return False
    if isinstance(value, (bool, int)):
        return abs(int(value)) < 1 << 31
    return isinstance(value, float) or (isinstance(value, str) and len(value) <= 64)


def _gemlite_corrected(table: dict[str, Any], entry: Entry, spec: dict[str, Any]) -> dict[str, Any]:
    """``table`` with ``entry``'s config replaced by the config of ``spec`` (``_calls.config_spec``),
    written as gemlite's ``cache_config`` writes one (its ``all_kwargs()``: meta-parameters, then
    num_warps, num_ctas, num_stages); names the shipped entry had beside those keep their value."""
    found = copy.deepcopy(table)
    options = {name: spec[name] for name in ("num_warps", "num_ctas", "num_stages") if spec.get(name) is not None}
    config: dict[str, Any] = {**spec["kwargs"], **{"num_ctas": 1, **options}}
    for name, value in entry["config"].items():
        config.setdefault(name, value)
    found.setdefault(entry["family"], {})[entry["signature"]] = config
    return found


def _gemlite_loads(device: str, tables: list[str]) -> str | None:
    """The table gemlite loads on ``device`` (``get_default_cache_config``): the longest name of
    ``tables`` found in the device's name, lower case, spaces as underscores."""
    name = device.lower().replace(" ", "_")
    return next((tag for tag in sorted(tables, key=len, reverse=True) if tag in name), None)


GEMLITE = Library(
    name="gemlite",
    owns=_gemlite_owns,
    entry=_gemlite_entry,
    without_table=_gemlite_without_table,
    table=_gemlite_table,
    shipped=_gemlite_shipped,
    problem=_gemlite_problem,
    corrected=_gemlite_corrected,
    loads=_gemlite_loads,
    use="load it after importing gemlite, over the table it loads itself: gemlite.load_config({path!r})",
)
LIBRARIES = {library.name: library for library in (GEMLITE,)}


def owner(tuner: Any) -> Library | None:
    """The library whose table can serve ``tuner``'s kernel, or None."""
    return next((library for library in LIBRARIES.values() if library.owns(tuner)), None)
