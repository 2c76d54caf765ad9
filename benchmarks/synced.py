"""Loops that synchronize before every flush (GPU MODE's eval.py, the CuTe DSL autotuner's
timer), and do_bench's queued loop on a slow host: how much host time does each flush hide?

Such a loop hands the flush an idle GPU; its host then records the start event and launches
the timed call while the GPU runs only the flush.  Host time beyond the flush's own GPU time
lands in the timed region.  Here the host waits X us (a busy-wait) between the flush's return
and the start event, as a slower host or a heavier Python stack would, and the GEMM's event
time is taken against X, per flush:

* ``plain read``: a float32 ``sum()`` of a 256 MiB buffer of its own (no cleanflush code);
* cleanflush's ``read`` and ``write-read`` through ``_flush.flush`` on a one-L2 cache (the
  CuTe DSL's memset size), each as it is (with the hold: the stream kept busy
  ``_flush.HOLD_NS`` after the read when the flush found it empty) and without the hold.

do_bench queues its calls without synchronizing, so its flushes hide host time until the host
falls behind the GPU: a host slower per call than the flush and the GEMM together (another
process on the CPU, a slower machine) drains the queue, and from then on every call starts on
an idle GPU.  The ``do_bench`` rows time the GEMM with triton's ``do_bench`` (its median) while
the timed call waits X us on the host before launching it, under the stock flush and the clean
policies with and without the hold.

``hidden_us``: the largest X up to which every median stays within 5% of the one at X = 0.
Run on a GPU, from the repository root:  python -m benchmarks synced
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import Results, progress

ROUNDS = 3
ITERS = 150
DELAYS_US = (0, 20, 40, 60, 80, 100, 120)


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


def queued(fn: Callable[[], Any], delay_us: float) -> float:
    """do_bench's median (us) of ``fn``, the host waiting ``delay_us`` before each launch."""
    import triton.testing

    def slow() -> Any:
        until = time.perf_counter() + delay_us * 1e-6
        while time.perf_counter() < until:
            pass
        return fn()

    return float(triton.testing.do_bench(slow, return_mode="median")) * 1e3


def hidden_us(medians: dict[int, float]) -> int:
    """The largest host delay up to which every median stays within 5% of the one without."""
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
    fn, _, _ = _measure.one_row_gemm(4096, 4096, device=device)
    _measure.warm_up(fn, 1.5)
    l2 = _flush.l2_bytes(device)
    plain = torch.ones(256 * 1024 * 1024 // 4, dtype=torch.float32, device=device)
    cache = torch.empty(l2 // 4, dtype=torch.int32, device=device)
    _flush.prepare(device)

    @contextlib.contextmanager
    def policy(name: str, hold: bool = True) -> Any:
        """A cleanflush policy, with the hold or (every stream found busy) without it."""
        found_idle = _flush.found_idle
        if not hold:
            _flush.found_idle = lambda device: False
        try:
            with cleanflush.policy(name):
                yield
        finally:
            _flush.found_idle = found_idle

    def clean() -> None:
        _flush.flush(cache, cache.zero_, "synced")

    # name -> (context the loop runs in, flush)
    flushes: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "plain read": (contextlib.nullcontext, plain.sum)
    }
    for name in ("read", "write-read"):
        flushes[name] = (lambda name=name: policy(name), clean)
        flushes[f"{name}, no hold"] = (lambda name=name: policy(name, hold=False), clean)

    # do_bench's own flush, through cleanflush's patch: the stock write, or a clean policy
    queued_policies: dict[str, Callable[[], Any]] = {"stock": lambda: policy("write")}
    for name in ("read", "write-read"):
        queued_policies[name] = lambda name=name: policy(name)
        queued_policies[f"{name}, no hold"] = lambda name=name: policy(name, hold=False)

    results = Results(out, "synced")
    for r in range(rounds):
        for delay in DELAYS_US:
            for name, (context, flush) in flushes.items():
                with context():
                    loop(flush, fn, delay, 5)
                    times = loop(flush, fn, delay, ITERS)
                results.add(
                    round=r,
                    loop="synced",
                    flush=name,
                    delay_us=delay,
                    median_us=statistics.median(times),
                    mean_us=statistics.fmean(times),
                )
            for name, context in queued_policies.items():
                with context():
                    median = queued(fn, delay)
                results.add(round=r, loop="do_bench", flush=name, delay_us=delay, median_us=median, mean_us=None)
            progress(f"synced: round {r + 1}/{rounds}, delay {delay} us")
    summary = {}
    for kind, names in (("synced", flushes), ("do_bench", queued_policies)):
        for name in names:
            rows = [row for row in results.rows if row["loop"] == kind and row["flush"] == name]
            medians = {
                delay: statistics.median(row["median_us"] for row in rows if row["delay_us"] == delay)
                for delay in DELAYS_US
            }
            summary[f"{kind}: {name}"] = {"hidden_us": hidden_us(medians), "median_us_by_delay": medians}
    return results.write(hold_ns=_flush.HOLD_NS, gemm="one-row BF16 4096x4096", rounds=rounds, summary=summary)
