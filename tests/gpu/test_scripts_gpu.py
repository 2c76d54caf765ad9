"""On a CUDA GPU: the one-kernel write-read (TileLang's CUPTI timer), the scripts' flushes
(GPU MODE, TileGym, ThunderKittens) and the CuTe DSL's memset read on the device.
Run: pytest -m gpu -s"""

import importlib
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import cleanflush  # noqa: E402
from cleanflush import _flush, _hold  # noqa: E402
from cleanflush._read import READ_KERNEL  # noqa: E402
from cleanflush.patches import cute_dsl  # noqa: E402
from cleanflush.patches._tensor import flushing_tensor  # noqa: E402

from ..conftest import write_stand_ins  # noqa: E402
from ..standins import SCRIPTS  # noqa: E402

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("no CUDA device", allow_module_level=True)


def kernels(call):
    """(name, start us, end us) of every CUDA kernel ``call`` runs, and the device span of
    each ``flush`` range (what TileLang's CUPTI timer subtracts)."""
    call()  # compiled and warm
    torch.cuda.synchronize()
    # CPU activity too: a range's device span is reported only with it, as in TileLang's timer
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        call()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if getattr(e.device_type, "name", "") == "CUDA"]
    ran = [e for e in events if not e.is_user_annotation]
    ranges = [e.self_device_time_total for e in events if e.is_user_annotation and e.key == "flush"]
    return [(e.key, e.time_range.start, e.time_range.end) for e in ran], ranges


ONE_KERNEL = "cleanflush_l2_write_read"


def test_write_read_in_one_kernel_zeroes_reads_and_spans_its_range_exactly():
    cache = torch.full((64 << 20,), 3, dtype=torch.int32, device="cuda")  # 256 MiB, as TileLang's
    flushing = flushing_tensor(cache, "tilelang", one_kernel=True)

    def flush():
        with torch.profiler.record_function("flush"):
            flushing.zero_()

    ran, ranges = kernels(flush)
    assert [name for name, _, _ in ran] == [ONE_KERNEL]
    head = torch.cuda.get_device_properties(cache.device).L2_cache_size // 8 // 4  # cleanflush owns this write
    assert not bool(cache[:head].any()) and bool((cache[head:] == 3).all())
    (_, start, end), (span,) = ran[0], ranges
    assert abs(span - (end - start)) <= 0.5, (span, end - start)  # nothing but the kernel in the range
    assert cleanflush.flush_counts() == {("tilelang", "write-read"): 2}
    with cleanflush.policy("read"):
        ran, _ = kernels(flush)
    assert [name for name, _, _ in ran] == [READ_KERNEL]


def test_the_one_kernel_leaves_no_gap_that_two_kernels_leave():
    """The error TileLang's timer makes: kernels' time minus the range's span, per flush."""
    cache = torch.empty((64 << 20,), dtype=torch.int32, device="cuda")
    results = {}
    for one_kernel in (True, False):
        flushing = flushing_tensor(cache, f"tilelang {one_kernel}", one_kernel=one_kernel)

        def flush(flushing=flushing):
            with torch.profiler.record_function("flush"):
                flushing.zero_()

        ran, (span,) = kernels(flush)
        results[one_kernel] = sum(end - start for _, start, end in ran) - span
    assert abs(results[True]) <= 0.5 and results[False] < -0.5, results


@pytest.fixture
def scripts(tmp_path, monkeypatch):
    files = {name: body.replace('DEVICE = "cpu"', 'DEVICE = "cuda"') for name, body in SCRIPTS.items()}
    write_stand_ins(tmp_path, files)
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = {name: importlib.import_module(name) for name in ("utils", "bench_utils", "common")}
    cleanflush.uninstall()
    cleanflush.install()
    yield modules
    for name in modules:
        sys.modules.pop(name, None)


def names_of(call):
    return [name for name, _, _ in kernels(call)[0]]


def test_the_scripts_read_on_the_device_after_their_write(scripts):
    names = names_of(scripts["utils"].clear_l2_cache)
    assert names[-1] == READ_KERNEL and len(names) >= 2  # randn's kernel(s), then the read
    x = torch.ones(8, device="cuda")
    names = names_of(lambda: scripts["bench_utils"].profile_with_l2flush(lambda: torch.neg(x), warmup=0, rep=2))
    assert names.count(READ_KERNEL) == 2
    names = names_of(lambda: scripts["common"].benchmark_l2_clear(lambda: torch.neg(x), 0, 2, single=True))
    assert names.count(READ_KERNEL) == 2
    counts = cleanflush.flush_counts()
    assert {k: v for k, v in counts.items() if k[0] in ("gpu-mode", "tilegym", "thunderkittens")} == {
        ("gpu-mode", "write-read"): 2,
        ("tilegym", "write-read"): 4,
        ("thunderkittens", "write-read"): 4,
    }


def test_the_cute_dsl_memset_reads_on_its_stream():
    driver = pytest.importorskip("cuda.bindings.driver")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    torch.cuda.init()
    err, ptr = driver.cuMemAlloc(l2)
    assert err == driver.CUresult.CUDA_SUCCESS
    proxy = cute_dsl.FlushingDriver(driver)
    stream = torch.cuda.Stream()
    _flush.prepare(torch.device("cuda", torch.cuda.current_device()))  # its checking launches: not in the trace
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            (err,) = proxy.cuMemsetD32Async(ptr, 0, l2 // 4, driver.CUstream(stream.cuda_stream))
            torch.cuda.synchronize()
        assert err == driver.CUresult.CUDA_SUCCESS
    finally:
        driver.cuMemFree(ptr)
    on_device = [e for e in prof.events() if getattr(e.device_type, "name", "") == "CUDA"]
    reads = [e for e in on_device if e.key == READ_KERNEL]
    assert len(reads) == 1
    memsets = [e for e in on_device if "memset" in e.key.lower()]
    assert memsets, textwrap.shorten(str([e.key for e in on_device]), 300)
    assert cleanflush.flush_counts() == {("cute-dsl", "write-read"): 1}


def test_a_read_holds_the_stream_until_the_next_call_and_only_where_the_gpu_caught_up():
    cache = torch.empty((64 << 20,), dtype=torch.int32, device="cuda")  # 256 MiB, as Triton's
    flushing = flushing_tensor(cache, "hold")
    # 20 ms of queued GPU work that touches no memory: the host makes its calls long before
    # the GPU reaches them, however slow it is under the profiler
    ahead_cycles = 20 * torch.cuda.get_device_properties(0).clock_rate  # kHz x ms

    def reads_us(call):
        ran, _ = kernels(call)  # kernels() synchronizes first: the stream is empty
        return [end - start for name, start, end in ran if name == READ_KERNEL]

    def behind_work():
        torch.cuda._sleep(ahead_cycles)
        flushing.zero_()

    def behind_work_twice():
        behind_work()
        flushing.zero_()

    hold_us = _hold.HOLD_NS / 1e3
    for policy in ("write-read", "read"):
        with cleanflush.policy(policy):
            # on an empty stream, with no call after it before the sync: the whole hold
            assert reads_us(flushing.zero_)[0] >= hold_us
            # behind work, the GPU having run the last read: caught up, so it holds too
            assert reads_us(behind_work)[0] >= hold_us
            # a second call before the GPU reaches the first read: the first is let go by it,
            # and the second does not hold (the GPU had not caught up when it was called)
            assert max(reads_us(behind_work_twice)) < hold_us / 1.5  # 2 x L2 or 256 MiB: 30-60 us
    assert not [row for row in cleanflush.status() if "hold" in row.target]
