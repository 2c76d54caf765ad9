"""The tables the audit reads (a library's table as the job held it, the tables it ships, Triton's
disk cache) and the corrected ones ``--write`` makes, in each library's own format (plain Python).

Every table is read as its library reads one (JSON), and checked first: never through a link,
a regular file of at most ``MOST_BYTES``, JSON, and the library's format (``Library.problem``);
a table that is none of these is said in one line, and none of its entries is corrected.  The
corrected tables go into ``--write``'s folder only (new or empty, never a link), each written
whole under a temporary name and renamed: the files the audit read are never touched.

Triton's disk cache (``Autotuner.check_disk_cache``, triton 3.3 on; read at the installed 3.7.1):
``<cache dir>/<hash>/<kernel name[:150]>.autotune.json`` holds ``{"key": the tuning key,
"configs_timings": [[config.__dict__, timing], ...]}``, and a reader keeps ``min`` of the
timings.  The corrected file keeps every config and its timing and puts the clean pick at the
fastest's time less a billionth (``_autotuner.nudged``, as the stable rule writes the file), so
every Triton that reads it keeps the clean pick.
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any

from .._autotuner import nudged
from .._tunercache import ms
from .judge import WRONG
from .libraries import LIBRARIES, Library
from .records import Audited, Served, Written
from .served import DISK_CACHE, write_whole

MOST_BYTES = 64 << 20  # gemlite's h100.json is 0.4 MB: a table this large is none a library ships


def read_json(path: str) -> tuple[Any, str | None]:
    """The JSON in ``path``, read without following a link: (value, None), or (None, why not)."""
    try:
        found = os.lstat(path)
        if stat.S_ISLNK(found.st_mode):
            return None, f"{path} is a link: the audit never reads a table through one"
        if not stat.S_ISREG(found.st_mode):
            return None, f"{path} is not a regular file"
        if found.st_size > MOST_BYTES:
            return None, f"{path} holds {found.st_size >> 20} MiB: more than any table ({MOST_BYTES >> 20} MiB)"
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            text = f.read(MOST_BYTES + 1)
    except OSError as exc:
        return None, f"{path} cannot be read ({exc.strerror or exc})"
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as exc:  # torn (a writer killed mid-write), or nested past Python's limit
        return None, f"{path} is torn or not JSON ({str(exc)[:80]})"


def read_table(path: str, library: Library) -> tuple[dict[str, Any] | None, str | None]:
    """``library``'s table in ``path``, checked: (table, None), or (None, why not)."""
    found, why = read_json(path)
    if why is not None:
        return None, why
    problem = library.problem(found)
    return (found, None) if problem is None else (None, f"{path} is not a {library.name} table: {problem}")


def shipped_tables(folder: str | None, library: Library, problems: list[str]) -> dict[str, dict[str, Any]]:
    """The tables ``library`` ships in ``folder``, by name (its GPU's, for gemlite); each that
    cannot be read is said in ``problems`` and left out."""
    if folder is None or os.path.islink(folder) or not os.path.isdir(folder):
        return {}
    found = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".json"):
            table, why = read_table(os.path.join(folder, name), library)
            if why is not None:
                problems.append(why)
            elif table is not None:
                found[name[: -len(".json")]] = table
    return found


def provenance(line: Served, shipped: dict[str, dict[str, Any]], library: Library) -> tuple[str, bool]:
    """Where a library's served entry came from, in words, and whether it was tuned on another
    GPU: the shipped table that holds it, against the one the library loads on the job's GPU."""
    entry = line["entry"]
    holding = [
        name
        for name, table in shipped.items()
        if table.get(entry["family"], {}).get(entry["signature"]) == entry["config"]
    ]
    device = line.get("device")
    here = library.loads(device, list(shipped)) if device else None
    if here is not None and here in holding:
        return f"{library.name}'s table for this GPU ({here}.json)", False
    named = " and ".join(f"{name}.json" for name in holding)
    if holding and device:
        return f"{library.name}'s {named}, tuned on another GPU than this {device}", True
    if holding:
        return f"{library.name}'s {named}", False
    return f"a {library.name} table the job loaded itself (none {library.name} ships holds it)", False


def triton_cache_dir(env: dict[str, str]) -> str:
    """Triton's cache folder as a job started with ``env`` finds it (triton 3.7.1's knobs:
    ``TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache``, ``TRITON_HOME`` defaulting to ~)."""
    found = env.get("TRITON_CACHE_DIR")
    home = env.get("TRITON_HOME") or os.path.expanduser("~/")
    return found or os.path.join(home, ".triton", "cache")


def folder_problem(folder: str, what: str) -> str | None:
    """Why the audit cannot read ``folder`` (a link, unreadable), or None (also where it is absent)."""
    if os.path.islink(folder):
        return (
            f"{what} {folder!r} is a link: the audit never reads or writes through one (name the folder it points to)"
        )
    if os.path.exists(folder) and not (os.path.isdir(folder) and os.access(folder, os.R_OK | os.X_OK)):
        return f"{what} {folder!r} cannot be read"
    return None


def write_problem(path: str, option: str = "--write") -> str | None:
    """Why ``option``'s folder cannot be the audit's to write in (it must be new or empty, never a link)."""
    if not path:
        return f"{option} needs a folder"
    if os.path.islink(path):
        return f"{option} {path!r} is a link: the audit never writes through one"
    if os.path.exists(path) and not os.path.isdir(path):
        return f"{option} {path!r} is a file: name a new or empty folder"
    if os.path.isdir(path) and os.listdir(path):
        return f"{option} {path!r} is not empty: name a new or empty folder (nothing there is overwritten)"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        return f"{option} {path!r}: its folder {parent!r} cannot be written"
    return None


def write_corrected(pairs: list[tuple[Audited, Served]], work: str, out: str, problems: list[str]) -> list[Written]:
    """Into the folder ``out``: each table that served a wrong entry, with every wrong entry (never
    an undecided one) replaced by its clean pick, in its library's format; each wrong entry says
    where it was written, or why it was not."""
    by_table: dict[tuple[str, str], list[tuple[Audited, Served]]] = {}
    written: list[Written] = []
    for entry, line in pairs:
        if entry["class"] != WRONG:
            continue
        if line["source"] in LIBRARIES and "table" in line:
            by_table.setdefault((line["source"], line["table"]), []).append((entry, line))
        elif line["source"] == DISK_CACHE:
            written += _disk_cache(entry, line, out, problems)
        else:
            entry["written"] = f"not written: no library record knows where a {line['source']} table is kept"
    several = {name for name, _ in by_table if sum(n == name for n, _ in by_table) > 1}
    for number, ((name, kept), found) in enumerate(sorted(by_table.items()), 1):
        target = os.path.join(out, f"{name}-{number}.json" if name in several else f"{name}.json")
        written += _library_table(LIBRARIES[name], os.path.join(work, kept), found, target, problems)
    return written


def _library_table(
    library: Library, path: str, found: list[tuple[Audited, Served]], target: str, problems: list[str]
) -> list[Written]:
    """The table the job held (kept by the recorder in ``path``), its wrong entries replaced, into ``target``."""
    table, why = read_table(path, library)
    if table is None:
        problems.append(str(why))
        for entry, _ in found:
            entry["written"] = f"not written: {why}"
        return []
    replaced = 0
    for entry, line in found:
        spec = line["specs"].get(entry.get("clean", ""))
        if spec is None:
            entry["written"] = "not written: the clean pick's config was not recorded"
            continue
        table, replaced = library.corrected(table, line["entry"], spec), replaced + 1
        entry["written"] = target
    if not replaced:
        return []
    os.makedirs(os.path.dirname(target), exist_ok=True)
    write_whole(target, json.dumps(table))
    return [Written(path=target, library=library.name, replaced=replaced, use=library.use.format(path=target))]


TRITON_USE = "copy it into Triton's cache folder the job reads (cp -r {path}/. $TRITON_CACHE_DIR/), or run on a copy"


def _disk_cache(entry: Audited, line: Served, out: str, problems: list[str]) -> list[Written]:
    """Each file of Triton's disk cache that served ``entry``, with the clean pick kept, into ``out``."""
    folder = line.get("cache_dir") or triton_cache_dir(dict(os.environ))
    why = folder_problem(folder, "Triton's cache folder")
    if why is not None or not os.path.isdir(folder):
        problems.append(why or f"Triton's cache folder {folder!r} is gone")
        entry["written"] = f"not written: {why or 'its cache folder is gone'}"
        return []
    name = line["op"].rsplit(".", 1)[-1][:150] + ".autotune.json"
    specs, written = line["specs"], []
    for sub in sorted(os.listdir(folder)):
        path = os.path.join(folder, sub, name)
        if os.path.islink(os.path.join(folder, sub)) or not os.path.lexists(path):
            continue  # a folder of the cache that is a link is never read through
        data, why = read_json(path)
        corrected = _kept(data, line.get("tuning_key"), specs[line["shipped"]], specs.get(entry.get("clean", ""), {}))
        if why is not None:
            problems.append(why)
        elif corrected is not None:
            target = os.path.join(out, "triton-cache", sub, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            write_whole(target, json.dumps(corrected))
            written.append(
                Written(
                    path=target,
                    library="triton",
                    replaced=1,
                    use=TRITON_USE.format(path=os.path.join(out, "triton-cache")),
                )
            )
    entry["written"] = ", ".join(w["path"] for w in written) or "not written: no file of Triton's disk cache holds it"
    return written


def _kept(data: Any, key: Any, shipped: dict[str, Any], clean: dict[str, Any]) -> dict[str, Any] | None:
    """A disk-cache file's record with ``clean`` at the fastest's time less a billionth, where the
    file is the entry's (its key, its fastest the shipped config) and holds ``clean``; else None."""
    pairs = data.get("configs_timings") if isinstance(data, dict) else None
    if key is None or data.get("key") != key or not isinstance(pairs, list) or not pairs:
        return None
    if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], dict) and _timing(p[1]) for p in pairs):
        return None
    timings = {i: p[1] for i, p in enumerate(pairs)}
    fastest = min(timings, key=lambda i: ms(timings[i]))
    kept = next((i for i, p in enumerate(pairs) if _same(p[0], clean)), None)
    if kept is None or not _same(pairs[fastest][0], shipped):
        return None
    timings = nudged(timings, kept, fastest)
    return {**data, "configs_timings": [[p[0], timings[i]] for i, p in enumerate(pairs)]}


def _timing(value: Any) -> bool:
    """A timing as Triton writes one: a number, or [median, p20, p80]."""
    numbers = value if isinstance(value, list) else [value]
    return bool(numbers) and all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in numbers)


def _same(config: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether a config as Triton's disk cache writes it (``config.__dict__``) is ``spec``'s."""
    if not spec or config.get("kwargs") != spec.get("kwargs"):
        return False
    return all(config.get(name) == spec[name] for name in ("num_warps", "num_stages", "num_ctas") if name in spec)
