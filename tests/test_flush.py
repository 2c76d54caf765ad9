import json
import sys
import types

import pytest
import torch

import cleanflush
from cleanflush import _flush, _state

from .conftest import run_python
from .ops import OpRecorder, overlaps

MiB = 1 << 20
STAND_IN_CALLS = types.SimpleNamespace(signal="signal")  # Calls, where pinned memory needs CUDA


def run_flush(cache):
    _flush.prepare(cache.device)  # the one allocation per device, outside the record
    with OpRecorder() as rec:
        _flush.flush(cache, cache.zero_, "test")
    return rec


def assert_clean_read(op, cache, written):
    name, args, kwargs = op
    assert name == "sum"
    data = args[0]
    assert data.dtype == torch.float32  # never the int32 cache widened to int64
    assert not overlaps(data, cache)  # a region disjoint from the dirty lines
    assert data.numel() * 4 >= _flush.read_bytes(0, written)
    assert kwargs.get("out") is not None  # into a preallocated scalar: no allocation


def test_write_read_is_the_stock_write_then_a_float32_read():
    cache = torch.full((1024,), 7, dtype=torch.int32)
    with cleanflush.policy("write-read"):
        rec = run_flush(cache)
    assert rec.names == ["zero_", "sum"]
    assert rec.ops[0][1][0] is cache
    assert_clean_read(rec.ops[1], cache, cache.numel() * 4)
    assert int(cache.sum()) == 0


def test_read_policy_reads_only():
    cache = torch.full((1024,), 7, dtype=torch.int32)
    with cleanflush.policy("read"):
        rec = run_flush(cache)
    assert rec.names == ["sum"]
    assert_clean_read(rec.ops[0], cache, 0)
    assert int(cache.sum()) == 7 * 1024  # the cache is never written


def test_write_policy_is_stock():
    cache = torch.full((1024,), 7, dtype=torch.int32)
    with cleanflush.policy("write"):
        rec = run_flush(cache)
    assert rec.names == ["zero_"]


def test_no_allocation_after_the_first_flush():
    cache = torch.empty(1024, dtype=torch.int32)
    _flush.flush(cache, cache.zero_, "test")
    buffer, sink = _state.STATE.buffers[cache.device][:2]
    with OpRecorder() as rec:
        _flush.flush(cache, cache.zero_, "test")
    assert not {"zeros", "empty"} & set(rec.names)
    _, args, kwargs = rec.ops[-1]
    assert args[0].data_ptr() == buffer.data_ptr()
    assert kwargs["out"] is sink


@pytest.mark.parametrize(
    "l2, written, expected",
    [
        (60 * MiB, 256 * MiB, 120 * MiB),  # H200 do_bench: 2 x L2 after the stock 256 MiB write
        (60 * MiB, 60 * MiB, 196 * MiB),  # L2-sized write: keep the GPU busy as long as stock
        (60 * MiB, 0, 256 * MiB),  # read alone
        (40 * MiB, 256 * MiB, 80 * MiB),  # A100
        (200 * MiB, 0, 400 * MiB),  # a large L2: 2 x L2 wins
    ],
)
def test_read_size(l2, written, expected):
    assert _flush.read_bytes(l2, written) == expected


@pytest.fixture
def fake_l2(monkeypatch):
    """A device that reports an L2 (CPU reports none, which hides 2 x L2 behind the 256 MiB
    floor): returns the fake size to set; the read buffer is made again for it."""

    def set_l2(nbytes):
        monkeypatch.setattr(_flush, "l2_bytes", lambda device: nbytes)
        _flush.release()
        return nbytes

    return set_l2


@pytest.mark.parametrize(
    "policy, written, expected",
    [
        ("write-read", 16 * MiB, 240 * MiB),  # keeps the GPU busy as long as the stock 256 MiB
        ("write-read", 128 * MiB, 200 * MiB),  # 2 x L2 after a large write
        ("read", 16 * MiB, 256 * MiB),  # nothing written: all of it
    ],
)
def test_the_read_covers_what_the_l2_and_the_write_ask_for(fake_l2, policy, written, expected):
    fake_l2(100 * MiB)
    cache = torch.empty(written // 4, dtype=torch.int32)
    with cleanflush.policy(policy):
        rec = run_flush(cache)
    data = rec.ops[-1][1][0]
    assert rec.names[-1] == "sum" and data.numel() * 4 == expected


def test_a_large_l2_gets_a_buffer_of_twice_its_size(fake_l2):
    l2 = fake_l2(160 * MiB)
    entry = _flush.prepare(torch.device("cpu"))
    assert entry.l2 == l2 and entry.buffer.numel() * 4 == 2 * l2
    cache = torch.empty(16, dtype=torch.int32)
    with cleanflush.policy("read"):
        rec = run_flush(cache)
    assert rec.ops[-1][1][0].numel() * 4 == 2 * l2


# Where cleanflush owns the write: an eighth of the L2 written, 2 x L2 read, the hold keeps the GPU busy


@pytest.fixture
def holding(monkeypatch, fake_l2):
    """A CPU read buffer for an L2 of 1 MiB whose read can hold the stream, as on a GPU: its
    two kernels are stand-ins that record how many bytes each read covers.  Returns that list."""
    fake_l2(MiB)
    device = torch.device("cpu")
    reads = []
    entry = _flush.prepare(device)._replace(
        sweep=lambda data, out, call: reads.append(data.numel() * 4),
        held=lambda data, out, call, ns: reads.append(data.numel() * 4),
    )
    monkeypatch.setitem(_state.STATE.buffers, device, entry)
    return reads


def owned_flush(cache, policy="write-read"):
    """A flush of ``cache`` as Triton's clear_cache runs it: its stock zero_, and the same
    write on a head of the cache where cleanflush owns the write."""
    with cleanflush.policy(policy), OpRecorder() as rec:
        _flush.flush(cache, cache.zero_, "test", lambda head: head.zero_())
    return rec


def test_an_owned_write_covers_an_eighth_of_the_l2_and_the_read_two_l2(holding):
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    rec = owned_flush(cache)
    written = MiB // 8 // 4  # int32 elements in an eighth of the 1 MiB L2
    [(name, (head,), _)] = rec.ops
    assert name == "zero_" and head.data_ptr() == cache.data_ptr() and head.numel() == written
    assert not cache[:written].any() and bool((cache[written:] == 7).all())  # the rest untouched
    assert holding == [2 * MiB]  # 2 x L2: the hold, not the bytes, keeps the GPU busy
    assert cleanflush.flush_counts() == {("test", "write-read"): 1}


@pytest.mark.parametrize("l2_mib, written", [(40, 5 * MiB), (50, 6.25 * MiB), (60, 7.5 * MiB)])
def test_the_owned_write_follows_the_l2(l2_mib, written):
    assert _flush.owned_write_bytes(l2_mib * MiB) == written  # A100, H100, H200


def test_without_a_hold_the_whole_stock_write_runs_and_the_read_tops_it_up(fake_l2):
    fake_l2(MiB)  # a CPU buffer has no kernel, so no hold: only bytes keep the GPU busy
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    rec = owned_flush(cache)
    assert rec.names == ["zero_", "sum"] and rec.ops[0][1][0] is cache and not cache.any()
    assert rec.ops[1][1][0].numel() * 4 == 252 * MiB  # the rest of the stock 256 MiB


def test_a_flush_in_a_loop_takes_its_views_once_and_never_keeps_the_cache_alive(holding):
    import gc
    import weakref

    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    heads = [owned_flush(cache).ops[0][1][0] for _ in range(3)]
    assert heads[0] is heads[1] is heads[2]  # one head for the loop, not two views a call
    assert heads[0].data_ptr() == cache.data_ptr() and heads[0].numel() == MiB // 8 // 4
    gone = weakref.ref(cache)
    del cache, heads
    gc.collect()
    assert gone() is None  # a view of the cache kept for the next call would keep it (and its memory)
    other = torch.full((2 * MiB // 4,), 7, dtype=torch.int32)
    [(_, (head,), _)] = owned_flush(other).ops
    assert head.data_ptr() == other.data_ptr() and not other[: MiB // 8 // 4].any()


def test_a_chosen_read_region_follows_the_whole_stock_write(holding):
    # verify --controls breaks the read after the stock write, where a broken read does the most harm
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    with _flush.read_region(lambda cache, region, l2: region[: l2 // 2 // 4]):
        rec = owned_flush(cache)
    assert rec.ops[0][1][0] is cache and not cache.any()
    assert holding == [MiB // 2]


@pytest.mark.parametrize(
    "cache",
    [
        torch.full((4 * MiB // 4, 2), 7, dtype=torch.int32)[:, 0],  # not contiguous: a head is no one block
        torch.full((MiB // 8 // 4,), 7, dtype=torch.int32),  # no larger than the head
    ],
)
def test_a_cache_with_no_proper_head_is_written_whole(holding, cache):
    rec = owned_flush(cache)
    assert rec.ops[0][1][0] is cache and not cache.any()


def test_the_read_policy_still_reads_the_stock_bytes_and_writes_nothing(holding):
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    rec = owned_flush(cache, "read")
    assert rec.names == [] and bool((cache == 7).all()) and holding == [256 * MiB]


def test_a_write_the_harness_owns_is_whole_and_the_read_two_l2(holding):
    # Inductor's inline write (after_write) and every flush without write_head: all of it
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    with cleanflush.policy("write-read"):
        _flush.flush(cache, cache.zero_, "test")
        _flush.after_write(torch.device("cpu"), 256 * MiB, "inline")
    assert not cache.any() and holding == [252 * MiB, 2 * MiB]


def test_a_read_that_fails_after_the_head_falls_back_to_the_whole_stock_write(holding, monkeypatch):
    def broken(device, nbytes, cache=None, hold=False):
        raise RuntimeError("no memory")

    monkeypatch.setattr(_flush, "read", broken)
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    with pytest.warns(RuntimeWarning, match="fall back to the stock write"):
        owned_flush(cache)
    assert not cache.any()  # the head alone would leave L2 unflushed
    assert cleanflush.flush_counts() == {("test", "write"): 1}


@pytest.mark.parametrize("write, args, value", [("zero_", (), 0), ("random_", (5, 6), 5)])
def test_a_handed_out_cache_tensor_writes_its_head(holding, write, args, value):
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    flushing = _flush.flushing_tensor(cache, "test", write=write)
    with cleanflush.policy("write-read"):
        getattr(flushing, write)(*args)
    written = MiB // 8 // 4
    assert bool((cache[:written] == value).all()) and bool((cache[written:] == 7).all())
    assert holding == [2 * MiB]


@pytest.mark.parametrize("policy, counted", [("write-read", "write-read"), ("read", "write-read"), ("write", "write")])
def test_after_write_reads_one_l2_or_what_was_written(fake_l2, policy, counted):
    # Inductor's inline write: None means one L2 of it (InductorBenchmarker's buffer)
    fake_l2(100 * MiB)
    device = torch.device("cpu")
    _flush.prepare(device)
    with cleanflush.policy(policy), OpRecorder() as rec:
        _flush.after_write(device, None, "inline")
        _flush.after_write(device, 16 * MiB, "inline")
    sizes = [args[0].numel() * 4 for name, args, _ in rec.ops if name == "sum"]
    assert sizes == ([] if policy == "write" else [200 * MiB, 240 * MiB])
    assert cleanflush.flush_counts() == {("inline", counted): 2}


def test_failed_read_falls_back_to_the_stock_write_and_says_so_once(monkeypatch):
    def broken(device, nbytes, cache=None, hold=False):
        raise RuntimeError("no memory")

    monkeypatch.setattr(_flush, "read", broken)
    cache = torch.full((16,), 3, dtype=torch.int32)
    with cleanflush.policy("read"), pytest.warns(RuntimeWarning, match="fall back to the stock write") as caught:
        _flush.flush(cache, cache.zero_, "test")
        cache.fill_(3)
        _flush.flush(cache, cache.zero_, "test")
    assert len(caught) == 1
    # points at the line that flushed, not into cleanflush (under mutmut its trampoline's
    # frames sit between: that is the caller it sees)
    assert caught[0].filename == __file__ or "mutmut" in sys.modules
    assert int(cache.sum()) == 0  # the stock write ran instead
    assert cleanflush.flush_counts() == {("test", "write"): 2}
    [row] = [r for r in cleanflush.status() if r.target == "flushes in test"]
    assert (row.name, row.state, row.detail) == (
        "cleanflush",
        "failed",
        "the clean read could not run on cpu (no memory): those flushes ran the stock code",
    )


def test_read_buffer_is_allocated_from_a_thread_of_its_own(monkeypatch):
    # CUDA-graph trees route the calling thread's allocations into a graph pool while they
    # warm up; the buffer must come from another thread (the GPU proof: the max-autotune
    # test in tests/gpu).  Here: which thread called the allocator.
    import threading

    real_zeros = torch.zeros
    threads = []

    def zeros(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real_zeros(*args, **kwargs)

    monkeypatch.setattr(torch, "zeros", zeros)
    _flush.release()
    _flush.prepare(torch.device("cpu"))
    assert threads == ["cleanflush-prepare", "cleanflush-prepare"]


# The named read kernel (on CUDA): its sum, its name, and torch's sum where it cannot be built

SWEEP_CHECK = """
import json, torch
from cleanflush import _sweep
out = {}
signal = torch.zeros(2, dtype=torch.int64)
for n in (1, 4095, 4096, 3 * 4096 * 5 + 7):
    data = torch.zeros(n, dtype=torch.float32)  # the read buffer: zeros
    sink = torch.zeros((), dtype=torch.float32)
    sweep = _sweep.build(data, sink, signal, 3)  # compiles, checks itself, leaves the zeros
    out[f"zeros left {n}"] = [float(data.abs().sum()), 0.0]
    out[f"signal left {n}"] = [signal.tolist(), [0, 0]]
    data.copy_(torch.arange(n, dtype=torch.float32) % 7)
    sink.zero_()
    sweep(data, sink, 40 + n)
    out[n] = [float(sink), float(data.sum())]
    out[f"started {n}"] = [signal.tolist(), [0, 40 + n]]  # the read marks its call, the host's count untouched
sink.zero_()
sweep(data[:5000], sink, 3)  # a prefix, as the read after a write asks
out["prefix"] = [float(sink), float(data[:5000].sum())]
print(json.dumps(out))
"""


def test_the_sweep_kernel_sums_every_element_once():
    # Triton's interpreter runs the real kernel on CPU tensors
    child = run_python(SWEEP_CHECK, {"TRITON_INTERPRET": "1"})
    assert child.returncode == 0, child.stderr
    for n, (swept, expected) in json.loads(child.stdout).items():
        assert swept == expected, n


def test_the_sweep_kernel_name_matches_no_name_filter():
    pytest.importorskip("triton")
    from cleanflush import _sweep

    assert _sweep.cleanflush_l2_sweep.fn.__name__ == _flush.READ_KERNEL == "cleanflush_l2_sweep"
    # substrings and names that timers look for or drop (harnesses.md): DeepGEMM's and
    # SGLang's bench_kineto tests, tritonbench's CACHE_CLEAR_KERNEL, torch's own kernels
    for name in ("reduce", "gemm", "nvjet", "FillFunctor", "elementwise", "sum", "kernel", "fused", "triton_"):
        assert name.lower() not in _flush.READ_KERNEL.lower(), name


def test_read_runs_the_sweep_when_there_is_one(monkeypatch):
    device = torch.device("cpu")
    calls = []
    entry = _flush.prepare(device)
    monkeypatch.setitem(
        _state.STATE.buffers, device, entry._replace(sweep=lambda data, out, call: calls.append((data, out, call)))
    )
    with OpRecorder() as rec:
        _flush.read(device, 64 * MiB)
    assert rec.names == []  # not torch's sum
    ((data, out, call),) = calls
    assert (
        data.data_ptr() == entry.buffer.data_ptr() and data.numel() * 4 == 64 * MiB and out is entry.sink and call == 0
    )  # no signal on CPU


# The hold: after a flush that found its stream empty, the stream stays busy HOLD_NS


@pytest.fixture
def held(monkeypatch):
    """A CPU read buffer whose sweep (plain and held) record their calls, in order, with each
    ``caught_up`` question; ``held(caught)`` sets the answer."""
    device = torch.device("cpu")
    calls = []
    entry = _flush.prepare(device)._replace(
        sweep=lambda data, out, call: calls.append("sweep"), held=lambda data, out, call, ns: calls.append(("held", ns))
    )
    monkeypatch.setitem(_state.STATE.buffers, device, entry)
    answer = {}

    def caught_up(device):
        calls.append("asked")
        return answer["idle"]

    monkeypatch.setattr(_flush, "caught_up", caught_up)

    def set_idle(idle):
        answer["idle"] = idle
        calls.clear()
        return calls

    return set_idle


@pytest.mark.parametrize(
    "policy, idle, expected",
    [
        ("write-read", True, ["asked", "zero_", ("held", _flush.HOLD_NS)]),
        ("read", True, ["asked", ("held", _flush.HOLD_NS)]),
        ("write-read", False, ["asked", "zero_", "sweep"]),
        ("read", False, ["asked", "sweep"]),
        ("write", True, ["zero_"]),  # the stock flush: nothing added
    ],
)
def test_a_flush_that_finds_the_gpu_caught_up_reads_with_the_hold(held, policy, idle, expected):
    calls = held(idle)
    cache = torch.full((16,), 7, dtype=torch.int32)
    with cleanflush.policy(policy):
        _flush.flush(cache, lambda: (calls.append("zero_"), cache.zero_()), "test")
    assert calls == expected  # asked before the write, which fills the stream


def test_the_read_alone_holds_only_when_asked(held):
    calls = held(True)
    _flush.read(torch.device("cpu"), MiB)
    _flush.read(torch.device("cpu"), MiB, hold=True)
    assert calls == ["sweep", ("held", _flush.HOLD_NS)]


# The handshake: the host numbers its read calls, the kernel marks the one it started


def test_calls_are_numbered_in_host_memory_and_caught_up_means_the_last_one_started():
    signal = torch.zeros(2, dtype=torch.int64)  # plain CPU memory, as the kernel sees pinned memory
    calls = _flush.Calls(signal)
    assert calls.caught_up()  # nothing called yet
    assert [calls.next(), calls.next()] == [1, 2] and signal.tolist() == [2, 0]
    assert not calls.caught_up()  # the GPU has started neither read
    signal[1] = 1
    assert not calls.caught_up()  # the first, not the last
    signal[1] = 2  # as the kernel marks it
    assert calls.caught_up()


def test_each_read_takes_the_next_call_number(monkeypatch):
    device = torch.device("cpu")
    seen = []
    calls = _flush.Calls(torch.zeros(2, dtype=torch.int64))
    entry = _flush.prepare(device)._replace(
        sweep=lambda data, out, call: seen.append(("sweep", call)),
        held=lambda data, out, call, ns: seen.append(("held", call, ns)),
        calls=calls,
    )
    monkeypatch.setitem(_state.STATE.buffers, device, entry)
    _flush.read(device, MiB)
    _flush.read(device, MiB, hold=True)
    _flush.read(device, MiB)  # lets the held read go: the host's count passes its call
    assert seen == [("sweep", 1), ("held", 2, _flush.HOLD_NS), ("sweep", 3)] and calls.signal.tolist() == [3, 0]


def test_a_hold_lasts_twice_the_hosts_time_between_two_flushes_and_never_over_its_bound():
    now = [0]
    calls = _flush.Calls(torch.zeros(2, dtype=torch.int64), clock=lambda: now[0])
    assert calls.hold_ns() == _flush.HOLD_NS  # nothing known yet
    calls.arrived()
    calls.next()
    now[0] += 9_000  # the flush's own host time is not the loop's
    calls.left()
    now[0] += 30_000  # the start event, the timed call, the end event, the loop
    calls.arrived()
    assert calls.hold_ns() == 2 * 30_000
    calls.next()
    calls.left()
    now[0] += 400_000  # a loop that synchronizes after each call: the whole bound
    calls.arrived()
    assert calls.hold_ns() == _flush.HOLD_NS
    calls.next()
    calls.left()  # a read with no flush come to since (the read alone): not known, the bound
    assert calls.hold_ns() == _flush.HOLD_NS


@pytest.fixture
def cuda_calls(monkeypatch):
    """cuda:1 with a read buffer whose Calls live in CPU memory, its stream busy, no capture:
    returns (device, signal)."""
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: Stream(False))
    cuda = torch.device("cuda", 1)
    signal = torch.zeros(2, dtype=torch.int64)
    entry = _flush.ReadBuffer(torch.zeros(4), torch.zeros(()), 0, None, None, _flush.Calls(signal), _flush.Views())
    monkeypatch.setitem(_state.STATE.buffers, cuda, entry)
    return cuda, signal


def test_caught_up_when_the_gpu_started_the_last_read_though_its_stream_is_busy(cuda_calls, monkeypatch):
    # do_bench on a host slower than the GPU: the last timed call may still run
    cuda, signal = cuda_calls
    signal.copy_(torch.tensor([5, 5]))
    assert _flush.caught_up(cuda) is True
    signal[1] = 4  # the last read still queued: a backlog that covers the host
    assert _flush.caught_up(cuda) is False
    assert _flush.caught_up(torch.device("cuda", 6)) is False  # busy, and no read buffer there yet
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: Stream(True))
    assert _flush.caught_up(cuda) is True  # an empty stream is caught up whatever the marks say


def test_flushes_in_a_loop_hold_as_long_as_twice_the_hosts_time_between_them(cuda_calls, monkeypatch):
    cuda, signal = cuda_calls
    now = [0]
    holds = []
    entry = _state.STATE.buffers[cuda]._replace(
        held=lambda data, out, call, ns: holds.append(ns), calls=_flush.Calls(signal, clock=lambda: now[0])
    )
    monkeypatch.setitem(_state.STATE.buffers, cuda, entry)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: Stream(True))  # caught up: the stream is empty
    with cleanflush.policy("read"):
        for gap in (500_000, 20_000, 45_000, 90_000):  # the host's time from one flush's read to the next flush
            now[0] += gap
            _flush.around(lambda: None, cuda, 0, "loop")
    assert holds == [_flush.HOLD_NS, 40_000, 90_000, _flush.HOLD_NS]


def test_not_caught_up_during_capture_or_on_errors(cuda_calls, monkeypatch):
    cuda, signal = cuda_calls
    signal.copy_(torch.tensor([5, 5]))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert _flush.caught_up(cuda) is False  # a captured read's call number is stale at replay

    def gone():
        raise RuntimeError("device lost")

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", gone)
    assert _flush.caught_up(cuda) is False


@pytest.mark.parametrize("caught", [True, False])
def test_the_read_after_an_inline_write_holds_when_caught_up(held, caught):
    calls = held(caught)
    _flush.after_write(torch.device("cpu"), 64, "inline")
    assert calls == ["asked", ("held", _flush.HOLD_NS) if caught else "sweep"]


def test_a_forked_child_does_not_touch_the_parents_read_buffers():
    import os

    _flush.prepare(torch.device("cpu"))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its buffers start empty (the parent's pinned signal is not mapped here)
        os.write(write_end, b"1" if not _state.STATE.buffers and not _state.STATE.write_read_kernels else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read_end, 1) == b"1" and _state.STATE.buffers  # the parent keeps its own


class Stream:
    def __init__(self, empty):
        self.empty = empty

    def query(self):
        if isinstance(self.empty, Exception):
            raise self.empty
        return self.empty


@pytest.mark.parametrize("empty", [True, False])
def test_found_idle_asks_the_current_stream_of_a_cuda_device(monkeypatch, empty):
    asked = []
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: asked.append(device) or Stream(empty))
    cuda = torch.device("cuda", 1)
    assert _flush.found_idle(cuda) is empty and asked == [cuda]


def test_found_idle_is_false_on_cpu_under_capture_and_on_errors(monkeypatch):
    def no_stream(device):
        raise AssertionError("a capturing stream must not be queried")

    assert _flush.found_idle(torch.device("cpu")) is False
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_stream", no_stream)
    assert _flush.found_idle(torch.device("cuda", 0)) is False
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: Stream(RuntimeError("device lost")))
    assert _flush.found_idle(torch.device("cuda", 0)) is False


def test_a_hold_that_cannot_be_built_is_said_once_and_shown(monkeypatch):
    pytest.importorskip("triton")
    from cleanflush import _sweep

    def broken(*args):
        raise RuntimeError("no %globaltimer\nmore lines")

    monkeypatch.setattr(_sweep, "build_held", broken)
    monkeypatch.setattr(_sweep, "programs_for", lambda device: 4)
    cuda = types.SimpleNamespace(device=torch.device("cuda", 0))  # stands in for a CUDA buffer
    with pytest.warns(RuntimeWarning) as caught:
        assert _flush._build_held(cuda, None, STAND_IN_CALLS) is None
        assert _flush._build_held(cuda, None, STAND_IN_CALLS) is None
    assert [str(w.message) for w in caught] == [
        "cleanflush: the read kernel's hold could not be built on cuda:0 (RuntimeError: no %globaltimer); "
        "write-read writes the whole cache, and where the GPU catches up with the host, host time after the read "
        "can show in the timing"
    ]
    row = {r.target: r for r in cleanflush.status()}["read kernel's hold on cuda:0"]
    assert not row.patched and "no %globaltimer" in row.detail and "more lines" not in row.detail


def test_a_sweep_that_cannot_be_built_leaves_the_sum_and_says_so(monkeypatch):
    from cleanflush import _sweep

    monkeypatch.setattr(_flush, "Calls", lambda: STAND_IN_CALLS)  # pinned memory needs CUDA

    def broken(*args, **kwargs):
        raise RuntimeError("PTX too new\nmore lines")

    monkeypatch.setattr(_sweep, "build", broken)
    monkeypatch.setattr(_sweep, "programs_for", lambda device: 4)
    cuda = types.SimpleNamespace(device=torch.device("cuda", 0))  # stands in for a CUDA buffer
    with pytest.warns(RuntimeWarning, match="cleanflush_l2_sweep could not be built on cuda:") as caught:
        assert _flush._build_sweep(cuda, None) == (None, None)
        assert _flush._build_sweep(cuda, None) == (None, None)
        assert _flush._build_sweep(types.SimpleNamespace(device=torch.device("cuda", 1)), None) == (None, None)
    assert [str(w.message) for w in caught] == [
        f"cleanflush: the read kernel cleanflush_l2_sweep could not be built on cuda:{i} (RuntimeError: PTX too "
        "new); the read runs as torch's sum, which timers that pick kernels by name can mistake for the kernel "
        "under test"
        for i in (0, 1)
    ]
    row = {r.target: r for r in cleanflush.status()}["read kernel on cuda:0"]
    assert not row.patched and "RuntimeError: PTX too new" in row.detail and "more lines" not in row.detail
    assert _flush._build_sweep(types.SimpleNamespace(device=torch.device("cpu")), None) == (None, None)  # CPU: the sum


class FakeKernel:
    """Stands in for the Triton kernel: ``kernel[grid](...)`` (the JIT launch) sums with
    torch, marks its call in the signal, and returns a compiled kernel whose direct runner
    takes ``takes`` arguments (Triton 3.3+ passes the constexprs too, older versions do not;
    other lists raise).  ``right=False``: every launch writes a wrong sum; ``marks=False``:
    none writes its mark (a GPU that cannot see the signal)."""

    def __init__(self, takes, right=True, marks=True):
        self.takes, self.right, self.marks, self.launched = takes, right, marks, []

    def _sum(self, how, data, out, n, signal, call):
        self.launched.append(how)
        out += data[:n].sum() if self.right else -1.0
        if self.marks:
            signal[1] = call

    def __getitem__(self, grid):
        def jit(data, out, n, signal, call, hold_ns, BLOCK, HOLD, num_warps):
            self._sum("jit", data, out, n, signal, call)
            return Compiled(self)

        return jit


class Compiled:
    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def runner(*args):
            if len(args) != self.kernel.takes:
                raise TypeError(f"expected {self.kernel.takes} arguments, got {len(args)}")
            self.kernel._sum(f"direct/{len(args)}", *args[:5])

        return runner


@pytest.mark.parametrize("takes, used", [(8, "direct/8"), (6, "direct/6"), (9, "jit")])
def test_the_sweep_launches_the_way_its_triton_takes(monkeypatch, takes, used):
    pytest.importorskip("triton")
    from cleanflush import _sweep

    kernel = FakeKernel(takes)
    monkeypatch.setattr(_sweep, "cleanflush_l2_sweep", kernel)
    buffer, sink, signal = torch.zeros(4 * _sweep.BLOCK), torch.zeros(()), torch.zeros(2, dtype=torch.int64)
    sweep = _sweep.build(buffer, sink, signal, 2)
    assert float(buffer.abs().sum()) == 0 and signal.tolist() == [0, 0]  # the check's ones and mark are gone
    kernel.launched.clear()
    buffer[:10] = 3.0
    sink.zero_()
    sweep(buffer[:8], sink, 12)
    assert kernel.launched == [used] and float(sink) == 24.0 and signal.tolist() == [0, 12]


@pytest.mark.parametrize("kernel", [FakeKernel(6, right=False), FakeKernel(6, marks=False)], ids=["sum", "mark"])
def test_a_sweep_that_never_sums_right_or_never_marks_its_call_is_not_used(monkeypatch, kernel):
    pytest.importorskip("triton")
    from cleanflush import _sweep

    monkeypatch.setattr(_sweep, "cleanflush_l2_sweep", kernel)
    with pytest.raises(RuntimeError, match=r"no launch of the read kernel summed right \(direct, direct wi"):
        _sweep.build(torch.zeros(4 * _sweep.BLOCK), torch.zeros(()), torch.zeros(2, dtype=torch.int64), 2)


@pytest.mark.parametrize(
    "waited, released, used",
    [
        (140_000, 40_000, True),  # held its bound, let go by the call (both with ~40 us of launch latency)
        (140_000, 135_000, False),  # never let go: the kernel cannot see the host's count
        (60_000, 20_000, False),  # no hold at all (no clock)
        (None, 20_000, False),  # a wrong sum
        (140_000, None, False),
    ],
)
def test_a_hold_is_used_only_where_it_holds_its_bound_and_a_call_lets_it_go(monkeypatch, waited, released, used):
    pytest.importorskip("triton")
    from cleanflush import _sweep

    spans, counts = [waited, released], []

    def held_ns(launch, probe, sink, ns):
        counts.append(int(signal[0]))  # what the host's count was at each launch
        return spans[len(counts) - 1]

    monkeypatch.setattr(_sweep, "_held_ns", held_ns)
    signal = torch.zeros(2, dtype=torch.int64)
    buffer = torch.zeros(4 * _sweep.BLOCK)
    assert _sweep._holds_right(None, buffer, torch.zeros(()), signal, 100_000) is used
    assert counts == [_sweep.CHECK_CALL, _sweep.CHECK_CALL + 1]  # first no call after it, then one
    assert signal.tolist() == [0, 0] and float(buffer.abs().sum()) == 0  # left as found


def test_l2_size_comes_from_the_cuda_device_properties(monkeypatch):
    # stands in for torch.cuda.get_device_properties, which needs a GPU
    seen = []

    def properties(device):
        seen.append(device)
        return types.SimpleNamespace(L2_cache_size=62914560)

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    assert _flush.l2_bytes(torch.device("cuda", 1)) == 62914560 and seen == [torch.device("cuda", 1)]
    assert _flush.l2_bytes(torch.device("cpu")) == 0 and len(seen) == 1


def test_no_buffer_is_made_during_capture(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(_flush.ReadUnavailable, match="^the read buffer cannot be allocated during CUDA graph capture$"):
        _flush.prepare(torch.device("cuda", 0))
    assert cleanflush._state.STATE.read_unavailable == {}  # the next flush outside capture may make it


def test_the_buffer_is_float32_whatever_the_default_dtype():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        entry = _flush.prepare(torch.device("cpu"))
    finally:
        torch.set_default_dtype(default)
    assert entry.buffer.dtype == entry.sink.dtype == torch.float32 and entry.sink.dim() == 0
    assert float(entry.buffer.abs().sum()) == 0.0


def test_a_buffer_that_cannot_be_made_is_said_and_not_tried_again(monkeypatch):
    calls = []

    def no_memory(device, numel):
        calls.append(numel)
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(_flush, "_allocate_outside_pools", no_memory)
    for _ in range(2):
        with pytest.raises(
            _flush.ReadUnavailable, match=r"^the read buffer could not be allocated \(CUDA out of memory\)$"
        ):
            _flush.prepare(torch.device("cpu"))
    assert calls == [256 * MiB // 4]  # tried once
    assert cleanflush._state.STATE.read_unavailable == {
        "cpu": "the read buffer could not be allocated (CUDA out of memory)"
    }


def test_the_sweep_is_built_for_the_buffer_and_its_device(monkeypatch):
    from cleanflush import _sweep

    calls = []
    monkeypatch.setattr(_sweep, "programs_for", lambda device: calls.append(("programs", device)) or 7)
    monkeypatch.setattr(_sweep, "build", lambda *args: calls.append(("build", *args)) or "the sweep")
    monkeypatch.setattr(_flush, "Calls", lambda: STAND_IN_CALLS)
    buffer = types.SimpleNamespace(device=torch.device("cuda", 3))
    assert _flush._build_sweep(buffer, "sink") == ("the sweep", STAND_IN_CALLS)
    assert calls == [("programs", torch.device("cuda", 3)), ("build", buffer, "sink", "signal", 7)]


def test_a_long_build_error_is_cut_to_one_line_of_200(monkeypatch):
    from cleanflush import _sweep

    def broken(*args):
        raise ValueError("x" * 400 + "\nsecond line")

    monkeypatch.setattr(_sweep, "build", broken)
    monkeypatch.setattr(_sweep, "programs_for", lambda device: 4)
    monkeypatch.setattr(_flush, "Calls", lambda: STAND_IN_CALLS)
    with pytest.warns(RuntimeWarning):
        _flush._build_sweep(types.SimpleNamespace(device=torch.device("cuda", 0)), None)
    assert cleanflush._state.STATE.sweep_unavailable["cuda:0"] == ("ValueError: " + "x" * 400)[:200]


def test_a_failed_read_after_an_inline_write_names_its_target(monkeypatch):
    def broken(device, nbytes, cache=None, hold=False):
        raise RuntimeError("no memory")

    monkeypatch.setattr(_flush, "read", broken)
    with pytest.warns(RuntimeWarning, match="^cleanflush: the clean read could not run in Inductor.x on cpu"):
        _flush.after_write(torch.device("cpu"), None, "Inductor.x")
    assert cleanflush.flush_counts() == {("Inductor.x", "write"): 1}


def test_an_unexpected_cache_object_keeps_the_stock_flush_and_says_so_per_target():
    ran = []
    with pytest.warns(RuntimeWarning) as caught:
        for target in ("a", "a", "b"):
            stock = lambda target=target: ran.append(target) or "stock result"  # noqa: E731
            assert _flush.flush("not a tensor", stock, target) == "stock result"
    assert ran == ["a", "a", "b"]
    assert [str(w.message) for w in caught] == [
        f"cleanflush: {t}: it flushed an unexpected cache object ('str' object has no attribute 'device'); "
        "its stock flush runs"
        for t in ("a", "b")
    ]
    assert cleanflush.flush_counts() == {("a", "write"): 2, ("b", "write"): 1}


def test_the_buffer_is_made_on_the_device_asked_for():
    buffer, sink = _flush._allocate_outside_pools(torch.device("meta"), 16)  # no memory: shapes only
    assert buffer.device.type == sink.device.type == "meta"
    assert (buffer.shape, sink.shape, buffer.dtype) == ((16,), (), torch.float32)


def test_an_allocation_error_in_the_thread_reaches_the_caller(monkeypatch):
    def no_memory(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(torch, "zeros", no_memory)
    with pytest.raises(_flush.ReadUnavailable, match=r"could not be allocated \(boom\)"):
        _flush.prepare(torch.device("cpu"))


def test_each_target_says_its_own_failed_read(monkeypatch):
    def broken(device, nbytes, cache=None, hold=False):
        raise RuntimeError("no memory")

    monkeypatch.setattr(_flush, "read", broken)
    cache = torch.zeros(16, dtype=torch.int32)
    with cleanflush.policy("write-read"), pytest.warns(RuntimeWarning) as caught:
        for target in ("one", "two", "one"):
            _flush.flush(cache, cache.zero_, target)
    assert [str(w.message) for w in caught] == [
        f"cleanflush: the clean read could not run in {t} on cpu (no memory); these flushes fall back to the "
        "stock write"
        for t in ("one", "two")
    ]


def test_a_flushing_tensor_flushes_under_its_own_target_and_is_the_same_storage():
    """One class per target (made once), ``zero_`` returns the tensor as torch's does, and the
    plain tensor behind it is the same storage; anything else passes through ``plain_tensor``."""
    stock = [torch.full((8,), 5, dtype=torch.int32) for _ in range(3)]
    a, b = _flush.flushing_tensor(stock[0], "harness a"), _flush.flushing_tensor(stock[1], "harness b")
    again = _flush.flushing_tensor(stock[2], "harness a")
    assert type(a) is type(again) and type(a) is not type(b) and type(a).__module__ == "cleanflush._flush"
    _flush.prepare(torch.device("cpu"))
    with OpRecorder() as rec:
        assert a.zero_() is a
        b.zero_()
        again.zero_()
    assert rec.names == ["zero_", "sum"] * 3 and all(int(t.sum()) == 0 for t in stock)
    assert cleanflush.flush_counts() == {("harness a", "write-read"): 2, ("harness b", "write-read"): 1}
    plain = _flush.plain_tensor(a)
    assert type(plain) is torch.Tensor and plain.data_ptr() == stock[0].data_ptr()
    other = torch.zeros(2)
    assert _flush.plain_tensor(other) is other and _flush.plain_tensor("not a tensor") == "not a tensor"
    moved = _flush.flushing_tensor(a, "harness b")  # handed on to another target: counted there
    moved.zero_()
    assert type(moved) is type(b) and cleanflush.flush_counts()[("harness b", "write-read")] == 2
