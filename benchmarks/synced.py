"""Loops that synchronize before every flush (GPU MODE's eval.py, the CuTe DSL autotuner's
timer), and do_bench's queued loop on a slow host: how much host time does each flush hide?

Such a loop hands the flush an idle GPU; its host then records the start event and launches
the timed call while the GPU runs only the flush.  Host time beyond the flush's own GPU time
lands in the timed region.  Here the host waits X us (a busy-wait) between the flush's return
and the start event, as a slower host or a heavier Python stack would, and the GEMM's event
time is taken against X, per flush:

* ``plain read``: a float32 ``sum()`` of a 256 MiB buffer of its own (no cleanflush code);
* cleanflush's ``read`` and ``write-read`` through ``_flush.flush`` on a one-L2 cache (the
  CuTe DSL's memset size), each as it is (with the hold) and without the hold.

do_bench queues its calls without synchronizing, so its flushes hide host time until the host
falls behind the GPU: a host slower per call than the flush and the GEMM together (another
process on the CPU, a slower machine) drains the queue, and from then on every call starts on
a GPU that has caught up.  The ``do_bench`` rows time the GEMM with triton's ``do_bench``
(central mean of its samples, and how many it took) while the timed call waits X us on the
host before launching it, under the stock flush and the clean policies: with the hold as it
is (held wherever the GPU has caught up with the host, let go at the next read call), with
0.1.0's hold (only on an empty stream, always the whole ``HOLD_NS``: emulated here by giving
the kernel call numbers the host never passes), and without a hold.  do_bench's flush is
Triton's ``clear_cache``, whose write cleanflush owns: its ``write-read`` writes L2 / 8 of the
cache; ``write-read (whole write)`` is the same flush after the whole stock write, as before.

``hidden_us``: the largest X up to which every central mean stays within 5% of the one at
X = 0.  Two shapes: the write-up's 4096 x 4096 and a 2048 x 2048 one-row GEMM (a 9 us
kernel, where a slow host falls behind first).
Run on a GPU, from the repository root:  python -m benchmarks synced
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import WHOLE_WRITE, Results, central_mean, progress, whole_write

ROUNDS = 2
ITERS = 150
DELAYS_US = (0, 20, 40, 60, 80, 120, 160)
SHAPES = ((4096, 4096), (2048, 2048))
OFFSET = 1 << 20  # call numbers ahead of the host's count: the emulated 0.1.0 hold is never let go


def loop(flush: Callable[[], Any], fn: Callable[[], Any], delay_us: float, iters: int) -> list[float]:
    import torch

    times = []
    for _ in range(iters):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        flush()
        until = time.perf_counter() + delay_us * 1e-6
        while time.perf_counter() < until:
            pass
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return times


def queued(fn: Callable[[], Any], delay_us: float) -> tuple[float, int]:
    """do_bench's central mean (us) of ``fn``, and its number of samples, the host waiting
    ``delay_us`` before each launch."""
    import triton.testing

    def slow() -> Any:
        until = time.perf_counter() + delay_us * 1e-6
        while time.perf_counter() < until:
            pass
        return fn()

    times = triton.testing.do_bench(slow, return_mode="all")
    return central_mean(times) * 1e3, len(times)


def hidden_us(medians: dict[int, float]) -> int:
    """The largest host delay up to which every value stays within 5% of the one without."""
    base, hidden = medians[0], 0
    for delay in sorted(medians):
        if medians[delay] > 1.05 * base:
            break
        hidden = delay
    return hidden


def run(out: Path, rounds: int = ROUNDS) -> Path:
    import torch

    import cleanflush
    from cleanflush import _flush, _measure

    device = torch.device("cuda", torch.cuda.current_device())
    l2 = _flush.l2_bytes(device)
    plain = torch.ones(256 * 1024 * 1024 // 4, dtype=torch.float32, device=device)
    cache = torch.empty(l2 // 4, dtype=torch.int32, device=device)
    entry = _flush.prepare(device)
    assert entry.calls is not None and entry.held is not None, "the read kernel or its hold was not built here"
    calls = entry.calls

    @contextlib.contextmanager
    def policy(name: str, hold: str = "hold") -> Any:
        """A cleanflush policy with its hold as it is, 0.1.0's hold ("0.1.0 hold"), or none."""
        caught_up = _flush.caught_up
        if hold == "no hold":
            _flush.caught_up = lambda device: False
        if hold == "0.1.0 hold":
            _flush.caught_up = _flush.found_idle
            next_call = type(calls).next
            vars(calls)["next"] = lambda: next_call(calls) + OFFSET
            vars(calls)["caught_up"] = lambda: calls._slots[1] - OFFSET >= calls._slots[0]
        try:
            with cleanflush.policy(name):
                yield
        finally:
            _flush.caught_up = caught_up
            vars(calls).pop("next", None)
            vars(calls).pop("caught_up", None)

    def clean() -> None:
        _flush.flush(cache, cache.zero_, "synced")

    # name -> (context the loop runs in, flush)
    flushes: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "plain read": (contextlib.nullcontext, plain.sum)
    }
    for name in ("read", "write-read"):
        flushes[name] = (lambda name=name: policy(name), clean)
        flushes[f"{name}, no hold"] = (lambda name=name: policy(name, "no hold"), clean)

    # do_bench's own flush, through cleanflush's patch: the stock write, or a clean policy
    queued_policies: dict[str, Callable[[], Any]] = {"stock": lambda: policy("write"), WHOLE_WRITE: whole_write}
    for name in ("read", "write-read"):
        for hold in ("hold", "0.1.0 hold", "no hold"):
            label = name if hold == "hold" else f"{name}, {hold}"
            queued_policies[label] = lambda name=name, hold=hold: policy(name, hold)

    results = Results(out, "synced")
    for n, k in SHAPES:
        shape = f"{n}x{k}"
        fn, _, _ = _measure.one_row_gemm(n, k, device=device)
        _measure.warm_up(fn, 1.0)
        for r in range(rounds):
            for delay in DELAYS_US:
                for name, (context, flush) in flushes.items():
                    with context():
                        loop(flush, fn, delay, 5)
                        times = loop(flush, fn, delay, ITERS)
                    results.add(
                        shape=shape,
                        round=r,
                        loop="synced",
                        flush=name,
                        delay_us=delay,
                        us=central_mean(times),
                        samples=None,
                    )
                for name, context in queued_policies.items():
                    with context():
                        mean, samples = queued(fn, delay)
                    results.add(
                        shape=shape, round=r, loop="do_bench", flush=name, delay_us=delay, us=mean, samples=samples
                    )
                progress(f"synced: {shape}, round {r + 1}/{rounds}, delay {delay} us")
    summary = {}
    for n, k in SHAPES:
        shape = f"{n}x{k}"
        for kind, names in (("synced", flushes), ("do_bench", queued_policies)):
            for name in names:
                rows = [row for row in results.rows if (row["shape"], row["loop"], row["flush"]) == (shape, kind, name)]
                means = {
                    delay: statistics.median(row["us"] for row in rows if row["delay_us"] == delay)
                    for delay in DELAYS_US
                }
                summary[f"{shape} {kind}: {name}"] = {"hidden_us": hidden_us(means), "us_by_delay": means}
                if kind == "do_bench":
                    summary[f"{shape} {kind}: {name}"]["samples_at_0"] = statistics.median(
                        row["samples"] for row in rows if row["delay_us"] == 0
                    )
    return results.write(hold_ns=_flush.HOLD_NS, gemm="one-row BF16", rounds=rounds, summary=summary)
