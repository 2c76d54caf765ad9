"""What the whole process shares: whether cleanflush is installed, the status row of every
patched site, the flush counts and the warnings given.

Every other piece of state belongs to the module that uses it (the policy to ``_policy``, the
read buffers to ``_read``, the fallbacks to ``_flush``, the patches to ``_patching``...), each
with its own lock, fresh in a forked child.  ``reset`` forgets what a process remembers (for
tests), through the resetters those modules register with ``on_reset``.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import wrapt

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
    # target name -> site -> its row
    sites: dict[str, dict[str, TargetStatus]] = field(default_factory=dict)
    # (counter label, policy that ran) -> flushes run through our wrappers in this process; a
    # flush whose read failed counts as the stock write it fell back to
    flushes: Counter[tuple[str, str]] = field(default_factory=Counter)
    warned: set[str] = field(default_factory=set)
    lock: threading.RLock = field(default_factory=threading.RLock)  # for the fields above


STATE = _State()
_RESETS: list[Callable[[], None]] = []


def on_reset(forget: Callable[[], None]) -> Callable[[], None]:
    """Register what a module forgets on ``reset`` (a decorator)."""
    _RESETS.append(forget)
    return forget


def reset() -> None:
    """Forget what tests must not carry from one to the next: rows, counts, warnings, and
    what the modules registered (failed devices, fallbacks, the policy default...).  Call it
    with cleanflush uninstalled (patches and read buffers are undone and released by
    ``uninstall``)."""
    with STATE.lock:
        STATE.sites.clear()
        STATE.flushes.clear()
        STATE.warned.clear()
    for forget in _RESETS:
        forget()


def _after_fork_in_child() -> None:
    # Another thread may have held the lock at the fork: the child would wait forever.  The
    # child reports its own flushes, not the parent's again.
    STATE.lock = threading.RLock()
    STATE.flushes = Counter()


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
    # A key's first += runs Counter.__missing__, where another thread can count in between
    # and be lost; verify and the tests read these counts as exact, and an uncontended lock
    # is noise next to the kernel launches of a flush.
    with STATE.lock:
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


def say_once(key: str, message: str) -> None:
    """``message`` as one line on stderr, the first time ``key`` is seen (a setting the user
    got wrong: said where they will read it, in the one line the docs promise)."""
    with STATE.lock:
        if key in STATE.warned:
            return
        STATE.warned.add(key)
    try:
        print(f"cleanflush: {message}", file=sys.stderr)
    except (OSError, AttributeError, ValueError):  # no stderr to say it on: nothing else can be done
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
