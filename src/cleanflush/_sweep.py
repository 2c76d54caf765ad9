"""The clean read as a kernel with a name of its own: ``cleanflush_l2_sweep``.

Timers that pick or drop kernels by name would take torch's sum (``reduce_kernel``) for
the kernel under test: DeepGEMM's ``bench_kineto`` asks for names such as ``'reduce'`` by
substring, and tritonbench's profiler mode drops only the stock fill kernel by exact name.
A Triton kernel named after us can be told apart by every one of them.

The same kernel, its hold compiled in, keeps the stream busy after its sum until the host's
next read call (``_hold`` says why and how), and one more kernel zeroes and reads in one
launch (``cleanflush_l2_write_read``).  Imported only when a CUDA read buffer is made
(``_read.prepare``), never by ``import cleanflush``.  Each ``build`` compiles and runs its
kernel once right there, so no compilation happens later inside a CUDA-graph capture or a
timed loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

import torch
import triton
import triton.language as tl

# The kernel below is named as _read.READ_KERNEL says (checked by a test): _read must know
# the name without importing triton, and this module imports nothing of cleanflush's.
# The read's launch: the fastest of a grid of tile sizes, warps, programs per SM and tiles per
# step at 2 x L2 (benchmarks/readkernel.py).
BLOCK = 4096  # float32 elements per program and step: 16 KiB, 128-bit loads
WARPS = 16
PROGRAMS_PER_SM = 4
UNROLL = 1  # tiles loaded per step: more in flight gained nothing
# The one-kernel write-read waits for all its programs, so all must be resident at once: fewer warps.
WRITE_READ_WARPS = 8

Sweep = Callable[[torch.Tensor, torch.Tensor, int], None]  # (data, sink, call)
L = TypeVar("L", bound=Callable[..., None])


@triton.jit
def _nanoseconds():  # type: ignore[no-untyped-def]
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


# ``n`` changes with the bytes written before the read and ``call`` with every flush: neither
# is a new specialisation (nor is ``hold_ns``, fixed in one process).
@triton.jit(do_not_specialize=["n", "call", "hold_ns"])  # type: ignore[untyped-decorator]
def cleanflush_l2_sweep(  # type: ignore[no-untyped-def]
    src, sink, n, signal, call, hold_ns, BLOCK: tl.constexpr, HOLD: tl.constexpr, UNROLL: tl.constexpr
):
    # Each program strides over the buffer and adds its partial sum to one scalar: every
    # line is loaded, and nothing but that scalar (and the signal) is written.
    # ``signal``: the handshake's two int64 of pinned host memory (``_hold``).  [0]: the host's
    # read calls so far (the host writes it); [1]: the last call whose read the GPU has started
    # (written here, through to the host).
    if HOLD:  # the clock is read only where it is asked for (Triton's interpreter has none)
        began = _nanoseconds()
    first = tl.program_id(0) == 0
    if first:
        tl.store(signal + 1, call, cache_modifier=".wt")
    start = tl.program_id(0) * (BLOCK * UNROLL)
    step = tl.num_programs(0) * (BLOCK * UNROLL)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for offset in range(start, n, step):
        for part in tl.static_range(UNROLL):
            index = offset + part * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(src + index, mask=index < n, other=0.0)
    tl.atomic_add(sink, tl.sum(acc, axis=0))
    if HOLD:  # noqa: SIM102 (a constexpr test, folded at compile time, around a runtime one)
        # one program keeps the stream busy until the host makes its next read call (by then
        # it has queued the timed call after this read), or hold_ns after the start, so it
        # cannot hang where no call comes (a benchmark that synchronizes, the loop's end)
        if first:
            now = began
            # .cv: fetched from host memory each time, never from a cached copy of that line
            calls = tl.load(signal, cache_modifier=".cv", volatile=True)
            while (now - began < hold_ns) & (calls <= call):
                calls = tl.load(signal, cache_modifier=".cv", volatile=True)
                now = _nanoseconds()


MAX_SPINS = 1 << 16  # a bound on the wait for the other programs: never a hang


# One kernel for write-read, for timers that subtract the device span of a range around the
# flush (two kernels leave the gap between them in it): the stock zeros, then the read.  No
# program reads before every program has written (a grid-wide count, since writes still in
# flight at the end would stay dirty: measured), and every program is resident at once (a
# few per SM), so the wait ends; where one is not, the bound lets the reads go on (as it does
# if two streams ever run it at once: the count assumes one launch at a time).
@triton.jit(do_not_specialize=["n_zero", "n_read"])  # type: ignore[untyped-decorator]
def cleanflush_l2_write_read(dst, n_zero, src, n_read, sink, arrived, BLOCK: tl.constexpr, SPINS: tl.constexpr):  # type: ignore[no-untyped-def]
    start = tl.program_id(0) * BLOCK
    step = tl.num_programs(0) * BLOCK
    zeros = tl.zeros([BLOCK], dtype=tl.int32)
    for offset in range(start, n_zero, step):
        index = offset + tl.arange(0, BLOCK)
        tl.store(dst + index, zeros, mask=index < n_zero)
    tl.debug_barrier()
    # each launch adds one per program: this launch is done writing at the next multiple
    programs = tl.num_programs(0).to(tl.int64)
    before = tl.atomic_add(arrived, 1)
    goal = (before // programs + 1) * programs
    seen = before + 1
    spins = 0
    while (seen < goal) & (spins < SPINS):
        seen = tl.atomic_add(arrived, 0)
        spins += 1
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for offset in range(start, n_read, step):
        index = offset + tl.arange(0, BLOCK)
        acc += tl.load(src + index, mask=index < n_read, other=0.0)
    tl.atomic_add(sink, tl.sum(acc, axis=0))


WriteRead = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], None]
HeldSweep = Callable[[torch.Tensor, torch.Tensor, int, int], None]  # (data, sink, call, hold_ns)


def build_write_read(buffer: torch.Tensor, sink: torch.Tensor, programs: int) -> WriteRead:
    """``write_read(words, data, sink)``: zero the int32 ``words``, then sum ``data`` into
    ``sink``, as one kernel over ``programs`` programs; compiled and checked now on ``buffer``
    (a sync and a host read), raises when the check fails."""
    if _elsewhere(buffer.device.index):
        with torch.cuda.device(buffer.device.index):
            return build_write_read(buffer, sink, programs)
    grid = (programs, 1, 1)
    arrived = torch.zeros((), dtype=torch.int64, device=buffer.device)

    def launch(words: torch.Tensor, data: torch.Tensor, out: torch.Tensor) -> None:
        cleanflush_l2_write_read[grid](
            words,
            words.numel(),
            data,
            data.numel(),
            out,
            arrived,
            BLOCK=BLOCK,
            SPINS=MAX_SPINS,
            num_warps=WRITE_READ_WARPS,
        )

    written, read = buffer[: 2 * BLOCK + 3], buffer[2 * BLOCK + 3 : 5 * BLOCK + 8]
    try:
        written.fill_(7.0)
        read.fill_(1.0)
        sink.zero_()
        launch(written.view(torch.int32), read, sink)
        launch(written.view(torch.int32), read, sink)  # a second launch waits for its own programs only
        right = float(sink) == 2 * read.numel() and not bool(written.any()) and int(arrived) == 2 * programs
    finally:
        read.zero_()
        written.zero_()
        sink.zero_()
    if not right:
        raise RuntimeError("the one-kernel write-read did not zero and sum right")
    return _on_device_of(buffer.device.index, launch)


def programs_for(device: torch.device) -> int:
    """How many programs stream the buffer: a few per SM."""
    return int(torch.cuda.get_device_properties(device).multi_processor_count) * PROGRAMS_PER_SM


def build(buffer: torch.Tensor, sink: torch.Tensor, signal: torch.Tensor, programs: int) -> Sweep:
    """``sweep(data, sink, call)`` over ``programs`` programs, compiled now and checked once on
    ``buffer`` (a sync and a host read: this runs when the read buffer is made, never in a
    timed loop or a capture); each launch writes its ``call`` to ``signal[1]`` as it starts.
    Raises, with each launch form's reason, when none sums right and writes that mark."""
    if _elsewhere(buffer.device.index):
        with torch.cuda.device(buffer.device.index):
            return build(buffer, sink, signal, programs)
    grid = (programs, 1, 1)  # fixed: programs past the end add 0, and one launcher serves all
    compiled = cleanflush_l2_sweep[grid](
        buffer, sink, buffer.numel(), signal, 0, 0, BLOCK=BLOCK, HOLD=False, UNROLL=UNROLL, num_warps=WARPS
    )
    runner = compiled[grid] if hasattr(compiled, "__getitem__") else None  # None: Triton's interpreter
    # Launching the compiled kernel directly costs the host less than the JIT's own launch, and
    # the host must queue the flush, the start event and the timed call before the GPU runs dry
    # (benchmarks/latency.py).  Its argument list changed across Triton versions (constexprs
    # included from 3.3), so each form is checked by its sum.
    launches: dict[str, Sweep] = {}
    if runner is not None:
        launches["direct"] = lambda data, out, call: runner(
            data, out, data.numel(), signal, call, 0, BLOCK, False, UNROLL
        )
        launches["direct without constexprs"] = lambda data, out, call: runner(data, out, data.numel(), signal, call, 0)
    launches["jit"] = lambda data, out, call: cleanflush_l2_sweep[grid](
        data, out, data.numel(), signal, call, 0, BLOCK=BLOCK, HOLD=False, UNROLL=UNROLL, num_warps=WARPS
    )
    launch = _first_working(launches, lambda launch: _sums_wrong(launch, buffer, sink, signal))
    return _on_device_of(buffer.device.index, launch)


CHECK_CALL = 7  # the call number the build checks launch with (any but 0)


def _first_working(launches: dict[str, L], wrong: Callable[[L], str | None]) -> L:
    """The first of ``launches`` that ``wrong`` finds nothing wrong with; raises naming what
    was wrong with each (an error a launch raised included)."""
    failures = []
    for name, launch in launches.items():
        try:
            problem = wrong(launch)
        except Exception as exc:  # a launch form this triton does not take, no clock: the next one, said at the end
            problem = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
        if problem is None:
            return launch
        failures.append(f"{name}: {problem}")
    raise RuntimeError(f"no launch of the read kernel worked ({'; '.join(failures)})")


def _sums_wrong(launch: Sweep, buffer: torch.Tensor, sink: torch.Tensor, signal: torch.Tensor) -> str | None:
    """What is wrong with one checked launch of ``launch`` (None: it summed right and marked its call)."""
    probe = buffer[: 3 * BLOCK + 5]
    try:
        probe.fill_(1.0)
        sink.zero_()
        signal.zero_()
        launch(probe, sink, CHECK_CALL)
        if float(sink) != probe.numel():  # float() synchronizes
            return "wrong sum"
        return None if int(signal[1]) == CHECK_CALL else "no mark of its call"
    finally:
        probe.zero_()
        signal.zero_()


def build_held(
    buffer: torch.Tensor, sink: torch.Tensor, signal: torch.Tensor, programs: int, check_ns: int = 100_000
) -> HeldSweep:
    """``held(data, sink, call, ns)``: the sweep, lasting until the host's next read call
    (``signal[0]`` past ``call``), ``ns`` nanoseconds at most (the same kernel, its hold
    compiled in: ``_hold``); compiled now and checked once to sum right, to last ``check_ns``
    where no call comes and to end early where one has (syncs, on a CUDA ``buffer``); raises
    where no launch does."""
    if _elsewhere(buffer.device.index):
        with torch.cuda.device(buffer.device.index):
            return build_held(buffer, sink, signal, programs, check_ns)
    grid = (programs, 1, 1)
    compiled = cleanflush_l2_sweep[grid](
        buffer, sink, 0, signal, 0, 0, BLOCK=BLOCK, HOLD=True, UNROLL=UNROLL, num_warps=WARPS
    )
    runner = compiled[grid] if hasattr(compiled, "__getitem__") else None
    launches: dict[str, HeldSweep] = {}
    if runner is not None:  # as for the sweep: the direct launch costs the host less
        launches["direct"] = lambda data, out, call, ns: runner(
            data, out, data.numel(), signal, call, ns, BLOCK, True, UNROLL
        )
        launches["direct without constexprs"] = lambda data, out, call, ns: runner(
            data, out, data.numel(), signal, call, ns
        )
    launches["jit"] = lambda data, out, call, ns: cleanflush_l2_sweep[grid](
        data, out, data.numel(), signal, call, ns, BLOCK=BLOCK, HOLD=True, UNROLL=UNROLL, num_warps=WARPS
    )
    launch = _first_working(launches, lambda launch: _holds_wrong(launch, buffer, sink, signal, check_ns))
    return _on_device_of(buffer.device.index, launch)


def _held_ns(launch: HeldSweep, probe: torch.Tensor, sink: torch.Tensor, ns: int) -> float | None:
    """How long one held launch of call ``CHECK_CALL`` kept the stream; None where its sum
    was wrong."""
    sink.zero_()
    start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
    start.record()
    launch(probe, sink, CHECK_CALL, ns)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e6 if float(sink) == probe.numel() else None


def _holds_wrong(
    launch: HeldSweep, buffer: torch.Tensor, sink: torch.Tensor, signal: torch.Tensor, ns: int
) -> str | None:
    """What is wrong with ``launch``'s hold (None: it sums right, holds ``ns`` where no call
    comes, and lets go where one has)."""
    probe = buffer[: 3 * BLOCK + 5]
    try:
        probe.fill_(1.0)
        signal[0] = CHECK_CALL  # no call after this one: the hold runs its course
        waited = _held_ns(launch, probe, sink, ns)
        signal[0] = CHECK_CALL + 1  # the host has called again: no hold
        released = _held_ns(launch, probe, sink, ns)
    finally:
        probe.zero_()
        signal.zero_()
    if waited is None or released is None:
        return "wrong sum"
    # both spans include the launch's own latency (the stream was empty when timing began)
    if waited < ns:
        return f"held {waited / 1e3:.0f} us of {ns / 1e3:.0f}"
    return None if released <= waited - ns / 2 else "not let go by the next call"


def _elsewhere(index: int | None) -> bool:
    """Whether a buffer on GPU ``index`` is not on the current one: Triton compiles and
    launches for the current device (torch's sum follows its tensor)."""
    return index is not None and index != torch.cuda.current_device()


def _on_device_of(index: int | None, launch: L) -> L:
    """Switch device only when a benchmark flushes on another GPU than the current one."""

    def on_device(*tensors: torch.Tensor) -> None:
        if _elsewhere(index):
            with torch.cuda.device(index):
                launch(*tensors)
        else:
            launch(*tensors)

    return cast(L, on_device)
