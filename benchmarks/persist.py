"""Persisting L2 and the flush: a kernel whose weight sits in a persisting access-policy window,
timed after each flush, and what the check for a set-aside costs the host per flush.

The kernel: a one-row bf16 GEMV (F.linear, 1 x 4096 @ N x 4096) whose weight is half of
what the GPU can set aside for persisting lines (``persistingL2CacheMaxSize``, and no more
than its largest window), so every line of it fits the set-aside.  Timed four ways,
interleaved over ``ROUNDS`` rounds (medians of the rounds):

* ``no window``: the limit 0, no window; a plain float32 read of 256 MiB before each call
  (``_measure.read_flush_reference``: no cleanflush flush code), the cold reference.
* ``window, stock flush``: the limit at its most and a window over the weight (hit ratio 1,
  persisting), do_bench under ``write`` (the harness's own 256 MiB write).
* ``window, write-read``: the same window, do_bench under ``write-read``, whose flush resets
  the set-aside first (``cleanflush._persist``).
* ``window, write-read without the reset``: the negative control, ``_persist.before_flush``
  made a no-op: a write and a read of 2 x L2 alone (and the limit read after it);
* ``no window, stock flush``: the stock flush's own write-back penalty, so that the window's
  effect under it is the difference between the two stock rows;
* ``window, no flush`` and ``no window, no flush``: back to back with nothing between calls,
  whether the window keeps the weight in L2 at all.

What the runs on an H100 found (benchmarks/results/h100/persist.json) missed the predictions
below: with the window the weight was no faster than cold after write-read, with or without the
reset (12.7 and 12.8 us against 13.6), and after the stock flush the window made the GEMV
slower, not faster (20.8 us against 15.5 with no window).  The two rows with no flush timed the
host's launches in the second run (25 us a call); they are now timed queued behind a hold.
Predicted for them: both warm (the weight fits the L2 without a window), 6-9 us and within 5%
of each other; a window that keeps lines would show only under a flush.

The window and the limit are set with this file's own ctypes on the libcudart torch loaded
(``Setter``), not with cleanflush's binding.  Then the host, per call, median of
``HOST_CALLS``: ``_persist.before_flush`` on a device with nothing set aside and a fresh
reading (what each clean flush pays for the check), and one reading of the limit through
cleanflush's binding (paid at most once per ``_persist.READ_AGAIN_NS``).

Predictions, written before the first run (an H100 SXM, 50 MiB L2):
* ``persistingL2CacheMaxSize`` about three quarters of the L2 (as on the A100: 30 of
  40 MiB), so a weight of about 18 MiB;
* ``no window`` about 10 us (18 MiB at about 3 TB/s, plus a GEMV's fixed 3-4 us);
* ``window, stock flush`` at most 0.7 x ``no window`` (the weight read from L2, 5-7 us):
  the write cannot evict persisting lines;
* ``window, write-read`` within 5% of ``no window``: cold again;
* the control as warm as stock: a read alone does not evict persisting lines either;
* the check per flush 0.1-0.3 us of host time (a dict lookup and a clock read), against
  30-45 us of host time per write-read flush (benchmarks/results/h100, ``hosttime``); a
  reading 1-3 us (a device switch and a runtime call; cuda-python's more than ctypes').

Run on a GPU, from the repository root:  python -m benchmarks.persist [OUT_DIR]
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

ROUNDS = 5
BACK_TO_BACK_CALLS = 200
HOST_CALLS = 20_000
K = 4096
PERSISTING, STREAMING = 2, 1  # cudaAccessProperty
MiB = 1 << 20


class Window(ctypes.Structure):
    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hitRatio", ctypes.c_float),
        ("hitProp", ctypes.c_int),
        ("missProp", ctypes.c_int),
    ]


class WindowValue(ctypes.Union):  # cudaStreamAttrValue: padded to 64 bytes in CUDA 12 and 13
    _fields_ = [("accessPolicyWindow", Window), ("pad", ctypes.c_char * 64)]


class Setter:
    """What a program that persists its data does: the limit and a stream's window, through
    ctypes on the libcudart in this process (the current device's context)."""

    def __init__(self) -> None:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "libcudart" in line and ".so" in line]
        if not paths:
            raise RuntimeError("no libcudart loaded (a torch without CUDA?)")
        self.lib = ctypes.CDLL(paths[0], mode=os.RTLD_NOLOAD | os.RTLD_LAZY)

    def _ok(self, err: int, what: str) -> None:
        if err:
            self.lib.cudaGetLastError()
            raise RuntimeError(f"{what} returned {err}")

    def attribute(self, attr: int, index: int) -> int:
        value = ctypes.c_int(0)
        self._ok(self.lib.cudaDeviceGetAttribute(ctypes.byref(value), ctypes.c_int(attr), ctypes.c_int(index)), "attr")
        return value.value

    def limit(self) -> int:
        value = ctypes.c_size_t(0)
        self._ok(self.lib.cudaDeviceGetLimit(ctypes.byref(value), ctypes.c_int(0x06)), "cudaDeviceGetLimit")
        return value.value

    def set_limit(self, nbytes: int) -> None:
        self._ok(self.lib.cudaDeviceSetLimit(ctypes.c_int(0x06), ctypes.c_size_t(nbytes)), "cudaDeviceSetLimit")
        self._ok(self.lib.cudaCtxResetPersistingL2Cache(), "cudaCtxResetPersistingL2Cache")

    def window(self, stream: int, pointer: int, nbytes: int) -> None:
        value = WindowValue()  # zeroed: no window
        if nbytes:
            value.accessPolicyWindow = Window(pointer, nbytes, 1.0, PERSISTING, STREAMING)
        err = self.lib.cudaStreamSetAttribute(ctypes.c_void_p(stream), ctypes.c_int(1), ctypes.byref(value))
        self._ok(err, "cudaStreamSetAttribute")


@contextlib.contextmanager
def without_the_reset() -> Iterator[None]:
    """write-read whose flush does not reset persisting L2 (the negative control)."""
    from cleanflush import _persist

    stock = _persist.before_flush
    _persist.before_flush = lambda *args, **kwargs: None  # type: ignore[assignment]
    try:
        yield
    finally:
        _persist.before_flush = stock  # type: ignore[assignment]


def measure(rounds: int = ROUNDS) -> dict[str, Any]:
    """The timings (us, medians of ``rounds``) and what cleanflush did, on the current
    GPU; {"skip": why} where it can set nothing aside."""
    import torch
    import triton.testing

    import cleanflush
    from cleanflush import _measure, _persist

    from .common import spin_cycles_per_us
    from .cost import busy_gpu_time_us

    cleanflush.install()
    device = torch.device("cuda", torch.cuda.current_device())
    setter = Setter()
    most = min(setter.attribute(108, device.index), setter.attribute(109, device.index))
    if most <= 0:
        return {"skip": "this GPU sets no L2 aside for persisting lines (MIG, or before Ampere)"}
    rows = max(64, most // 2 // (2 * K) // 64 * 64)  # half the set-aside, in whole blocks of 64 rows
    fn, _, weight = _measure.one_row_gemm(rows, K, torch.bfloat16, device)
    stream = torch.cuda.Stream(device)
    found = {"default_limit": setter.limit(), "max_persisting": setter.attribute(108, device.index), "window": most}

    def persisting(on: bool) -> None:
        setter.set_limit(found["max_persisting"] if on else 0)
        setter.window(stream.cuda_stream, weight.data_ptr() if on else 0, weight.numel() * 2 if on else 0)
        for _ in range(3):
            fn()  # the weight's lines persisted (or not) before the timing
        torch.cuda.synchronize()

    cycles_per_us = spin_cycles_per_us()

    def back_to_back() -> float:
        # queued behind a spin, so no launch gap is timed (timed one by one with nothing
        # between them, the calls timed the host's launches)
        return busy_gpu_time_us(fn, BACK_TO_BACK_CALLS, cycles_per_us)

    def bench(policy: str) -> float:
        with cleanflush.policy(policy):
            return float(triton.testing.do_bench(fn, return_mode="median")) * 1e3

    times: dict[str, list[float]] = {}
    with torch.cuda.stream(stream):
        _measure.warm_up(fn, 1.0)
        for _ in range(rounds):
            persisting(False)
            times.setdefault("no window", []).append(statistics.median(_measure.read_flush_reference(fn, 300, device)))
            persisting(True)
            times.setdefault("window, stock flush", []).append(bench("write"))
            persisting(True)
            times.setdefault("window, write-read", []).append(bench("write-read"))
            found["limit_after_write_read"] = setter.limit()
            persisting(True)
            with without_the_reset():
                times.setdefault("window, write-read without the reset", []).append(bench("write-read"))
            found["limit_without_the_reset"] = setter.limit()
            persisting(False)  # the stock flush's own penalty, without a window: what the window changes
            times.setdefault("no window, stock flush", []).append(bench("write"))
            persisting(True)  # the window with no flush at all: whether it keeps the weight in L2
            times.setdefault("window, no flush", []).append(back_to_back())
            persisting(False)
            times.setdefault("no window, no flush", []).append(back_to_back())
    found.update(_after(setter, _persist, device, found["max_persisting"]))
    setter.set_limit(found["default_limit"])  # the GPU as it was found
    return {
        "gpu": torch.cuda.get_device_name(device),
        "weight_bytes": weight.numel() * 2,
        "us": {name: statistics.median(values) for name, values in times.items()},
        "rounds_us": times,
        **found,
    }


def _after(setter: Setter, persist: Any, device: Any, most: int) -> dict[str, Any]:
    """What cleanflush did (its binding, its resets, its status rows), and whether uninstall
    gives back a set-aside a reset took."""
    import cleanflush

    seen = persist.STATE.devices.get(device)
    done = {
        "binding": getattr(persist.STATE.runtime, "name", None),
        "resets": seen.resets if seen is not None else 0,
        "status": [row.as_dict() for row in cleanflush.status() if row.name == "cleanflush"],
    }
    setter.set_limit(most)
    persist.before_flush(device, capturing=False, fresh=True)  # as a clean flush does: taken
    taken = setter.limit() == 0
    cleanflush.uninstall()
    done["given_back"] = taken and setter.limit() == most
    cleanflush.install()
    return done


def host_costs(calls: int = HOST_CALLS) -> dict[str, float]:
    """Host ns per call: the check a clean flush makes where nothing is set aside and the
    reading is fresh, and one reading of the limit through cleanflush's binding."""
    import torch

    from cleanflush import _persist

    device = torch.device("cuda", torch.cuda.current_device())
    seen = _persist.check(device)
    runtime = _persist.STATE.runtime
    if runtime is None or not seen.checked:
        return {}

    def per_call(call: Callable[[], Any]) -> float:
        spans = []
        for _ in range(calls):
            seen.read_ns = _persist.clock()  # fresh: the check, not a reading
            began = time.perf_counter_ns()
            call()
            spans.append(time.perf_counter_ns() - began)
        return float(statistics.median(spans))

    check_ns = per_call(lambda: _persist.before_flush(device, capturing=False))
    reading_ns = per_call(lambda: runtime.limit(device.index))
    return {"check per flush, ns": check_ns, "one reading of the limit, ns": reading_ns}


def main(argv: list[str] | None = None) -> None:
    """The record, printed and written to OUT_DIR/persist.json (``python -m benchmarks.persist [OUT_DIR]``)."""
    import cleanflush

    from .common import machine

    args = argv if argv is not None else sys.argv[1:]
    cleanflush.install()
    record = {"study": "persist", "machine": machine(), **measure()}
    if "skip" not in record:
        record["host"] = host_costs()
    print(json.dumps(record, indent=1))
    if args:
        os.makedirs(args[0], exist_ok=True)
        with open(os.path.join(args[0], "persist.json"), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
