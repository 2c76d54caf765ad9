"""Persisting L2: the part of L2 a process set aside for persisting lines, given back to the
flush before a clean flush runs.

Why.  ``cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, n)`` sets aside up to n bytes of
L2 for lines that an access-policy window (a stream's, or a captured kernel node's) marks
persisting.  Other accesses, the sweeps of a flush among them, use that part only where no
persisting line holds it, so data persisted there survives any write or read of other memory
(llm.c #851: a kernel with a window read "4x the HBM peak" on an L40S).  So before a clean
flush, where the limit is not 0 (``before_flush``): the limit set to 0, every persisting line
made normal (``cudaCtxResetPersistingL2Cache``), and the current stream's window cleared; the
flush's write and read then evict those lines like any other.  GPU MODE's pygpubench does the
same before its write (PR #49: ``disarm_l2_persistence`` in csrc/clear_l2.cu, read at
apaz-cli/pygpubench@3180e97), and so does nvbench's ``--disable-persistent-l2-cache`` (PR #459:
nvbench/detail/persisting_l2_cache_reset.cuh, read at NVIDIA/nvbench@30847a0), which also
gives the limit back when it is done: ``release`` (uninstall) does too.

When the limit is read.  Setting it drains the GPU, so it is set only where it reads non-zero;
reading it is a driver call (its host cost is in benchmarks/persist.py), and a flush's host
time is what a fast benchmark loop waits for, so it is not read on every flush.  It changes
only where code of this process sets it, which can happen between any two flushes (set-up
before a benchmark, a kernel's first call): it is read at a device's first flush, at
``prepare`` (where a harness makes its cache, before its loop: a reset's drain lands there,
not among the timed calls), and again at a flush that comes ``READ_AGAIN_NS`` or more after
the last reading.  So a change is seen within that time of the host's, at a cost of at most
one reading per ``READ_AGAIN_NS``; after a reset cleanflush knows it is 0.

Through which binding (``_load``): cuda-python's ``cuda.bindings.runtime`` where it imports
and answers (its calls and enums read in cuda-bindings 13.5.0; torch's own
``torch.cuda._utils`` prefers it too), else ``ctypes`` on the CUDA runtime library torch
loaded (found as torch itself checks for it: libcudart in ``/proc/self/maps``,
``_load_global_deps`` in torch/__init__.py, read at pytorch cf30153, the 2.13.0 wheel; opened
with RTLD_NOLOAD, never a second copy).  A failed call's error is cleared from the runtime,
or torch's next launch check would report it as the user's.  A GPU before compute capability 8.0, or ROCm, has no
set-aside: nothing is checked there.

Never inside CUDA-graph capture: a captured flush runs no host code at replay, and setting the
limit or resetting lines while a stream captures would invalidate the capture.  A window a
graph captured lives in its kernel nodes, which no stream attribute reaches (docs/limits.md).
Any failure: the flush runs as before, said once, and shown by ``cleanflush status``.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ._read import one_line
from ._state import State, TargetStatus, on_reset, warn_once

if TYPE_CHECKING:
    import torch

# A reading of the limit is at most this old at a flush: a change made between two flushes
# is seen within this much of the host's time, and a loop pays one driver call per this much
# time at most (benchmarks/persist.py has the call's cost).
READ_AGAIN_NS = 1_000_000
# The CUDA runtime's values (driver_types.h): cudaLimitPersistingL2CacheSize,
# cudaDevAttrMaxPersistingL2CacheSize, cudaStreamAttributeAccessPolicyWindow
LIMIT_PERSISTING = 0x06
ATTR_MAX_PERSISTING = 108
ATTR_WINDOW = 1
WINDOW_VALUE_BYTES = 64  # sizeof(cudaStreamAttrValue) in CUDA 12 and 13: a union padded to 64 bytes
# what a binding can raise: a library or symbol that is not there, a call that fails, a
# torch without CUDA
FAILURES = (ImportError, OSError, AttributeError, RuntimeError, TypeError, ValueError, AssertionError)
clock: Callable[[], int] = time.perf_counter_ns  # tests hand in their own


class Unavailable(RuntimeError):
    """A call of the runtime failed, or no runtime could be found."""


class Runtime(Protocol):
    """The few calls of the CUDA runtime the reset needs, on device ``index``."""

    name: str  # what status and verify call it

    def max_persisting(self, index: int) -> int: ...
    def limit(self, index: int) -> int: ...
    def set_limit(self, index: int, nbytes: int) -> None: ...
    def reset_lines(self, index: int) -> None: ...
    def clear_window(self, index: int) -> None: ...


@dataclass
class Device:
    """What is known of one device's set-aside."""

    checked: bool  # False: nothing to do here (no set-aside possible, or the check failed)
    limit: int = 0  # bytes set aside at the last reading
    read_ns: int = 0  # when it was read
    max_bytes: int = 0  # the most the device can set aside (persistingL2CacheMaxSize)
    taken: int = 0  # the last non-zero limit a reset set to 0 (``release`` gives it back)
    resets: int = 0


@dataclass
class _Persist:
    runtime: Runtime | None = None
    devices: dict[torch.device, Device] = field(default_factory=dict)
    # (what, device) -> (state, why): what failed or cannot be done there, for status
    problems: dict[tuple[str, str], tuple[State, str]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)


STATE = _Persist()
CHECK, WINDOW, CAPTURE, GIVE_BACK = "check", "window", "capture", "give back"


def before_flush(device: torch.device, capturing: bool, fresh: bool = False) -> None:
    """Before a clean flush on ``device``: where part of L2 is set aside for persisting lines,
    set the limit to 0, reset those lines and clear the current stream's window.  A lookup
    where nothing is set aside and the reading is younger than ``READ_AGAIN_NS`` (``fresh``:
    read it now whatever its age); never raises."""
    if device.type != "cuda":
        return
    seen = STATE.devices.get(device)
    if capturing:
        if seen is not None and seen.limit:
            _captured(device, seen.limit)
        return
    if seen is None or (seen.checked and (fresh or clock() - seen.read_ns >= READ_AGAIN_NS)):
        seen = check(device)
    if seen.limit:
        _reset(device, seen)


def check(device: torch.device) -> Device:
    """Read ``device``'s limit now (loading the runtime on first use); never raises: a
    failure is said once, kept for status, and the device is not checked again."""
    with STATE.lock:
        seen = STATE.devices.get(device) or Device(checked=True)
        if not seen.checked:
            return seen
        try:
            if STATE.runtime is None and not _can_set_aside(device):
                seen = Device(checked=False)
            else:
                index = _index(device)
                runtime = STATE.runtime or _load(index)
                seen.max_bytes = seen.max_bytes or runtime.max_persisting(index)
                seen.checked = seen.max_bytes > 0  # a device that cannot set any aside: nothing to read again
                seen.limit = runtime.limit(index) if seen.checked else 0
                seen.read_ns = clock()
        except FAILURES as exc:  # no binding, a call that failed: the flush runs as before
            _problem(
                CHECK,
                device,
                "failed",
                f"it could not be checked ({one_line(exc)}): a part of L2 set aside there for persisting lines "
                "survives the flush",
            )
            seen.checked, seen.limit = False, 0  # what a reset took stays, for uninstall to give back
        STATE.devices[device] = seen
        return seen


def _reset(device: torch.device, seen: Device) -> None:
    """The limit to 0 (this drains the GPU), the persisting lines to normal, the stream's window cleared."""
    with STATE.lock:
        runtime, index = STATE.runtime, _index(device)
        if runtime is None or not seen.limit:  # another thread reset it meanwhile
            return
        try:
            runtime.set_limit(index, 0)
            runtime.reset_lines(index)
        except FAILURES as exc:  # the flush runs as before, the lines kept
            _problem(CHECK, device, "failed", f"it could not be reset ({one_line(exc)}): its persisting lines survive")
            seen.checked, seen.limit = False, 0  # not tried again
            return
        seen.taken, seen.limit, seen.resets = seen.limit, 0, seen.resets + 1
        try:
            runtime.clear_window(index)
        except FAILURES as exc:  # with no set-aside left, a window has no L2 to persist lines in
            _problem(WINDOW, device, "failed", f"its current stream's window could not be cleared ({one_line(exc)})")


def _captured(device: torch.device, limit: int) -> None:
    _problem(
        CAPTURE,
        device,
        "unsupported",
        f"{limit / 2**20:g} MiB of L2 was set aside for persisting lines when a flush was captured in a CUDA graph, "
        "which cannot reset it at replay (docs/limits.md)",
    )


def _problem(what: str, device: torch.device, state: State, why: str) -> None:
    """Said once per device and kind, and kept for status."""
    with STATE.lock:
        STATE.problems.setdefault((what, str(device)), (state, why))
    warn_once(f"persisting:{what}:{device}", f"persisting L2 on {device}: {why}")


def _index(device: torch.device) -> int:
    """The CUDA device index ``device`` names ("cuda" alone: the current device)."""
    if device.index is not None:
        return device.index
    import torch

    return int(torch.cuda.current_device())


def _can_set_aside(device: torch.device) -> bool:
    """Whether ``device`` can set aside L2 at all (CUDA, compute capability 8.0 or later),
    asked before any binding is loaded: older GPUs and ROCm need none."""
    import torch

    return not torch.version.hip and torch.cuda.get_device_capability(device)[0] >= 8


def reading(device: torch.device) -> dict[str, Any]:
    """What ``cleanflush verify`` records: the limit read now, the most the device can set
    aside, the binding, the resets made so far, or why it could not be read."""
    seen = check(device)
    with STATE.lock:
        problem = STATE.problems.get((CHECK, str(device)))
        runtime = STATE.runtime
    return {
        "limit_bytes": seen.limit if seen.checked else None,
        "max_bytes": seen.max_bytes if seen.checked else (0 if problem is None else None),
        "resets": seen.resets,
        "binding": runtime.name if runtime is not None else None,
        "error": problem[1] if problem is not None else None,
    }


def release() -> None:
    """Give back the set-aside a reset took, where the limit still reads 0, and forget every
    reading (uninstall calls this; what failed stays for status)."""
    with STATE.lock:
        runtime = STATE.runtime
        for device, seen in STATE.devices.items():
            if runtime is None or not seen.taken:
                continue
            try:
                if runtime.limit(_index(device)) == 0:
                    runtime.set_limit(_index(device), seen.taken)
            except FAILURES as exc:  # uninstall goes on; the limit stays 0
                _problem(GIVE_BACK, device, "failed", f"its set-aside could not be given back ({one_line(exc)})")
        STATE.devices.clear()
        STATE.runtime = None


def status_rows() -> list[TargetStatus]:
    """One row per device where persisting L2 could not be checked, reset or given back, or
    where a captured flush found it set aside."""
    with STATE.lock:
        problems = sorted(STATE.problems.items())
    return [
        TargetStatus("cleanflush", f"persisting L2 on {device}", None, state, why)
        for (_, device), (state, why) in problems
    ]


@on_reset
def _forget() -> None:
    with STATE.lock:
        STATE.devices.clear()
        STATE.problems.clear()
        STATE.runtime = None


def _after_fork_in_child() -> None:
    # the parent's context is not the child's, and another thread may have held the lock
    STATE.devices, STATE.runtime, STATE.lock = {}, None, threading.RLock()


os.register_at_fork(after_in_child=_after_fork_in_child)


# --------------------------------------------------------------------------- the bindings


def _load(index: int) -> Runtime:
    """The first binding that answers on device ``index``, kept for the process."""
    tried = []
    for make in (CudaPython, TorchCudart):
        try:
            runtime: Runtime = make()
            runtime.max_persisting(index)
        except FAILURES as exc:  # the next binding is tried; both failing is said by the caller
            tried.append(f"{make.name}: {one_line(exc)}")
            continue
        STATE.runtime = runtime
        return runtime
    raise Unavailable("; ".join(tried))


@contextlib.contextmanager
def _on(index: int) -> Iterator[None]:
    """The block with ``index`` as the current device: the limit and the lines are the
    current context's."""
    import torch

    with torch.cuda.device(index):
        yield


def _current_stream(index: int) -> int:
    import torch

    return int(torch.cuda.current_stream(index).cuda_stream)


class CudaPython:
    """cuda-python's runtime binding (``cuda.bindings.runtime``)."""

    name = "cuda.bindings.runtime"

    def __init__(self) -> None:
        self.rt: Any = importlib.import_module("cuda.bindings.runtime")

    def _call(self, what: str, *args: Any) -> Any:
        err, *values = getattr(self.rt, what)(*args)
        if int(err):
            self.rt.cudaGetLastError()  # a failed call must not be left for torch's next launch check
            raise Unavailable(f"{what} returned {getattr(err, 'name', err)}")
        return values[0] if values else None

    def max_persisting(self, index: int) -> int:
        return int(self._call("cudaDeviceGetAttribute", self.rt.cudaDeviceAttr(ATTR_MAX_PERSISTING), index))

    def limit(self, index: int) -> int:
        with _on(index):
            return int(self._call("cudaDeviceGetLimit", self.rt.cudaLimit(LIMIT_PERSISTING)))

    def set_limit(self, index: int, nbytes: int) -> None:
        with _on(index):
            self._call("cudaDeviceSetLimit", self.rt.cudaLimit(LIMIT_PERSISTING), nbytes)

    def reset_lines(self, index: int) -> None:
        with _on(index):
            self._call("cudaCtxResetPersistingL2Cache")

    def clear_window(self, index: int) -> None:
        value = self.rt.cudaStreamAttrValue()  # zeroed: no bytes, normal access, as pygpubench clears it
        value.accessPolicyWindow.num_bytes = 0
        with _on(index):
            self._call("cudaStreamSetAttribute", _current_stream(index), self.rt.cudaStreamAttrID(ATTR_WINDOW), value)


class TorchCudart:
    """``ctypes`` on the CUDA runtime library torch loaded."""

    name = "torch's libcudart"

    def __init__(self) -> None:
        lib = ctypes.CDLL(loaded_cudart(), mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        size_p, int_p, c_int = ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int), ctypes.c_int
        for what, args in {
            "cudaDeviceGetAttribute": (int_p, c_int, c_int),
            "cudaDeviceGetLimit": (size_p, c_int),
            "cudaDeviceSetLimit": (c_int, ctypes.c_size_t),
            "cudaCtxResetPersistingL2Cache": (),
            "cudaStreamSetAttribute": (ctypes.c_void_p, c_int, ctypes.c_void_p),
            "cudaGetLastError": (),
        }.items():
            function = getattr(lib, what)
            function.argtypes, function.restype = list(args), c_int
        lib.cudaGetErrorString.argtypes, lib.cudaGetErrorString.restype = [c_int], ctypes.c_char_p
        self.lib = lib

    def _call(self, what: str, *args: Any) -> None:
        err = getattr(self.lib, what)(*args)
        if err:
            self.lib.cudaGetLastError()  # a failed call must not be left for torch's next launch check
            text = self.lib.cudaGetErrorString(err) or b"?"
            raise Unavailable(f"{what} returned {err} ({text.decode(errors='replace')})")

    def max_persisting(self, index: int) -> int:
        value = ctypes.c_int(0)
        self._call("cudaDeviceGetAttribute", ctypes.byref(value), ATTR_MAX_PERSISTING, index)
        return value.value

    def limit(self, index: int) -> int:
        value = ctypes.c_size_t(0)
        with _on(index):
            self._call("cudaDeviceGetLimit", ctypes.byref(value), LIMIT_PERSISTING)
        return value.value

    def set_limit(self, index: int, nbytes: int) -> None:
        with _on(index):
            self._call("cudaDeviceSetLimit", LIMIT_PERSISTING, nbytes)

    def reset_lines(self, index: int) -> None:
        with _on(index):
            self._call("cudaCtxResetPersistingL2Cache")

    def clear_window(self, index: int) -> None:
        value = (ctypes.c_char * WINDOW_VALUE_BYTES)()  # zeroed: no bytes, normal access
        with _on(index):
            self._call(
                "cudaStreamSetAttribute", ctypes.c_void_p(_current_stream(index)), ATTR_WINDOW, ctypes.byref(value)
            )


def loaded_cudart(maps: str = "/proc/self/maps") -> str:
    """The path of the libcudart this process has loaded (torch's), from the loader's map."""
    with open(maps) as lines:
        for line in lines:
            parts = line.split(maxsplit=5)
            path = parts[5].strip() if len(parts) == 6 else ""
            if os.path.basename(path).startswith("libcudart") and ".so" in os.path.basename(path):
                return path
    raise Unavailable("no libcudart is loaded in this process (a torch without CUDA, or one linked statically)")
