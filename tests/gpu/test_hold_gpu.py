"""On a CUDA GPU: the hold's failure modes.  A flush captured into a CUDA graph and replayed
after ``uninstall()``; flushes from two threads on two streams of one device; a flush on a
second GPU; do_bench's queued loop and its fallback.  Run: pytest -m gpu -s"""

import statistics
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import cleanflush  # noqa: E402
from cleanflush import _flush, _hold, _read  # noqa: E402
from cleanflush._read import READ_KERNEL  # noqa: E402

pytestmark = pytest.mark.gpu
MiB = 1 << 20


@pytest.mark.parametrize("kept", [True, False], ids=["as built", "negative control: not kept"])
def test_a_captured_flush_replayed_after_uninstall_writes_into_nothing_freed(kept):
    device = torch.device("cuda", torch.cuda.current_device())
    cache = torch.empty(64 * MiB // 4, dtype=torch.int32, device=device)  # Triton's 256 MiB
    _flush.prepare(device)  # before capture, as Triton's get_empty_cache_for_benchmark does
    entry = _read.READS.buffers[device]
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        for _ in range(2):  # warm the allocator and the launch path outside the graph
            _flush.flush("graph", write=cache.zero_, cache=cache)
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            _flush.flush("graph", write=cache.zero_, cache=cache)
    assert entry.captured
    entry.captured = kept  # the control lets the buffer go, as before captured buffers were kept
    cleanflush.uninstall()
    assert (entry in _read.READS.kept) is kept
    numel = entry.buffer.numel()
    del entry  # nothing of the test holds the buffer: only cleanflush may keep it
    # what the allocator hands out next takes the freed blocks first: the sink's, the buffer's
    sentinels = [torch.full((n,), 7.0, device=device) for n in (1, 128, numel)]
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    untouched = all(bool((s == 7.0).all()) for s in sentinels)
    cleanflush.install()
    # kept: the replays wrote into none of them; not kept: the replayed read summed a sentinel
    # into another (what a captured flush does to memory freed under it)
    assert untouched is kept


def test_two_threads_flushing_on_two_streams_never_hang_and_hold_within_the_bound():
    device = torch.device("cuda", torch.cuda.current_device())
    _flush.prepare(device)
    errors = []

    def flushes(index):
        try:
            cache = torch.empty(64 * MiB // 4, dtype=torch.int32, device=device)
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                for _ in range(40):
                    stream.synchronize()  # an empty stream: this thread's flush holds
                    _flush.flush(f"thread {index}", write=cache.zero_, cache=cache, write_part=lambda h: h.zero_())
                stream.synchronize()
        except Exception as exc:  # reported by the test's own thread
            errors.append(exc)

    threads = [threading.Thread(target=flushes, args=(i,)) for i in (0, 1)]
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        torch.cuda.synchronize()
    assert not any(thread.is_alive() for thread in threads), "a flush hung"
    assert not errors, errors
    reads = [e.device_time for e in prof.events() if e.name == READ_KERNEL]
    assert len(reads) == 80
    # each read kernel: its 2 x L2 (about 30 us alone, up to twice that beside the other
    # thread's) and a hold of at most HOLD_NS, whichever thread's call let it go
    assert max(reads) < _hold.HOLD_NS / 1e3 + 100, sorted(reads)[-5:]
    counts = cleanflush.flush_counts()
    assert counts[("thread 0", "write-read")] == counts[("thread 1", "write-read")] == 40


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_flush_on_the_second_gpu_is_finished_before_its_buffer_goes():
    second = torch.device("cuda", 1)
    cache = torch.empty(64 * MiB // 4, dtype=torch.int32, device=second)
    for _ in range(20):  # queued on cuda:1 while the current device is cuda:0
        _flush.flush("second gpu", write=cache.zero_, cache=cache)
    assert torch.cuda.current_device() == 0
    cleanflush.uninstall()  # synchronizes cuda:1 too before its buffer goes back
    assert torch.cuda.default_stream(second).query()
    cleanflush.install()


def busy_wait(us):
    until = time.perf_counter() + us * 1e-6
    while time.perf_counter() < until:
        pass


def do_bench(fn):
    import triton.testing

    return triton.testing.do_bench(fn, warmup=5, rep=60)


def inductor_samples(fn):
    """Inductor's benchmarker, its samples' median: its minimum is clean wherever its memory
    warm-up's writes still keep the GPU behind the host, for a few calls (benchmarks/synced.py),
    so only the median tells whether every call was."""
    from torch._inductor.runtime.benchmarking import InductorBenchmarker

    return statistics.median(InductorBenchmarker().benchmark_gpu(fn, return_mode="all"))


@pytest.mark.parametrize("bench", [do_bench, inductor_samples], ids=["do_bench", "inductor"])
@pytest.mark.parametrize("bound", ["queued", "negative control: HOLD_NS"])
def test_in_a_queued_loop_a_call_the_host_takes_long_to_queue_is_timed_by_its_gpu_work(monkeypatch, bound, bench):
    """A timed call whose host time (300 us before its kernel: hooks, many arguments) is far
    over HOLD_NS: in a queued loop (do_bench's, Inductor's benchmarker's) the read holds until
    the host's next flush, so the start event and the kernel follow each other on the GPU."""
    if bound != "queued":
        monkeypatch.setattr(_hold, "QUEUED_HOLD_NS", _hold.HOLD_NS)
    x = torch.zeros(1 << 20, device="cuda")

    def fn():
        busy_wait(300)
        x.add_(1)

    us = bench(fn) * 1e3
    print(f"{bench.__name__} of a 4 MiB add_ with 300 us of host time before it ({bound}): {us:.1f} us")
    # the kernel alone is a few us; with HOLD_NS the GPU idles for the rest of the host's 300 us
    assert us < 50 if bound == "queued" else us > 100


class NeverFallsBack(_hold._QueuedLoop):
    @property
    def bound_ns(self):
        return _hold.QUEUED_HOLD_NS

    @bound_ns.setter
    def bound_ns(self, value):
        pass


@pytest.mark.parametrize("loop", ["as built", "negative control: never falls back"])
def test_in_do_bench_a_call_that_synchronizes_waits_out_the_long_bound_twice(monkeypatch, loop):
    """A timed call that reads its result on the host waits for every hold queued before it:
    the loop pays QUEUED_HOLD_NS twice (one long gap alone is the warm-up), then holds HOLD_NS at most."""
    import triton.testing

    if loop != "as built":
        monkeypatch.setattr(_hold, "_QueuedLoop", NeverFallsBack)
    x = torch.zeros(1 << 20, device="cuda")
    called = []

    def fn():
        x.add_(1)
        torch.cuda.synchronize()
        called.append(time.perf_counter())

    triton.testing.do_bench(fn, warmup=1, rep=40)
    per_call_us = statistics.median(b - a for a, b in zip(called, called[1:])) * 1e6
    print(f"do_bench of a call that synchronizes ({loop}): {per_call_us:.0f} us a call, {len(called)} calls")
    # as built: the flush and a hold of at most HOLD_NS (about 200 us); never falling back, 1 ms
    assert per_call_us < 560 if loop == "as built" else per_call_us > 560
