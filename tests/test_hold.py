"""The hold (``_hold``): whether a flush's read holds the stream, and for how long (in do_bench's
queued loop too); the handshake in host memory; and how the flush asks before its write.  The
hold on a real GPU: tests/gpu/test_scripts_gpu.py and tests/gpu/test_hold_gpu.py."""

import threading

import pytest
import torch

import cleanflush
from cleanflush import _flush, _hold, _read

MiB = 1 << 20


class Stream:
    def __init__(self, empty):
        self.empty = empty

    def query(self):
        if isinstance(self.empty, Exception):
            raise self.empty
        return self.empty


@pytest.fixture
def held(monkeypatch):
    """A CPU read buffer whose sweeps (plain and held) record their calls, in order, with each
    question ``hold_ns`` was asked; ``held(ns)`` sets its answer."""
    calls = []
    entry = _read.prepare(torch.device("cpu"))
    monkeypatch.setattr(entry, "sweep", lambda data, out, call: calls.append("sweep"))
    monkeypatch.setattr(entry, "held", lambda data, out, call, ns: calls.append(("held", ns)))
    answer = {}

    def hold_ns(device, handshake, capturing):
        calls.append("asked")
        return answer["ns"]

    monkeypatch.setattr(_hold, "hold_ns", hold_ns)

    def set_answer(ns):
        answer["ns"] = ns
        calls.clear()
        return calls

    return set_answer


@pytest.mark.parametrize(
    "policy, ns, expected",
    [
        ("write-read", 50_000, ["asked", "zero_", ("held", 50_000)]),
        ("read", 50_000, ["asked", ("held", 50_000)]),
        ("write-read", 0, ["asked", "zero_", "sweep"]),
        ("read", 0, ["asked", "sweep"]),
        ("write", 50_000, ["zero_"]),  # the stock flush: nothing added
    ],
)
def test_a_flush_asks_before_its_write_and_holds_as_long_as_it_is_told(held, policy, ns, expected):
    calls = held(ns)
    cache = torch.full((16,), 7, dtype=torch.int32)
    with cleanflush.policy(policy):
        _flush.flush("test", write=lambda: (calls.append("zero_"), cache.zero_()), cache=cache)
    assert calls == expected  # asked before the write, which fills the stream


@pytest.mark.parametrize("ns", [40_000, 0])
def test_the_read_after_an_inline_write_holds_too(held, ns):
    calls = held(ns)
    _flush.flush("inline", device=torch.device("cpu"), written=64)
    assert calls == ["asked", ("held", ns) if ns else "sweep"]


# The handshake: the host numbers its read calls, the kernel marks the one it started


def test_calls_are_numbered_in_host_memory_and_caught_up_means_the_last_one_started():
    signal = torch.zeros(2, dtype=torch.int64)  # plain CPU memory, as the kernel sees pinned memory
    handshake = _hold.Handshake(signal)
    assert handshake.caught_up()  # nothing called yet
    assert [handshake.call(), handshake.call()] == [1, 2] and signal.tolist() == [2, 0]
    assert not handshake.caught_up()  # the GPU has started neither read
    signal[1] = 1
    assert not handshake.caught_up()  # the first, not the last
    signal[1] = 2  # as the kernel marks it
    assert handshake.caught_up()


def test_each_read_takes_the_next_call_number(monkeypatch):
    seen = []
    entry = _read.prepare(torch.device("cpu"))
    handshake = _hold.Handshake(torch.zeros(2, dtype=torch.int64))
    monkeypatch.setattr(entry, "sweep", lambda data, out, call: seen.append(("sweep", call)))
    monkeypatch.setattr(entry, "held", lambda data, out, call, ns: seen.append(("held", call, ns)))
    monkeypatch.setattr(entry, "handshake", handshake)
    data = entry.buffer[:16]
    entry.read(data, 0, False)
    entry.read(data, 30_000, False)
    entry.read(data, 0, False)  # lets the held read go: the host's count passes its call
    assert seen == [("sweep", 1), ("held", 2, 30_000), ("sweep", 3)] and handshake.signal.tolist() == [3, 0]


def test_a_hold_lasts_twice_the_hosts_time_between_two_flushes_and_never_over_its_bound():
    now = [0]
    handshake = _hold.Handshake(torch.zeros(2, dtype=torch.int64), clock=lambda: now[0])
    assert handshake.pace_ns() == _hold.HOLD_NS  # nothing known yet
    handshake.arrived()
    handshake.call()
    now[0] += 9_000  # the flush's own host time is not the loop's
    handshake.left()
    now[0] += 30_000  # the start event, the timed call, the end event, the loop
    handshake.arrived()
    assert handshake.pace_ns() == 2 * 30_000
    handshake.call()
    handshake.left()
    now[0] += 400_000  # a loop that synchronizes after each call: the whole bound
    handshake.arrived()
    assert handshake.pace_ns() == _hold.HOLD_NS
    handshake.call()
    handshake.left()  # a read with no flush come to since (the read alone): not known, the bound
    assert handshake.pace_ns() == _hold.HOLD_NS


# Whether to hold: the GPU has caught up (the pinned mark, or an empty stream), no capture


@pytest.fixture
def cuda_handshake(monkeypatch):
    """cuda:1 with a handshake in CPU memory, its stream busy: returns (device, handshake)."""
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: Stream(False))
    return torch.device("cuda", 1), _hold.Handshake(torch.zeros(2, dtype=torch.int64))


def test_caught_up_when_the_gpu_started_the_last_read_though_its_stream_is_busy(cuda_handshake, monkeypatch):
    # do_bench on a host slower than the GPU: the last timed call may still run
    cuda, handshake = cuda_handshake
    handshake.signal.copy_(torch.tensor([5, 5]))
    assert _hold.hold_ns(cuda, handshake, capturing=False) == _hold.HOLD_NS
    handshake.signal[1] = 4  # the last read still queued: a backlog that covers the host
    assert _hold.hold_ns(cuda, handshake, capturing=False) == 0
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: Stream(True))
    assert _hold.hold_ns(cuda, handshake, capturing=False) == _hold.HOLD_NS  # an empty stream is caught up
    assert _hold.hold_ns(cuda, None, capturing=False) == 0  # no handshake: no read kernel to hold


def test_no_hold_during_capture_or_where_the_stream_cannot_be_asked(cuda_handshake, monkeypatch):
    cuda, handshake = cuda_handshake
    handshake.signal.copy_(torch.tensor([5, 5]))
    assert _hold.hold_ns(cuda, handshake, capturing=True) == 0  # a captured call number is stale at replay
    handshake.signal[1] = 4
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: Stream(RuntimeError("device lost")))
    assert _hold.hold_ns(cuda, handshake, capturing=False) == 0


def test_flushes_in_a_loop_hold_as_long_as_twice_the_hosts_time_between_them(monkeypatch):
    now = [0]
    holds = []
    entry = _read.prepare(torch.device("cpu"))
    monkeypatch.setattr(entry, "handshake", _hold.Handshake(torch.zeros(2, dtype=torch.int64), clock=lambda: now[0]))
    monkeypatch.setattr(entry, "held", lambda data, out, call, ns: holds.append(ns))
    monkeypatch.setattr(entry, "sweep", lambda data, out, call: holds.append(0))
    # the stand-in kernel never marks its call: only an empty stream says the GPU caught up
    monkeypatch.setattr(_hold, "stream_empty", lambda device: True)
    with cleanflush.policy("read"):
        for gap in (500_000, 20_000, 45_000, 90_000):  # the host's time from one flush's read to the next flush
            now[0] += gap
            _flush.flush("loop", write=lambda: None, device=torch.device("cpu"), written=0)
    assert holds == [_hold.HOLD_NS, 40_000, 90_000, _hold.HOLD_NS]


def test_capturing_asks_this_threads_stream_and_never_raises(monkeypatch):
    assert _hold.capturing(torch.device("cpu")) is False  # nothing to ask on CPU
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert _hold.capturing(torch.device("cuda", 0)) is True

    def gone():
        raise RuntimeError("device lost")

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", gone)
    assert _hold.capturing(torch.device("cuda", 0)) is True  # where it cannot tell: no hold, no allocation


@pytest.mark.parametrize("empty", [True, False])
def test_stream_empty_asks_the_current_stream_of_the_device(monkeypatch, empty):
    asked = []
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: asked.append(device) or Stream(empty))
    cuda = torch.device("cuda", 1)
    assert _hold.stream_empty(cuda) is empty and asked == [cuda]


# Inside a queued loop (do_bench): a longer bound, until the host is seen waiting for the GPU


def paced(handshake, now, gap):
    """The host queues a flush's read, comes to the next flush ``gap`` ns later: its hold."""
    handshake.call()
    handshake.left()
    now[0] += gap
    handshake.arrived()
    return handshake.pace_ns()


def test_in_a_queued_loop_a_hold_may_last_up_to_the_long_bound():
    now = [0]
    handshake = _hold.Handshake(torch.zeros(2, dtype=torch.int64), clock=lambda: now[0])
    assert paced(handshake, now, 300_000) == _hold.HOLD_NS  # a host slower per call than the bound covers
    with _hold.queued_loop():
        assert _hold.bound_ns() == _hold.QUEUED_HOLD_NS
        assert [paced(handshake, now, gap) for gap in (300_000, 40_000, 700_000)] == [600_000, 80_000, 1_000_000]
    assert _hold.bound_ns() == _hold.HOLD_NS
    assert paced(handshake, now, 300_000) == _hold.HOLD_NS


def test_a_queued_loop_whose_host_comes_back_after_a_whole_bound_holds_as_any_loop_from_then_on():
    now = [0]
    handshake = _hold.Handshake(torch.zeros(2, dtype=torch.int64), clock=lambda: now[0])
    handshake.call()
    handshake.left()  # a read before the loop: the time since says nothing of the loop's calls
    now[0] += 5_000_000
    with _hold.queued_loop():
        handshake.arrived()
        assert handshake.pace_ns() == _hold.QUEUED_HOLD_NS
        # a timed call that synchronizes: the host waits out the whole hold before each flush
        waited = _hold.QUEUED_HOLD_NS + 30_000
        assert [paced(handshake, now, waited) for _ in range(2)] == [_hold.QUEUED_HOLD_NS, _hold.HOLD_NS]
        assert [paced(handshake, now, gap) for gap in (30_000, 300_000)] == [60_000, _hold.HOLD_NS]
    with _hold.queued_loop():  # the next do_bench call starts with the long bound again
        assert paced(handshake, now, 300_000) == 600_000


def test_one_long_gap_in_a_queued_loop_is_its_warm_up_and_keeps_the_long_bound():
    now = [0]
    handshake = _hold.Handshake(torch.zeros(2, dtype=torch.int64), clock=lambda: now[0])
    with _hold.queued_loop():
        # do_bench: its estimate's flushes, the warm-up calls (no flush), its timed loop
        gaps = (300_000, 300_000, 25_000_000, 300_000, 300_000, 25_000_000, 300_000)
        long = _hold.QUEUED_HOLD_NS
        assert [paced(handshake, now, gap) for gap in gaps] == [600_000, 600_000, long, 600_000, 600_000, long, 600_000]


def test_a_queued_loop_is_this_threads_own():
    seen = []
    with _hold.queued_loop():
        thread = threading.Thread(target=lambda: seen.append(_hold.bound_ns()))
        thread.start()
        thread.join()
        seen.append(_hold.bound_ns())
    assert seen == [_hold.HOLD_NS, _hold.QUEUED_HOLD_NS]
