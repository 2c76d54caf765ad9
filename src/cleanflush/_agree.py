"""One pick for every rank and every run: the first pick published for a decision is the pick.

**Ranks.**  Where ``torch.distributed`` is initialized with more than one rank (or the user names
a store, ``cleanflush.pick_store``), each decision is agreed through the job's own key-value
store (the process group's: a ``TCPStore`` or a ``FileStore``), under a prefix of ours and the
job's run id.  A rank that tuned publishes its pick with ``compare_set`` (atomic: set where the
key is absent), which hands back the pick published first: its own, or another rank's, which it
takes.  A rank that finds a pick published before it tunes skips the tuning.  Nobody waits for
anybody: no collective, no ``wait``, every store operation bounded in time; a store that cannot
be reached leaves each rank its own pick, said once.

**Runs.**  ``CLEANFLUSH_PICK_FILE`` names a file (or a folder: a file per process in it): every
decision a run made is written there, and a later run (or a rank on a shared filesystem) takes
the file's pick where the decision (kernel, key, candidate configs) and the GPU and versions
match, and tunes where they do not, saying why.

What is published or read names one of the autotuner's own configs by its label; nothing read
runs code, and a pick naming no config of the decision's is not taken.  A decision's identity
(``Decision``) is its kind, kernel, key, the labels of every candidate config in the
autotuner's order, and the kernel's own hash where it has one.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import math
import os
import socket
import stat
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeGuard

from . import _env
from ._state import on_reset, say_once, warn_once

VERSION = 1  # of what is published and written: another is not read
PREFIX = "cleanflush/picks/v1/"  # the store keys' prefix, before the job's run id
STORE_TIMEOUT_S = 10.0  # the longest a store operation may take before the store is given up
MAX_FILE_BYTES = 64 << 20  # a pick file larger than this is not read (a job's picks are kilobytes)
MAX_PAYLOAD_BYTES = 64 << 10  # a published pick larger than this is not read (ours: a label and ~60 bytes)
LOCK_WAIT_S = 10.0  # the longest a write of the one pick file waits for another's to end
AUTO, ON, OFF = "auto", "on", "off"
FROM_FILE = "the pick file"  # where a pick taken from the pick file came from
STORE_MODES = (AUTO, ON, OFF)


@dataclass(frozen=True)
class Decision:
    """What makes two autotuning decisions the same, in any process, rank or run."""

    kind: str  # "triton", "inductor" (algorithm selection), "inductor-kernel"
    op: str  # the kernel
    key: str  # the autotuner's key for it (shapes, dtypes)
    configs: tuple[str, ...]  # every candidate's label, in the autotuner's order
    kernel: str = ""  # the kernel's own hash (its source), where it has one

    def name(self) -> str:
        """The decision as a store key: a hash of all of it."""
        text = json.dumps([self.kind, self.op, self.key, list(self.configs), self.kernel])
        return hashlib.sha256(text.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Agreed:
    """A pick made elsewhere: the config's label, and where it came from."""

    pick: str
    source: str  # "rank 3", "the pick file"
    ms: float | None = None  # its time where the tuning that made it measured one


def kernel_hash(tuner: Any) -> str:
    """A hash of the kernel's source (Triton's ``JITFunction.src``, else the function's own), or
    "" where it has none to read."""
    fn = getattr(tuner, "fn", None)
    for _ in range(6):  # through @triton.heuristics and the interpreter's wrapper
        src = getattr(fn, "src", None)
        if isinstance(src, str):
            return hashlib.sha256(src.encode()).hexdigest()[:16]
        if isinstance(fn, types.FunctionType):
            try:
                return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()[:16]
            except (OSError, TypeError):  # no source file (a kernel made at run time)
                return ""
        fn = getattr(fn, "fn", None)
    return ""


# ---- the store -------------------------------------------------------------------------


@dataclass
class _Store:
    """The store picks are agreed through in this process (its owner)."""

    named: Any = None  # a store the user named (``pick_store``)
    prefixed: Any = None  # the store in use, under our prefix
    base: Any = None  # what ``prefixed`` was made over
    dead: str | None = None  # why the store is no longer used
    lock: threading.Lock = field(default_factory=threading.Lock)


STORE = _Store()


def pick_store(store: Any = None) -> None:
    """Agree on picks through ``store`` (a ``torch.distributed.Store`` every rank reaches); None:
    through the default process group's store, where ``torch.distributed`` is initialized."""
    with STORE.lock:
        STORE.named, STORE.prefixed, STORE.base, STORE.dead = store, None, None, None


def mode_from(value: str | None) -> tuple[str, str | None]:
    """The mode a ``CLEANFLUSH_PICK_STORE`` value selects, and what is wrong with it (None: nothing)."""
    text = (value or "").strip().lower()
    found = {"": AUTO, "1": ON, "true": ON, "yes": ON, "0": OFF, "false": OFF, "no": OFF}.get(text, text)
    if found not in STORE_MODES:
        return (
            AUTO,
            f"{_env.PICK_STORE_VAR}={value!r} is not valid; use one of: {', '.join(STORE_MODES)} (auto is used)",
        )
    return found, None


def store_mode() -> str:
    """``CLEANFLUSH_PICK_STORE``: auto (under a rule that changes picks), on, off (an invalid
    value is said once, and auto used)."""
    found, problem = mode_from(_env.value(_env.PICK_STORE_VAR))
    if problem:
        warn_once("agree:mode", problem)
    return found


def _store(chooses: bool) -> Any:
    """The store to agree through now, under our prefix, or None."""
    # asked at every autotuned launch: a process of one rank answers before the variable is read
    if STORE.dead or (STORE.named is None and not _distributed()):
        return None
    mode = store_mode()
    if mode == OFF or (mode == AUTO and not chooses):
        return None
    base = STORE.named if STORE.named is not None else _group_store()
    if base is None:
        return None
    with STORE.lock:
        if STORE.base is not base:
            dist = sys.modules["torch.distributed"]
            run = (_env.value("TORCHELASTIC_RUN_ID") or "").strip()
            STORE.prefixed, STORE.base = dist.PrefixStore(PREFIX + (run if run != "none" else "") + "/", base), base
        return STORE.prefixed


def _distributed() -> bool:
    """Whether ``torch.distributed`` runs a process group (imported by the job, never by us)."""
    dist = sys.modules.get("torch.distributed")
    try:
        return dist is not None and dist.is_available() and dist.is_initialized()
    except (AttributeError, RuntimeError):  # a build without the functions, or one that cannot answer
        return False


def _group_store() -> Any:
    """The default process group's store, where ``torch.distributed`` runs more than one rank."""
    if not _distributed():
        return None
    dist = sys.modules["torch.distributed"]
    try:
        if dist.get_world_size() < 2:
            return None
        from torch.distributed.distributed_c10d import _get_default_store

        return _get_default_store()
    except (ImportError, RuntimeError, ValueError) as exc:  # a group torn down, a layout this does not know
        _give_up(f"the process group's store cannot be read ({exc!r})")
        return None


def _bounded(operation: Callable[[], Any]) -> Any:
    """``operation()`` on the store, given ``STORE_TIMEOUT_S`` at most; a store that does not
    answer in time, or fails, is given up for this process (said once) and None returned."""
    answer: list[Any] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(operation())
        except (RuntimeError, OSError, ValueError, TypeError) as exc:  # the store's client failing (DistError...)
            failed.append(exc)

    worker = threading.Thread(target=run, name="cleanflush-pick-store", daemon=True)
    worker.start()
    worker.join(STORE_TIMEOUT_S)
    if worker.is_alive():
        _give_up(f"it did not answer in {STORE_TIMEOUT_S:g} s")
        return None
    if failed or not answer:  # not answer: it raised something else, which the thread printed
        _give_up(f"it failed: {failed[0]!r}" if failed else "it failed")
        return None
    return answer[0]


def _give_up(why: str) -> None:
    STORE.dead = why
    warn_once("agree:store", f"picks are no longer agreed through the job's store ({why}); each rank keeps its own")


def payload(pick: str, ms: float | None) -> str:
    """What is published for a decision: the pick's label, its time, and who published it."""
    return json.dumps({"v": VERSION, "pick": pick, "ms": ms, "rank": _rank()})


def read_payload(text: Any, source: str = "rank") -> Agreed | None:
    """A published pick, or None where it is not one (said once)."""
    try:
        if len(text) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"it holds {len(text)} bytes, more than a pick's {MAX_PAYLOAD_BYTES}")
        found = json.loads(text)
        if not isinstance(found, dict) or found.get("v") != VERSION or not isinstance(found.get("pick"), str):
            raise ValueError("not a pick of this version")
        ms = found.get("ms")
        rank = found.get("rank")
    except (ValueError, RecursionError) as exc:  # json's errors, bytes no UTF-8, a value nested past the parser
        why = "it nests deeper than a pick does" if isinstance(exc, RecursionError) else exc
        warn_once("agree:payload", f"a pick in the job's store could not be read ({why}); that decision is tuned here")
        return None
    who = f"rank {rank}" if isinstance(rank, int) and not isinstance(rank, bool) else "another rank"
    return Agreed(found["pick"], who if source == "rank" else source, float(ms) if _number(ms) else None)


def active(chooses: bool) -> bool:
    """Whether decisions made now are agreed with other ranks or runs (``chooses``: the rule
    in use changes picks)."""
    return file_path() is not None or _store(chooses) is not None


def published(decision: Decision, chooses: bool) -> Agreed | None:
    """The pick published for ``decision`` in the job's store, before this rank tunes it."""
    store = _store(chooses)
    if store is None:
        return None
    name = decision.name()
    text = _bounded(lambda: store.get(name) if store.check([name]) else None)
    return read_payload(text) if text is not None else None


def publish(decision: Decision, pick: str, ms: float | None, chooses: bool) -> Agreed | None:
    """Publish this rank's pick for ``decision``; the pick published first where another rank's
    was (None where this rank's is the first, or there is no store)."""
    store = _store(chooses)
    if store is None:
        return None
    mine = payload(pick, ms)
    first = _bounded(lambda: store.compare_set(decision.name(), "", mine))
    if first is None:
        return None
    text = first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)
    return None if text == mine else read_payload(text)


def not_offered(decision: Decision, found: Agreed) -> None:
    """Said once for ``decision``: the pick ``found`` names none of the configs offered here, so
    this process keeps its own (and may differ from the ranks that took it)."""
    say_once(
        f"agree:not-offered:{decision.name()}",
        f"the pick {found.source} gave for {decision.op} {decision.key} ({found.pick[:100]!r}) is none of the "
        "configs offered here; this process keeps its own",
    )


def _rank() -> int | None:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except (RuntimeError, ValueError):  # a group torn down meanwhile: the launcher's word stands
        pass
    found = (_env.value("RANK") or "").strip()
    return int(found) if found.isascii() and found.isdigit() else None


rank = _rank  # this process's rank, as decisions name it


# ---- the pick file ---------------------------------------------------------------------


@dataclass
class Entry:
    """A decision as a pick file keeps it."""

    decision: Decision
    pick: str
    rule: str
    policy: str
    timings_ms: dict[str, float]
    gpu: str
    torch: str
    triton: str
    written: float  # unix time
    host: str
    pid: int
    rank: int | None = None

    def line(self) -> dict[str, Any]:
        found = asdict(self)
        found["decision"]["configs"] = list(self.decision.configs)
        return found


def entry_from(data: Any) -> Entry:
    """An entry read from a pick file, checked; a ValueError saying what is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("decision"), dict):
        raise ValueError("an entry is not a mapping with a decision")
    d = data["decision"]
    if not all(isinstance(d.get(k), str) for k in ("kind", "op", "key", "kernel")):
        raise ValueError("an entry's decision has no kind, op, key or kernel")
    configs = d.get("configs")
    if not isinstance(configs, list) or not all(isinstance(c, str) for c in configs):
        raise ValueError("an entry's decision has no list of configs")
    texts = ("pick", "rule", "policy", "gpu", "torch", "triton", "host")
    if not all(isinstance(data.get(k), str) for k in texts):
        raise ValueError(f"an entry lacks one of {', '.join(texts)}")
    timings = data.get("timings_ms")
    if not isinstance(timings, dict) or not all(_number(t) for t in timings.values()):
        raise ValueError("an entry's timings_ms is not a mapping of configs to numbers")
    if not _number(data.get("written")) or not isinstance(data.get("pid"), int):
        raise ValueError("an entry has no written time or pid")
    decision = Decision(d["kind"], d["op"], d["key"], tuple(configs), d["kernel"])
    fields = {k: data[k] for k in texts}
    rank = data.get("rank") if isinstance(data.get("rank"), int) else None
    written = float(data["written"])
    return Entry(decision, **fields, timings_ms=dict(timings), written=written, pid=data["pid"], rank=rank)


def _number(value: Any) -> TypeGuard[int | float]:
    """Whether ``value`` (read from JSON) is a finite number a float holds."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float (JSON's integers have no bound)
        return False


@dataclass
class _File:
    """The pick file of this process (its owner): what was read, and what this process wrote."""

    path: str | None = None  # as the variable named it when read
    read: dict[tuple[str, str, str], list[Entry]] = field(default_factory=dict)  # (kind, op, key) -> entries
    stamp: Any = None  # what the file (or folder) looked like when read: read again when it changes
    mine: list[Entry] = field(default_factory=list)  # written by this process
    lock: threading.RLock = field(default_factory=threading.RLock)


FILE = _File()
FORMAT = "cleanflush picks"


def file_path() -> str | None:
    return _env.value(_env.PICK_FILE_VAR) or None


def _is_folder(path: str) -> bool:
    return path.endswith(os.sep) or os.path.isdir(path)


def _own_file(folder: str) -> str:
    return os.path.join(folder, f"picks-{socket.gethostname()}-{os.getpid()}.json")


def files_of(path: str) -> list[str]:
    """The pick files ``path`` names: itself, or a folder's files (none where it cannot be listed)."""
    if not _is_folder(path):
        return [path] if os.path.exists(path) else []
    try:
        names = sorted(n for n in os.listdir(path) if n.startswith("picks-") and n.endswith(".json"))
    except OSError:  # not there yet, or not ours to read: no picks to take
        return []
    return [os.path.join(path, n) for n in names]


def _stamp(files: list[str]) -> tuple[tuple[str, int, int], ...]:
    found = []
    for name in files:
        try:
            st = os.stat(name)
        except OSError:  # gone meanwhile: read as absent
            continue
        found.append((name, st.st_mtime_ns, st.st_size))
    return tuple(found)


def read_file(name: str) -> list[Entry]:
    """The entries of one pick file; a ValueError saying why it cannot be read."""
    try:
        data = json.loads(_bounded_read(name).decode("utf-8"))
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    except RecursionError:  # a hostile file nested deeper than the parser goes
        raise ValueError("it nests deeper than a pick file does") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError("it is not a cleanflush pick file")
    if data.get("version") != VERSION:
        raise ValueError(f"it is version {data.get('version')!r} of the format; this cleanflush reads {VERSION}")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise ValueError("its entries are not a list")
    return [entry_from(e) for e in entries]


def _bounded_read(name: str) -> bytes:
    """The bytes of the regular file ``name``, up to ``MAX_FILE_BYTES``: a FIFO, a device or a
    socket in its place (or behind a link there) is never read, since it may block or never end."""
    handle = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO's open would wait for a writer
    with os.fdopen(handle, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError("it is not a regular file")
        data = f.read(MAX_FILE_BYTES + 1)  # a file that grows meanwhile is read no further
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"it holds more than a pick file's {MAX_FILE_BYTES} bytes")
    return data


def _refresh(path: str) -> None:
    """Read the pick file (or folder) again where it changed since it was last read."""
    files = files_of(path)
    stamp = (path, _stamp(files))
    if FILE.stamp == stamp:
        return
    FILE.stamp, FILE.path, FILE.read = stamp, path, {}
    for name in files:
        try:
            entries = read_file(name)
        except (ValueError, UnicodeDecodeError) as exc:  # torn, hostile, another version: tuned as usual
            said = f"{_env.PICK_FILE_VAR}: {name} cannot be read ({exc}); its picks are not taken"
            say_once(f"pickfile:{name}", said)
            continue
        for entry in entries:
            d = entry.decision
            FILE.read.setdefault((d.kind, d.op, d.key), []).append(entry)


def in_file(decision: Decision, here: dict[str, str]) -> Agreed | None:
    """The pick file's pick for ``decision`` on this machine (``here``: gpu, torch, triton), or
    None; an entry for the same kernel and key that no longer matches is said once, with why."""
    path = file_path()
    if path is None:
        return None
    with FILE.lock:
        _refresh(path)
        entries = list(FILE.read.get((decision.kind, decision.op, decision.key), []))
    matching = [e for e in entries if _mismatch(e, decision, here) is None]
    if matching:
        first = min(matching, key=lambda e: (e.written, e.host, e.pid))  # every reader takes the same one
        return Agreed(first.pick, FROM_FILE, first.timings_ms.get(first.pick))
    if entries:
        why = _mismatch(entries[-1], decision, here)
        say_once(
            f"pickfile:retuned:{decision.op}:{decision.key}",
            f"{_env.PICK_FILE_VAR}: {decision.op} {decision.key} is tuned again here: {why}",
        )
    return None


def _mismatch(entry: Entry, decision: Decision, here: dict[str, str]) -> str | None:
    """Why a file's entry for the same kernel and key is not this decision, or None."""
    if entry.decision.configs != decision.configs:
        return "its candidate configs are others now"
    if entry.decision.kernel != decision.kernel:
        return "the kernel's source changed"
    if entry.pick not in decision.configs and entry.pick not in entry.timings_ms:  # a pruner's config was timed
        return f"its pick {entry.pick!r} is none of the configs"
    for what in ("gpu", "triton", "torch"):
        if getattr(entry, what) != here[what]:
            return f"it was tuned with another {what} ({getattr(entry, what)}, here {here[what]})"
    return None


def write(entry: Entry) -> None:
    """Add ``entry`` to the pick file: a folder's file of this process's own, or the one file,
    merged with what other processes wrote meanwhile; never through a link (said once)."""
    path = file_path()
    if path is None:
        return
    with FILE.lock:
        FILE.mine.append(entry)
        try:
            if _is_folder(path):
                os.makedirs(path, exist_ok=True)
                _replace(_own_file(path), FILE.mine)
            else:
                _merge_into(path)
        except (OSError, ValueError) as exc:  # a folder we cannot write, a link: the run's picks go unkept
            say_once(f"pickfile:write:{path}", f"{_env.PICK_FILE_VAR}: cannot write {path} ({exc}); picks are not kept")


def _merge_into(path: str) -> None:
    """Write this process's entries into the one file, keeping every other process's: under a
    lock on the folder that holds it (``flock``, which creates nothing and goes with a process
    that dies), waited for ``LOCK_WAIT_S`` at most."""
    if os.path.islink(path):  # said as such, before what is behind it is read
        raise ValueError("it is a symbolic link")
    folder = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY)
    try:
        _lock(folder)
        mine = {_identity(e) for e in FILE.mine}
        others = [e for e in _entries_in(path) if _identity(e) not in mine]
        _replace(path, others + FILE.mine)
    finally:
        os.close(folder)  # and the lock with it


def _lock(folder: int) -> None:
    """Hold ``folder``'s lock, or a ValueError once ``LOCK_WAIT_S`` have passed."""
    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            fcntl.flock(folder, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise ValueError(f"another process held its folder's lock for {LOCK_WAIT_S:g} s") from None
            time.sleep(0.01)


def _identity(entry: Entry) -> str:
    return json.dumps(entry.line(), sort_keys=True)


def _entries_in(path: str) -> list[Entry]:
    """The entries of ``path`` as it is now: none where it is absent or empty; a ValueError where
    it holds anything else this cleanflush cannot read (another version's picks, a file of the
    user's named by mistake), which is never written over.  Our writers rename a whole file into
    place, so none of them leaves a torn one."""
    try:
        found = os.stat(path)
    except FileNotFoundError:  # not written yet
        return []
    if stat.S_ISREG(found.st_mode) and found.st_size == 0:  # made empty by hand (touch): nothing to keep
        return []
    try:
        return read_file(path)
    except (ValueError, UnicodeDecodeError) as exc:  # kept as it is; this process's picks go unkept
        raise ValueError(f"it is left as it is: {exc}") from None


def _replace(path: str, entries: list[Entry]) -> None:
    """Write ``entries`` to ``path`` whole: a temporary file beside it, then renamed over it."""
    if os.path.islink(path):
        raise ValueError("it is a symbolic link")
    folder = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".picks-", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            json.dump({"format": FORMAT, "version": VERSION, "entries": [e.line() for e in entries]}, f, indent=1)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def here() -> dict[str, str]:
    """The GPU and versions a pick made now was made with."""
    torch = sys.modules.get("torch")
    gpu = "cpu"
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            gpu = str(torch.cuda.get_device_name(torch.cuda.current_device()))
    except RuntimeError:  # a CUDA that cannot answer: named as no GPU
        gpu = "cpu"
    triton = sys.modules.get("triton")
    return {
        "gpu": gpu,
        "torch": str(getattr(torch, "__version__", "")),
        "triton": str(getattr(triton, "__version__", "")),
    }


def entry(decision: Decision, pick: str, rule: str, policy: str, timings_ms: dict[str, float]) -> Entry:
    """This process's entry for a decision it made now."""
    at = here()
    return Entry(
        decision,
        pick,
        rule,
        policy,
        dict(timings_ms),
        gpu=at["gpu"],
        torch=at["torch"],
        triton=at["triton"],
        written=time.time(),
        host=socket.gethostname(),
        pid=os.getpid(),
        rank=_rank(),
    )


@on_reset
def _forget() -> None:
    pick_store(None)
    with FILE.lock:
        FILE.path, FILE.read, FILE.stamp, FILE.mine = None, {}, None, []


def _fresh_in_child() -> None:
    # a forked child has its own locks and writes its own entries; the store's client is the parent's
    STORE.lock = threading.Lock()
    FILE.lock = threading.RLock()
    FILE.mine = []


os.register_at_fork(after_in_child=_fresh_in_child)
