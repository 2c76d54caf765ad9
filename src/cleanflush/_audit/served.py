"""``cleanflush audit``'s recorder, in the job's own processes: every pick a Triton autotuner
served without tuning, with the call it served, so that the audit can make that call again.

Active only while ``CLEANFLUSH_AUDIT`` names a file (``cleanflush audit`` sets it, with the
decisions recorder's ``CLEANFLUSH_DECISIONS`` and ``CLEANFLUSH_AB_CALLS``); the decisions
recorder (``_decisions``) hands it each ``Autotuner.run``.  Seen through the door into the
tuner's cache (``_tunercache``), a pick is served without tuning three ways:

* preloaded: the call's key was in the cache at its first lookup in this process, and this
  process never stored it (a table put into ``tuner.cache`` before the call);
* stored with no config timed (``TunerCache.timed``): Triton's disk cache
  (``cache_results=True``), or a library's own write into the cache;
* from a library's table through its pruner: the pruner offered one config of the kernel's
  many, and the library's record (``_audit.libraries``) finds it in its table (gemlite).  A
  pruner that offers one config with no record to say where it came from is recorded too, and
  the audit says it cannot re-tune it.

Each is appended once per kernel and key to ``CLEANFLUSH_AUDIT`` as one JSON line (``Served``),
with the configs the autotuner offers for the call without the table (its pruner asked again,
the library's table hidden), and the call is recorded (``_calls.record``) with every one of them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from .. import _calls, _env
from .._state import warn_once
from .._tunercache import TunerCache
from . import libraries

if TYPE_CHECKING:  # 3.10's typing has no NotRequired; the annotations are strings at run time
    from typing_extensions import NotRequired

PRELOADED, DISK_CACHE, STORED, PRUNER = "preloaded", "disk cache", "stored untimed", "pruner"
KIND = "served"


class Served(TypedDict):
    """A pick served without tuning, as the recorder writes it and the audit reads it."""

    kind: str  # "served"
    op: str
    key: str
    source: str  # PRELOADED, DISK_CACHE, STORED, PRUNER, or a library's name
    shipped: str  # the config served
    offered: list[str]  # what the autotuner times for the call without the table, in its order
    specs: dict[str, dict[str, Any]]  # label -> ``_calls.config_spec``, for the shipped and offered configs
    call: dict[str, str]  # the recorded call's file, or why there is none
    device: str | None
    pid: NotRequired[int]
    tuning_key: NotRequired[list[Any] | None]  # the key as Triton's disk cache writes it
    cache_dir: NotRequired[str | None]  # Triton's cache folder, as the job's Triton names it
    entry: NotRequired[libraries.Entry]  # the library's table entry that served it
    table: NotRequired[str]  # the file (beside CLEANFLUSH_AUDIT) with the library's whole table as it held it
    shipped_tables: NotRequired[str | None]  # the folder of the tables the library ships


# id of a tuner's cache -> the keys this process stored, or recorded as served (a child forked
# after keeps its parent's: those keys are in its copy of the cache, and none was preloaded)
SEEN: dict[int, set[Any]] = {}


@dataclass
class Watch:
    """One ``Autotuner.run``, as the recorder saw it start."""

    tuner: Any
    cache: TunerCache
    key: tuple[Any, ...] | None  # the call's key (None: a tuner of one config, which has no cache)
    preloaded: bool
    timed: int  # the configs the tuner had timed before the call


def watch(tuner: Any, cache: TunerCache, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Watch:
    """What the recorder needs to see of a call before it runs."""
    key = _calls.tuning_key(tuner, args, kwargs) if len(getattr(tuner, "configs", ())) > 1 else None
    seen = SEEN.setdefault(id(cache), set())
    preloaded = key is not None and key in cache.data and key not in seen and key not in cache.agreed
    return Watch(tuner, cache, key, preloaded, cache.timed)


def served(
    seen: Watch, new: list[Any], args: tuple[Any, ...], kwargs: dict[str, Any], grids: Any, folder: str
) -> set[Any]:
    """The keys the call was served without tuning, each written once with its call recorded in
    ``folder``; every key it stored is seen from now on."""
    timed = seen.cache.timed - seen.timed
    found: dict[Any, str] = {seen.key: PRELOADED} if seen.preloaded else {}
    for key in new:
        if key in seen.cache.agreed:  # a pick agreed with another rank or run: the decisions say so
            continue
        if timed == 0:
            found[key] = DISK_CACHE if getattr(seen.tuner, "cache_results", False) else STORED
        elif timed == 1 and key == seen.key:
            found[key] = PRUNER  # its pruner offered one config of the kernel's many: whose, ``_line`` asks
    SEEN[id(seen.cache)].update([*new, *found])
    for key, source in found.items():
        _write(_line(seen, key, source, args, kwargs, grids, folder))
    return set(found)


def offered(tuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], library: libraries.Library | None) -> list[Any]:
    """The configs the tuner times for this call (its pruner asked as ``Autotuner.run`` asks it,
    with the call's arguments as ``nargs``), ``library``'s table hidden where one is given."""
    held = getattr(tuner, "nargs", None)
    tuner.nargs = dict(zip(tuner.arg_names, args))
    hidden = library.without_table(tuner) if library is not None else contextlib.nullcontext()
    try:
        with hidden:
            return list(tuner.prune_configs(kwargs))
    finally:
        tuner.nargs = held


def _line(
    seen: Watch, key: Any, source: str, args: tuple[Any, ...], kwargs: dict[str, Any], grids: Any, folder: str
) -> Served:
    """The line of one served pick, its call recorded with the shipped and every offered config."""
    tuner, shipped = seen.tuner, seen.cache.data[key]
    library = libraries.owner(tuner) if source == PRUNER else None
    entry = library.entry(tuner, dict(zip(tuner.arg_names, args)), shipped) if library is not None else None
    if entry is not None and library is not None:
        source = library.name
    search = offered(tuner, args, kwargs, library if entry is not None else None)
    configs = list({str(c): c for c in [shipped, *search]}.values())
    _fill_grids(grids, tuner, args, kwargs, configs)
    line = Served(
        kind=KIND,
        op=seen.cache.op,
        key=repr(key),
        source=source,
        shipped=str(shipped),
        offered=[str(c) for c in search],
        specs={str(c): _calls.config_spec(c) for c in configs},
        call=_call(tuner, args, kwargs, grids, configs, folder, seen.cache.op, repr(key)),
        device=_device(),
        pid=os.getpid(),
    )
    if source in (DISK_CACHE, STORED):
        line["tuning_key"], line["cache_dir"] = _jsonable(list(key)), _triton_cache_dir()
    if entry is not None and library is not None:
        line["entry"], line["shipped_tables"] = entry, library.shipped()
        line["table"] = _keep_table(library)
    return line


def _call(
    tuner: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    grids: Any,
    configs: list[Any],
    folder: str,
    op: str,
    key: str,
) -> dict[str, str]:
    path = os.path.join(folder, _calls.file_for(op, key))
    why = _calls.record(tuner, args, kwargs, grids, configs, path)
    return {"file": os.path.basename(path)} if why is None else {"error": why}


def _fill_grids(grids: Any, tuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], configs: list[Any]) -> None:
    """Each config's grid, asked of the caller's grid function as the launch would ask it: the
    served call launched one config, and the audit launches them all."""
    if not isinstance(grids, _calls.GridRecorder):
        return
    named = {**dict(zip(tuner.arg_names, args)), **{k: v for k, v in kwargs.items() if k not in _calls.NOT_ARGUMENTS}}
    for config in configs:
        try:
            grids({**named, **config.all_kwargs()})
        except (ArithmeticError, LookupError, TypeError, ValueError):  # a config the job's grid refuses: not priced
            continue


def _device() -> str | None:
    """The name of the job's CUDA device, where the job uses one."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    if cuda is None or not cuda.is_available() or not cuda.is_initialized():
        return None
    return str(cuda.get_device_name())


def _triton_cache_dir() -> str | None:
    """Triton's cache folder as the job's Triton names it (3.4 on: its knobs), else None."""
    knobs = sys.modules.get("triton.knobs")
    found = getattr(getattr(knobs, "cache", None), "dir", None)
    return str(found) if found else None


def _jsonable(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):  # a key of an object JSON cannot take: Triton's file cannot hold it either
        return None


KEPT: dict[str, str] = {}  # library name -> the digest of the table this process last kept


def _keep_table(library: libraries.Library) -> str:
    """The library's whole table as it holds it now, kept beside ``CLEANFLUSH_AUDIT`` (once per
    process and content): the table a corrected one is made from.  Its file name."""
    name = f"{library.name}-table-{os.getpid()}.json"
    path = _env.audit_path()
    text = json.dumps(library.table() or {})
    digest = hashlib.sha1(text.encode()).hexdigest()
    if path is not None and KEPT.get(library.name) != digest:
        try:
            write_whole(os.path.join(os.path.dirname(path), name), text)
            KEPT[library.name] = digest
        except OSError as exc:  # a folder the job made unwritable: its entries are audited, not corrected
            warn_once(f"audit:table:{library.name}", f"could not keep {library.name}'s table for the audit ({exc})")
    return name


def write_whole(path: str, text: str) -> None:
    """``text`` into ``path`` whole: a name no one can guess in the same folder, then renamed (a
    link planted at ``path`` is replaced, never followed)."""
    handle, temporary = tempfile.mkstemp(
        dir=os.path.dirname(os.path.abspath(path)), prefix=".cleanflush-", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):  # not moved into place: nothing half-written stays behind
            os.unlink(temporary)


def _write(line: Served) -> None:
    """Append one line to ``CLEANFLUSH_AUDIT``; a failure is said once, never raised."""
    path = _env.audit_path()
    if path is None:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
    except (OSError, TypeError, ValueError) as exc:  # a path that cannot be written, a value json refuses
        warn_once("audit:write", f"could not record a served autotuning pick in {path!r} ({exc})")
