"""Everything cleanflush remembers in a process, in one object, with one reset.

``STATE`` holds what the rest of the package reads and writes: whether it is installed,
the status of every patched site, the flush counters, the warnings given, the read buffers,
the applied patches, the process-wide side of the policy, and the locks that guard them.
A forked child gets fresh locks (another thread may have held one at the fork) and counts
only its own flushes.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import wrapt

from . import _env

State = Literal["patched", "pending", "disabled", "unsupported", "failed", "absent", "off"]
STATES: tuple[State, ...] = ("patched", "pending", "disabled", "unsupported", "failed", "absent", "off")


@dataclass(frozen=True)
class TargetStatus:
    """One row of ``cleanflush.status()``: a place where a benchmarker flushes L2.

    ``state`` is one of: ``patched`` (it flushes through cleanflush), ``pending`` (installed,
    not imported yet: patched when it is), ``disabled`` (by ``CLEANFLUSH_DISABLE``),
    ``unsupported`` (a layout cleanflush does not know: stock flush kept), ``failed`` (the
    patch or a flush failed: stock flush kept), ``absent`` (not installed), ``off``
    (cleanflush is not installed).
    """

    name: str  # the target, as CLEANFLUSH_DISABLE names it: "triton", "inductor", ...
    target: str  # the site, e.g. "triton.backends.nvidia.driver.CudaDriver.clear_cache"
    version: str | None  # the installed version of the target's package
    state: State
    detail: str  # what the patched site does, or why it is not patched

    @property
    def patched(self) -> bool:
        return self.state == "patched"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "target": self.target,
            "version": self.version,
            "state": self.state,
            "patched": self.patched,
            "detail": self.detail,
        }


class Site(NamedTuple):
    """What a patch module's ``apply`` says about one site."""

    target: str
    state: State
    detail: str


@dataclass
class _State:
    installed: bool = False
    source: str | None = None  # "import", "install()", "autoload"
    env_before_install: str | None = None
    hooks_registered: bool = False  # once per process, also across importlib.reload(cleanflush)
    pid: int = field(default_factory=os.getpid)
    # target name -> site -> its row
    sites: dict[str, dict[str, TargetStatus]] = field(default_factory=dict)
    # (counter label, policy that ran) -> flushes run through our wrappers in this process; a
    # flush whose read failed counts as the stock write it fell back to
    flushes: Counter[tuple[str, str]] = field(default_factory=Counter)
    warned: set[str] = field(default_factory=set)
    # device -> why its read buffer could not be prepared (not retried) / why the read kernel
    # could not be built there (torch's sum reads instead) / why its hold could not (reads on
    # an empty stream last as long as their bytes)
    read_unavailable: dict[str, str] = field(default_factory=dict)
    sweep_unavailable: dict[str, str] = field(default_factory=dict)
    hold_unavailable: dict[str, str] = field(default_factory=dict)
    # label -> why its flushes ran the stock code after a surprise (said once, shown by status)
    fallbacks: dict[str, str] = field(default_factory=dict)
    buffers: dict[Any, Any] = field(default_factory=dict)  # device -> _flush.ReadBuffer (a type _flush owns)
    # device -> the one-kernel write-read (_flush.write_read_kernel), or why it could not be built
    write_read_kernels: dict[Any, Any] = field(default_factory=dict)
    # (label, the write method that flushes, one kernel) -> its flushing tensor class
    tensor_classes: dict[tuple[str, str, bool], type] = field(default_factory=dict)
    patches: dict[str, Any] = field(default_factory=dict)  # target name -> _patching.PatchSet
    made: dict[tuple[int, str], Any] = field(default_factory=dict)  # (id(owner), name) -> Patch, ever made
    # the policy's process-wide side (_policy): the default, every block open in any thread
    # (oldest first), whether blocks show in CLEANFLUSH, and CLEANFLUSH without blocks
    default_policy: str = _env.DEFAULT_POLICY
    open_blocks: list[Any] = field(default_factory=list)
    exporting: bool = False
    env_base: str | None = None
    # _local_buffer: benchmarks waiting for their buffer in any thread, and torch.empty before the swap
    waiting: int = 0
    stock_empty: Any = None
    reported: bool = False  # this process's CLEANFLUSH_REPORT line is written
    # locks: LOCK for the fields above, and one each for the read buffers, CLEANFLUSH and torch.empty
    lock: threading.RLock = field(default_factory=threading.RLock)
    buffer_lock: threading.Lock = field(default_factory=threading.Lock)
    env_lock: threading.Lock = field(default_factory=threading.Lock)
    empty_lock: threading.Lock = field(default_factory=threading.Lock)


STATE = _State()


def reset() -> None:
    """Forget what tests must not carry from one to the next: rows, counts, warnings, failed
    devices, the policy default.  Call it with cleanflush uninstalled (patches and read
    buffers are undone and released by ``uninstall``)."""
    with STATE.lock:
        STATE.sites.clear()
        STATE.flushes.clear()
        STATE.warned.clear()
        STATE.read_unavailable.clear()
        STATE.sweep_unavailable.clear()
        STATE.hold_unavailable.clear()
        STATE.fallbacks.clear()
        STATE.default_policy = _env.DEFAULT_POLICY
        STATE.reported = False


def _after_fork_in_child() -> None:
    # Another thread may have held any of the locks at the fork: the child would wait forever.
    STATE.lock = threading.RLock()
    STATE.buffer_lock = threading.Lock()
    STATE.env_lock = threading.Lock()
    STATE.empty_lock = threading.Lock()
    # The parent's read buffers are CUDA memory the child cannot use, and their signal is
    # pinned host memory the child does not have (touching it would crash, not raise).
    STATE.buffers = {}
    STATE.write_read_kernels = {}
    # The child reports its own flushes, not the parent's again.
    STATE.pid = os.getpid()
    STATE.flushes = Counter()
    STATE.reported = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def record(name: str, site: Site, version: str | None = None) -> None:
    """Set the status row of one site of target ``name`` (``version``: the target's, as the
    rows already recorded for it say when not given)."""
    with STATE.lock:
        rows = STATE.sites.setdefault(name, {})
        if version is None:
            version = next((row.version for row in rows.values() if row.version), None)
        rows[site.target] = TargetStatus(name, site.target, version, site.state, site.detail)


def sites(name: str) -> list[TargetStatus]:
    """The rows recorded for target ``name`` now (patch modules ask about each other)."""
    with STATE.lock:
        return list(STATE.sites.get(name, {}).values())


def count_flush(label: str, ran: str) -> None:
    """Count a flush under the policy that actually ran, after it ran."""
    # Counter += is not atomic across threads; a lost count is harmless, a lock per flush
    # is not free, so none is taken here.
    STATE.flushes[(label, ran)] += 1


def warn_once(key: str, message: str) -> None:
    """Warn the first time ``key`` is seen; benchmarks run in loops and must not spam.

    Never raises: under ``-W error`` (or pytest's ``filterwarnings = error``) the warning
    would become an exception inside the user's benchmark or import, so it goes to stderr
    instead.
    """
    with STATE.lock:
        if key in STATE.warned:
            return
        STATE.warned.add(key)
    text = f"cleanflush: {message}"
    try:
        warnings.warn(text, RuntimeWarning, stacklevel=_first_frame_outside())
    except Exception:  # a warnings filter set to "error": the same line, on stderr
        try:
            print(f"{text} (RuntimeWarning, shown here because warnings are errors)", file=sys.stderr)
        except OSError:  # no stderr to say it on: nothing else can be done
            pass


_OURS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep for path in (__file__, wrapt.__file__))
_BOOT = os.path.splitext(os.path.abspath(getattr(sys.modules.get("_cleanflush_boot"), "__file__", "") or "-"))[0]


def _importlib(filename: str) -> bool:
    # warnings.warn skips these frames itself when it counts a stacklevel
    return "importlib" in filename and "_bootstrap" in filename


def _ours(filename: str) -> bool:
    path = os.path.abspath(filename)
    return path.startswith(_OURS) or os.path.splitext(path)[0] == _BOOT


def _first_frame_outside() -> int:
    """The stacklevel of the first caller outside cleanflush, wrapt, the start-up hook and
    the import system: the warning then points at the user's or the harness's line that led
    to it (what happens at an import points at that import)."""
    level, frame = 2, sys._getframe(2)  # 1: warnings.warn's caller (warn_once); 2: its caller
    while frame.f_back is not None and (_importlib(frame.f_code.co_filename) or _ours(frame.f_code.co_filename)):
        frame = frame.f_back
        if not _importlib(frame.f_code.co_filename):
            level += 1
    return level
