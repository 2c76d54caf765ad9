"""Persisting L2 and the flush: kernels whose input sits in a persisting access-policy window,
timed after each flush, and what the check for a set-aside costs the host per flush.

Four cases: two kernels, each over a bf16 weight of two sizes (a half and a quarter of what
the GPU can set aside for persisting lines, ``persistingL2CacheMaxSize``, and no more than its
largest window):

* ``gemv``: a one-row GEMV (F.linear, 1 x 4096 @ N x 4096), cuBLAS's kernel;
* ``sum``: ``torch.sum`` of the weight into float32, torch's own reduction (plain loads).

Each case is timed eight ways, interleaved over ``ROUNDS`` rounds (medians of the rounds):

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
* ``no window, write-read``: write-read's own reference: how long a kernel takes after a clean
  flush depends on the DRAM traffic before it (docs/policies.md), so ``window, write-read`` is
  cold where it matches this row, not the plain read's;
* ``window, no flush`` and ``no window, no flush``: back to back with nothing between calls,
  queued behind a hold (``cost.busy_gpu_time_us``): how fast the kernel is warm.

The first runs on an H100 (one case: the GEMV over half the set-aside) missed the predictions:
with the window the weight was no faster than cold after write-read with or without the reset,
and after the stock flush the window made the GEMV slower (20.8 us against 15.5 with none).
Two explanations, which the cases tell apart: the window was larger than the set-aside lines
can hold (a window over more than the set-aside thrashes its persisting lines, CUDA guide; on a
GPU whose L2 is two partitions the room per partition may be half), or cuBLAS's kernel loads
its weight with cache hints of its own that override the stream's window.

Predictions for the cases, written before they ran (an H100 SXM, 50 MiB L2, 31.2 MiB set-aside):
* ``sum``, a quarter: the stock flush leaves the weight warm (``window, stock flush`` at most
  0.8 x ``no window, stock flush``, near ``window, no flush``); write-read cold again (within
  7% of ``no window``); the control as warm as stock (a read alone does not evict persisting
  lines); warm with no flush at 0.4-0.7 x cold.
* ``sum``, a half: the same if the room is the set-aside; as cold as without a window if it is
  half of it (thrashing).
* ``gemv``: as ``sum`` if the size was the cause; no warmer than cold in both sizes if it is
  cuBLAS's hints.
* the check per flush 0.1-0.3 us of host time; measured 0.58 us (the first runs), so 0.4-0.8.

What the four cases showed (an H100, benchmarks/results/h100/README.md), against those
predictions: persisting lines survive a write and a read of 2 x L2 (the control) for the sum,
and the reset takes them away, but no flush left the weight as warm as no flush; the stock
flush left the summed weight only partly warm (well short of 0.8 x); the window did nothing to
the GEMV under write-read and made it slower under the stock flush; the check cost 1.2 us, over
its prediction.  Write-read with the window came out faster than the plain read, which shares
no code with it but not its traffic either: hence the row above.  Predictions for it: ``window,
write-read`` within 3% of ``no window, write-read`` in every case; the control at most 0.95 x
``window, write-read`` for the sum (it was 0.91-0.93).

The window and the limit are set with this file's own ctypes on the libcudart torch loaded
(``Setter``), not with cleanflush's binding.  Then the host, per call, median of
``HOST_CALLS``: ``_persist.before_flush`` on a device with nothing set aside and a fresh
reading (what each clean flush pays for the check), and one reading of the limit through
cleanflush's binding (paid at most once per ``_persist.READ_AGAIN_NS``).

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


KERNELS = ("sum", "gemv")
SHARES = (0.25, 0.5)  # of the set-aside


def kernel(name: str, rows: int, device: Any) -> tuple[Callable[[], Any], Any]:
    """The kernel called ``name`` over a fresh ``rows`` x K bf16 weight: (call, weight)."""
    import torch

    from cleanflush import _measure

    if name == "gemv":
        fn, _, weight = _measure.one_row_gemm(rows, K, torch.bfloat16, device)
        return fn, weight
    weight = torch.randn(rows, K, device=device, dtype=torch.bfloat16)
    return (lambda: torch.sum(weight, dtype=torch.float32)), weight


def measure(rounds: int = ROUNDS) -> dict[str, Any]:
    """The timings of each case (us, medians of ``rounds``) and what cleanflush did, on the
    current GPU; {"skip": why} where it can set nothing aside."""
    import torch

    import cleanflush
    from cleanflush import _measure, _persist

    from .common import spin_cycles_per_us

    cleanflush.install()
    device = torch.device("cuda", torch.cuda.current_device())
    setter = Setter()
    most = min(setter.attribute(108, device.index), setter.attribute(109, device.index))
    if most <= 0:
        return {"skip": "this GPU sets no L2 aside for persisting lines (MIG, or before Ampere)"}
    found = {"default_limit": setter.limit(), "max_persisting": setter.attribute(108, device.index), "window": most}
    stream = torch.cuda.Stream(device)
    cycles_per_us = spin_cycles_per_us()
    cases = []
    for name in KERNELS:
        for share in SHARES:
            rows = max(64, int(most * share) // (2 * K) // 64 * 64)  # whole blocks of 64 rows
            fn, weight = kernel(name, rows, device)
            case = {"kernel": name, "share": share, "weight_bytes": weight.numel() * 2, "rounds_us": {}}
            case["call"], case["weight"] = fn, weight
            cases.append(case)
    with torch.cuda.stream(stream):
        _measure.warm_up(cases[0]["call"], 1.0)
        for _ in range(rounds):
            for case in cases:
                _one_round(case, setter, stream, found["max_persisting"], cycles_per_us)
    found.update(_after(setter, _persist, device, found["max_persisting"]))
    setter.set_limit(found["default_limit"])  # the GPU as it was found
    for case in cases:
        del case["call"], case["weight"]
        case["us"] = {row: statistics.median(values) for row, values in case["rounds_us"].items()}
    return {"gpu": torch.cuda.get_device_name(device), "cases": cases, **found}


def _one_round(case: dict[str, Any], setter: Setter, stream: Any, most: int, cycles_per_us: float) -> None:
    """One round of the eight rows of ``case``, each after its window is set (or cleared)."""
    import torch
    import triton.testing

    import cleanflush
    from cleanflush import _measure

    from .cost import busy_gpu_time_us

    fn, weight, times = case["call"], case["weight"], case["rounds_us"]

    def persisting(on: bool) -> None:
        setter.set_limit(most if on else 0)
        setter.window(stream.cuda_stream, weight.data_ptr() if on else 0, weight.numel() * 2 if on else 0)
        for _ in range(3):
            fn()  # the weight's lines persisted (or not) before the timing
        torch.cuda.synchronize()

    def bench(policy: str) -> float:
        with cleanflush.policy(policy):
            return float(triton.testing.do_bench(fn, return_mode="median")) * 1e3

    def row(name: str, value: float) -> None:
        times.setdefault(name, []).append(value)

    persisting(False)
    row("no window", statistics.median(_measure.read_flush_reference(fn, 300, stream.device)))
    persisting(True)
    row("window, stock flush", bench("write"))
    persisting(True)
    row("window, write-read", bench("write-read"))
    case["limit_after_write_read"] = setter.limit()
    persisting(True)
    with without_the_reset():
        row("window, write-read without the reset", bench("write-read"))
    case["limit_without_the_reset"] = setter.limit()
    persisting(False)  # the stock flush's own penalty, without a window: what the window changes
    row("no window, stock flush", bench("write"))
    persisting(False)  # write-read's reference: the same flush code and DRAM traffic, no window
    row("no window, write-read", bench("write-read"))
    # with no flush at all, queued behind a hold (timed one by one, the calls timed the host)
    persisting(True)
    row("window, no flush", busy_gpu_time_us(fn, BACK_TO_BACK_CALLS, cycles_per_us))
    persisting(False)
    row("no window, no flush", busy_gpu_time_us(fn, BACK_TO_BACK_CALLS, cycles_per_us))


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
