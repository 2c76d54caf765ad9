"""The host's time per flush, and where it goes.

With the hold, a do_bench loop whose GPU work per sample is shorter than the host's runs at
the host's pace (docs/limits.md), and do_bench sizes its loop by a 5-call estimate of that
pace.  Measured here with the GPU given a head start (a ``torch.cuda._sleep`` before each
batch) or none:

* ``iteration``: do_bench's loop body (clear_cache, start event, the timed call, end event)
  under each flush, stock included; its time is the pace a host-bound loop runs at.  Also
  with no head start (``GPU caught up``): the GPU waits for the host and the reads hold, as
  in a host-bound do_bench.
* ``clear_cache``: the patched call alone, per flush; and do_bench's sample count.
* the parts of a write-read, each alone: what ``_flush.flush`` does around its two launches,
  and the launches themselves (the stock write on the owned head, the read kernel).
* ``_flush.flush`` itself on the same cache, with either launch or both made no-ops: the
  parts timed in place, where a part timed alone in a loop of its own may run faster.
* last, one do_bench under ``read`` and ``write-read`` profiled: how long its read kernels
  lasted on the GPU, the five of its estimate and the loop's.

Per row, the median of ``BATCHES`` x ``CALLS`` spans of ``time.perf_counter_ns``; the record
names the host's CPU, since these times are the host's, not the GPU's.  With the head start,
a loop body's launches can still wait for a full launch queue (stock's median far over its
p10 in benchmarks/results/h200): the caught-up rows and the parts are the measure.
Run on a GPU, from the repository root:  python -m benchmarks hosttime
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common import Results, flushing, progress, spin_cycles_per_us, spread

BATCHES = 14
CALLS = 100  # calls a batch, each batch after its own head start
AHEAD_US = 20_000  # the GPU's head start per batch: longer than a batch's host time
FLUSHES = ("stock", "write", "read", "write-read")
# row names the record keys, and ``quoted`` reads
PART = "write-read part: "  # a part of a write-read, timed alone
IN_PLACE = "write-read in place: flush, "  # the flush in place, launches made no-ops or not
WRITE_LAUNCH, READ_LAUNCH = "write launch (stock clear_cache on the head)", "read launch"
STREAM_QUERY, EVENT_RECORD = "stream query", "event record"  # inside the hold decision; do_bench's


def host_ns(call: Callable[[], Any], pad_cycles: int, batches: int = BATCHES, calls: int = CALLS) -> list[int]:
    """Host time of each of ``batches`` x ``calls`` calls of ``call``, the GPU given
    ``pad_cycles`` of head start before each batch."""
    import torch

    spans: list[int] = []
    clock = time.perf_counter_ns
    for _ in range(batches):
        torch.cuda.synchronize()
        torch.cuda._sleep(pad_cycles)
        for _ in range(calls):
            began = clock()
            call()
            spans.append(clock() - began)
    torch.cuda.synchronize()
    return spans


def cpu_name() -> str:
    """The host's CPU model, as /proc/cpuinfo names it (or what is known instead)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def stock_clear_cache(driver: Any) -> Callable[[Any, Any], Any]:
    """The driver's own ``clear_cache``, under cleanflush's wrapper."""
    from cleanflush import _patching

    patched = vars(_patching.defining_class(type(driver), "clear_cache"))["clear_cache"]
    return getattr(patched, "__wrapped__", patched)  # type: ignore[no-any-return]


def write_read_parts(driver: Any, cache: Any) -> dict[str, Callable[[], Any]]:
    """What a write-read of do_bench's cache does on the host, one part per entry."""
    import torch

    from cleanflush import _flush, _hold, _policies, _policy, _read, _state

    device = cache.device
    entry = _read.prepare(device)
    stock_clear = stock_clear_cache(driver)
    head = entry.owned_head(cache, _flush.owned_write_bytes(entry.l2))
    region = entry.region(entry.read_bytes(head.numel() * head.element_size()))
    stream = torch.cuda.current_stream(device)
    event = torch.cuda.Event(enable_timing=True)
    return {
        "policy lookup": lambda: _policies.get(_policy.current_policy()),
        "read buffer lookup": lambda: _read.prepare(device),
        "capture check": lambda: _hold.capturing(device),
        STREAM_QUERY: lambda: stream.query(),
        "hold decision": lambda: _hold.hold_ns(device, entry.handshake, False),
        "owned head": lambda: entry.owned_head(cache, _flush.owned_write_bytes(entry.l2)),
        WRITE_LAUNCH: lambda: stock_clear(driver, head),
        READ_LAUNCH: lambda: entry.read(region, 0, False),
        "count": lambda: _state.count_flush("hosttime", "write-read"),
        EVENT_RECORD: lambda: event.record(),
    }


def flush_in_place(driver: Any, cache: Any, pad_cycles: int) -> dict[str, list[int]]:
    """Host times of a write-read ``_flush.flush`` of ``cache``, with the write, the read or
    both as no-ops (counted under the label ``hosttime``, not Triton's)."""
    from cleanflush import _flush, _read

    entry = _read.prepare(cache.device)
    stock_clear = stock_clear_cache(driver)

    def write(head: Any) -> None:
        stock_clear(driver, head)

    def no_write(head: Any) -> None:
        pass

    def no_read(data: Any, hold_ns: int, capturing: bool) -> None:
        if entry.handshake is not None:  # as the read does around its launch
            entry.handshake.call()
            entry.handshake.left()

    rows = {}
    for name, write_part, reads in (
        ("both launches", write, True),
        ("write launch only", write, False),
        ("read launch only", no_write, True),
        ("no launch", no_write, False),
    ):
        if not reads:
            entry.read = no_read  # type: ignore[method-assign]
        try:

            def call(write_part: Callable[[Any], None] = write_part) -> None:
                _flush.flush("hosttime", write=lambda: None, cache=cache, write_part=write_part)

            call()
            rows[IN_PLACE + name] = host_ns(call, pad_cycles)
        finally:
            vars(entry).pop("read", None)  # the method again
    return rows


def do_bench_reads(fn: Callable[[], Any], flushes: tuple[str, ...]) -> dict[str, Any]:
    """The read kernels of one profiled do_bench of ``fn`` under each of ``flushes``, in us by
    kineto: the five of its estimate and the loop's (a read lasts until the host's next flush
    call lets it go, or its pace: so these are the host's pace as the GPU saw it).  One
    profiler for all, each do_bench in a range of its own: a second profiler in one process
    may see no kernels.  Profiling slows every launch: the host-time rows come before it."""
    import torch
    import triton.testing

    from cleanflush import _read

    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    samples = {}
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for name in flushes:
            with flushing(name), torch.profiler.record_function(f"hosttime: {name}"):
                samples[name] = len(triton.testing.do_bench(fn, return_mode="all"))  # ends in a sync
    events = profiler.events()
    reads = sorted(
        (e.time_range for e in events if e.device_type == cuda and e.name == _read.READ_KERNEL),
        key=lambda r: r.start,
    )
    found: dict[str, Any] = {}
    for name in flushes:
        (span,) = [e.time_range for e in events if e.name == f"hosttime: {name}" and e.device_type == cpu]
        inside = [r.elapsed_us() for r in reads if span.start <= r.start <= span.end]
        found[name] = {
            "samples_profiled": samples[name],
            "estimate_reads_us": [round(r, 1) for r in inside[:5]],
            "loop_reads_us": spread(inside[5:]) if inside[5:] else None,
        }
    return found


def run(out: Path) -> Path:
    import torch
    import triton
    import triton.testing

    from cleanflush import _measure

    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    pad = int(AHEAD_US * spin_cycles_per_us())
    fn, _, _ = _measure.one_row_gemm(4096, 4096)
    _measure.warm_up(fn, 1.0)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def iteration() -> None:
        driver.clear_cache(cache)
        start.record()
        fn()
        end.record()

    rows: dict[str, list[int]] = {}
    samples: dict[str, int] = {}
    progress(f"hosttime: {len(FLUSHES)} flushes, {BATCHES} x {CALLS} calls each")
    for name in FLUSHES:
        with flushing(name):
            iteration()  # first launches load kernels: keep them out
            rows[f"iteration, {name}"] = host_ns(iteration, pad)
            # as in a host-bound do_bench: the GPU waits for the host, and the reads hold
            rows[f"iteration, {name}, GPU caught up"] = host_ns(iteration, 0)
            rows[f"clear_cache, {name}"] = host_ns(lambda: driver.clear_cache(cache), pad)
            # do_bench takes as many samples as fit its 100 ms at the pace its estimate saw
            samples[name] = len(triton.testing.do_bench(fn, return_mode="all"))
    with flushing("write-read"):
        for part, call in write_read_parts(driver, cache).items():
            call()
            rows[PART + part] = host_ns(call, pad)
        rows.update(flush_in_place(driver, cache, pad))
    rows["the timed call alone (4096 x 4096 one-row GEMM)"] = host_ns(fn, pad)
    try:
        profiled = do_bench_reads(fn, ("read", "write-read"))
    except Exception as exc:  # the profiler is not the study: the rows above still go on record
        profiled = {"error": f"{type(exc).__name__}: {exc}"}
    fn()  # a process whose last CUDA work was profiling may hang at exit (docs/limits.md)
    torch.cuda.synchronize()
    results = Results(out, "hosttime")
    summary = {}
    for name, spans in rows.items():
        summary[name] = spread([s / 1e3 for s in spans])
        results.add(row=name, **summary[name])
    path = results.write(
        cpu=cpu_name(),
        batches=BATCHES,
        calls=CALLS,
        summary=summary,
        do_bench_samples=samples,
        do_bench_reads=profiled,
    )
    print(table(summary))
    print("do_bench samples in 100 ms:", samples)
    print("do_bench's reads, profiled:", profiled)
    return path


def table(summary: dict[str, dict[str, float]]) -> str:
    """The record as a Markdown table."""
    lines = ["| host time per call | median us | p10 | p90 |", "|---|---|---|---|"]
    lines += [
        f"| {name} | {s['median_us']:.1f} | {s['p10_us']:.1f} | {s['p90_us']:.1f} |" for name, s in summary.items()
    ]
    return "\n".join(lines)
