"""The flush's one way in, ``_flush.flush``: what each policy runs around a stock write, on
real CPU tensors (the read is torch's sum there), how much it reads and writes, and its
fallbacks."""

import sys

import pytest
import torch

import cleanflush
from cleanflush import _flush, _policies, _read, _seam
from cleanflush.patches._tensor import flushing_tensor, plain_tensor

from .ops import OpRecorder, overlaps

MiB = 1 << 20


def run_flush(cache):
    _flush.prepare(cache.device)  # the one allocation per device, outside the record
    with OpRecorder() as rec:
        _flush.flush("test", write=cache.zero_, cache=cache)
    return rec


def assert_clean_read(op, cache, written):
    name, args, kwargs = op
    assert name == "sum"
    data = args[0]
    assert data.dtype == torch.float32  # never the int32 cache widened to int64
    assert not overlaps(data, cache)  # a region disjoint from the dirty lines
    assert data.numel() * 4 >= _read.read_bytes(0, written)
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
    _flush.flush("test", write=cache.zero_, cache=cache)
    entry = _read.READS.buffers[cache.device]
    buffer, sink = entry.buffer, entry.sink
    with OpRecorder() as rec:
        _flush.flush("test", write=cache.zero_, cache=cache)
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
    assert _read.read_bytes(l2, written) == expected


@pytest.mark.parametrize("l2, written", [(60 * MiB, 0), (60 * MiB, 7 * MiB), (40 * MiB, 256 * MiB), (200 * MiB, 0)])
def test_where_the_read_holds_it_reads_two_l2_after_any_write(l2, written):
    assert _read.read_bytes(l2, written, held=True) == 2 * l2


@pytest.fixture
def fake_l2(monkeypatch):
    """A device that reports an L2 (CPU reports none, which hides 2 x L2 behind the 256 MiB
    floor): returns the fake size to set; the read buffer is made again for it."""

    def set_l2(nbytes):
        monkeypatch.setattr(_read, "l2_bytes", lambda device: nbytes)
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
    entry = _read.prepare(torch.device("cpu"))
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
    entry = _read.prepare(torch.device("cpu"))
    reads = []
    monkeypatch.setattr(entry, "sweep", lambda data, out, call: reads.append(data.numel() * 4))
    monkeypatch.setattr(entry, "held", lambda data, out, call, ns: reads.append(data.numel() * 4))
    return reads


def owned_flush(cache, policy="write-read"):
    """A flush of ``cache`` as Triton's clear_cache runs it: its stock zero_, and the same
    write on a head of the cache where cleanflush owns the write."""
    with cleanflush.policy(policy), OpRecorder() as rec:
        _flush.flush("test", write=cache.zero_, cache=cache, write_part=lambda head: head.zero_())
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
    with _seam.read_region(lambda cache, region, l2: region[: l2 // 2 // 4]):
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


def test_where_the_read_holds_the_read_policy_reads_two_l2_and_writes_nothing(holding):
    # the hold, not 256 MiB of bytes, keeps the GPU busy while the host queues (docs/policies.md)
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    rec = owned_flush(cache, "read")
    assert rec.names == [] and bool((cache == 7).all()) and holding == [2 * MiB]


def test_without_a_hold_the_read_policy_reads_the_stock_bytes(fake_l2):
    fake_l2(MiB)  # a CPU buffer has no kernel, so no hold
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    rec = owned_flush(cache, "read")
    assert rec.names == ["sum"] and rec.ops[0][1][0].numel() * 4 == 256 * MiB and bool((cache == 7).all())


def test_a_write_the_harness_owns_is_whole_and_the_read_two_l2(holding):
    # Inductor's inline write and every flush without write_part: all of it; where the read
    # holds, 2 x L2 after any write
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    with cleanflush.policy("write-read"):
        _flush.flush("test", write=cache.zero_, cache=cache)
        _flush.flush("inline", device=torch.device("cpu"), written=256 * MiB)
        _flush.flush("inline", device=torch.device("cpu"), written=None)
    assert not cache.any() and holding == [2 * MiB, 2 * MiB, 2 * MiB]


def test_a_read_that_fails_after_the_head_falls_back_to_the_whole_stock_write(holding, monkeypatch):
    def broken(*args):
        raise RuntimeError("no memory")

    monkeypatch.setattr(_read.ReadBuffer, "read", broken)
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    with pytest.warns(RuntimeWarning, match="fall back to the stock write"):
        owned_flush(cache)
    assert not cache.any()  # the head alone would leave L2 unflushed
    assert cleanflush.flush_counts() == {("test", "write"): 1}


@pytest.mark.parametrize("write, args, value", [("zero_", (), 0), ("random_", (5, 6), 5)])
def test_a_handed_out_cache_tensor_writes_its_head(holding, write, args, value):
    cache = torch.full((4 * MiB // 4,), 7, dtype=torch.int32)
    flushing = flushing_tensor(cache, "test", write=write)
    with cleanflush.policy("write-read"):
        getattr(flushing, write)(*args)
    written = MiB // 8 // 4
    assert bool((cache[:written] == value).all()) and bool((cache[written:] == 7).all())
    assert holding == [2 * MiB]


@pytest.mark.parametrize("policy, counted", [("write-read", "write-read"), ("read", "write-read"), ("write", "write")])
def test_a_read_after_an_inline_write_covers_one_l2_or_what_was_written(fake_l2, policy, counted):
    # Inductor's inline write: None means one L2 of it (InductorBenchmarker's buffer)
    fake_l2(100 * MiB)
    device = torch.device("cpu")
    _flush.prepare(device)
    with cleanflush.policy(policy), OpRecorder() as rec:
        _flush.flush("inline", device=device, written=None)
        _flush.flush("inline", device=device, written=16 * MiB)
    sizes = [args[0].numel() * 4 for name, args, _ in rec.ops if name == "sum"]
    assert sizes == ([] if policy == "write" else [200 * MiB, 240 * MiB])
    assert cleanflush.flush_counts() == {("inline", counted): 2}


def test_failed_read_falls_back_to_the_stock_write_and_says_so_once(monkeypatch):
    def broken(*args):
        raise RuntimeError("no memory")

    monkeypatch.setattr(_read.ReadBuffer, "read", broken)
    cache = torch.full((16,), 3, dtype=torch.int32)
    with cleanflush.policy("read"), pytest.warns(RuntimeWarning, match="fall back to the stock write") as caught:
        _flush.flush("test", write=cache.zero_, cache=cache)
        cache.fill_(3)
        _flush.flush("test", write=cache.zero_, cache=cache)
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


def test_a_failed_read_after_an_inline_write_names_its_target(monkeypatch):
    def broken(*args):
        raise RuntimeError("no memory")

    monkeypatch.setattr(_read.ReadBuffer, "read", broken)
    with pytest.warns(RuntimeWarning, match="^cleanflush: the clean read could not run in Inductor.x on cpu"):
        _flush.flush("Inductor.x", device=torch.device("cpu"), written=None)
    assert cleanflush.flush_counts() == {("Inductor.x", "write"): 1}


def test_an_unexpected_cache_object_keeps_the_stock_flush_and_says_so_per_target():
    ran = []
    with pytest.warns(RuntimeWarning) as caught:
        for target in ("a", "a", "b"):
            stock = lambda target=target: ran.append(target) or "stock result"  # noqa: E731
            assert _flush.flush(target, write=stock, cache="not a tensor") == "stock result"
    assert ran == ["a", "a", "b"]
    assert [str(w.message) for w in caught] == [
        f"cleanflush: {t}: it flushed a str, not a tensor; its stock flush runs" for t in ("a", "b")
    ]
    assert cleanflush.flush_counts() == {("a", "write"): 2, ("b", "write"): 1}


def test_each_target_says_its_own_failed_read(monkeypatch):
    def broken(*args):
        raise RuntimeError("no memory")

    monkeypatch.setattr(_read.ReadBuffer, "read", broken)
    cache = torch.zeros(16, dtype=torch.int32)
    with cleanflush.policy("write-read"), pytest.warns(RuntimeWarning) as caught:
        for target in ("one", "two", "one"):
            _flush.flush(target, write=cache.zero_, cache=cache)
    assert [str(w.message) for w in caught] == [
        f"cleanflush: the clean read could not run in {t} on cpu (no memory); these flushes fall back to the "
        "stock write"
        for t in ("one", "two")
    ]


def test_a_flushing_tensor_flushes_under_its_own_target_and_is_the_same_storage():
    """One class per target (made once), ``zero_`` returns the tensor as torch's does, and the
    plain tensor behind it is the same storage; anything else passes through ``plain_tensor``."""
    stock = [torch.full((8,), 5, dtype=torch.int32) for _ in range(3)]
    a, b = flushing_tensor(stock[0], "harness a"), flushing_tensor(stock[1], "harness b")
    again = flushing_tensor(stock[2], "harness a")
    assert type(a) is type(again) and type(a) is not type(b) and type(a).__module__ == "cleanflush.patches._tensor"
    _flush.prepare(torch.device("cpu"))
    with OpRecorder() as rec:
        assert a.zero_() is a
        b.zero_()
        again.zero_()
    assert rec.names == ["zero_", "sum"] * 3 and all(int(t.sum()) == 0 for t in stock)
    assert cleanflush.flush_counts() == {("harness a", "write-read"): 2, ("harness b", "write-read"): 1}
    plain = plain_tensor(a)
    assert type(plain) is torch.Tensor and plain.data_ptr() == stock[0].data_ptr()
    other = torch.zeros(2)
    assert plain_tensor(other) is other and plain_tensor("not a tensor") == "not a tensor"
    moved = flushing_tensor(a, "harness b")  # handed on to another target: counted there
    moved.zero_()
    assert type(moved) is type(b) and cleanflush.flush_counts()[("harness b", "write-read")] == 2


# L2 sizes as the devices report them (bytes): T4 4 MiB, A10 6 MiB, A100 40 MiB, L4 48 MiB,
# H100 50 MiB, H200 60 MiB, RTX 4090 72 MiB, L40S 96 MiB, B200 126 MiB
L2_OF_COMMON_PARTS = [4, 6, 40, 48, 50, 60, 72, 96, 126]


@pytest.mark.parametrize("l2_mib", L2_OF_COMMON_PARTS)
@pytest.mark.parametrize("policy", ["read", "write-read"])
def test_the_read_size_follows_the_devices_l2(monkeypatch, fake_l2, l2_mib, policy):
    # where the read holds: 2 x L2 under either policy, never the 256 MiB of the stock write
    l2 = fake_l2(l2_mib * MiB)
    entry = _read.prepare(torch.device("cpu"))
    reads = []
    monkeypatch.setattr(entry, "held", lambda data, out, call, ns: reads.append(data.numel() * 4))
    monkeypatch.setattr(entry, "sweep", lambda data, out, call: reads.append(data.numel() * 4))
    cache = torch.full((32 * MiB // 4,), 7, dtype=torch.int32)
    owned_flush(cache, policy)
    assert reads == [2 * l2]
    assert entry.buffer.numel() * 4 == max(2 * l2, 256 * MiB)  # also the read without a hold fits
    written = (cache != 7).sum().item() * 4
    assert written == (l2 // 8 if policy == "write-read" else 0)


# A policy record that neither writes nor reads (none ships: a record added to _policies must
# still be run by its fields, never by its name)

NEITHER = _policies.Policy("neither", writes=False, reads=False, shrinks_owned_write=False, summary="nothing")


def test_a_policy_that_neither_writes_nor_reads_runs_no_write(monkeypatch):
    monkeypatch.setattr(_policies, "get", lambda name: NEITHER)
    cache = torch.full((16,), 7, dtype=torch.int32)
    with OpRecorder() as rec:
        assert _flush.flush("test", write=cache.zero_, cache=cache, write_part=lambda head: head.zero_()) is None
    assert rec.names == [] and bool((cache == 7).all())
    assert cleanflush.flush_counts() == {("test", "neither"): 1}


def test_a_write_inline_in_the_harness_counts_as_the_write_it_was_under_a_policy_that_does_not_write(monkeypatch):
    monkeypatch.setattr(_policies, "get", lambda name: NEITHER)
    with OpRecorder() as rec:
        _flush.flush("inline", device=torch.device("cpu"), written=None)  # the harness has written
    assert rec.names == []
    assert cleanflush.flush_counts() == {("inline", "write"): 1}
