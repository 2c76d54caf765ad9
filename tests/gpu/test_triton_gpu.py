"""On a CUDA GPU: does the patched do_bench report the clean time?  Run: pytest -m gpu -s"""

import shutil

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
import triton.testing  # noqa: E402

import cleanflush  # noqa: E402
from cleanflush import _measure  # noqa: E402

pytestmark = pytest.mark.gpu

N = K = 4096


@pytest.fixture(scope="module")
def gemm():
    fn, _, _ = _measure.one_row_gemm(N, K)
    _measure.warm_up(fn, 1.5)
    return fn


def interleaved(gemm, rounds=7):
    """Per method, the median over interleaved rounds of each round's central mean (us)."""
    samples = {"stock": [], "write-read": [], "read": [], "reference": []}
    for _ in range(rounds):
        with cleanflush.policy("write"):
            samples["stock"].append(_measure.central_mean(triton.testing.do_bench(gemm, return_mode="all")))
        samples["write-read"].append(_measure.central_mean(triton.testing.do_bench(gemm, return_mode="all")))
        with cleanflush.policy("read"):
            samples["read"].append(_measure.central_mean(triton.testing.do_bench(gemm, return_mode="all")))
        samples["reference"].append(_measure.central_mean(_measure.read_flush_event_loop(gemm, 1000)))
    for name, values in samples.items():
        print(f"{name:10s} rounds (us): " + " ".join(f"{v * 1e3:.2f}" for v in values))
    result = {name: _measure.median(values) * 1e3 for name, values in samples.items()}
    print("\n" + "  ".join(f"{k}={v:.2f}us" for k, v in result.items()), torch.cuda.get_device_name())
    return result


def test_do_bench_clean_under_each_policy(gemm):
    us = interleaved(gemm)
    for policy in ("write-read", "read"):
        assert us[policy] <= 0.90 * us["stock"], us
        assert abs(us[policy] - us["reference"]) <= 0.03 * us["reference"], us


def test_flush_is_capture_safe(gemm):
    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()  # allocates the read buffer too
    torch.cuda.synchronize()
    before = cleanflush.flush_counts().get(("triton", "write-read"), 0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(3):
            driver.clear_cache(cache)
            gemm()
    graph.replay()
    torch.cuda.synchronize()
    assert cleanflush.flush_counts()[("triton", "write-read")] == before + 3


@pytest.mark.skipif(not hasattr(triton.testing, "do_bench_cudagraph_proton"), reason="triton < 3.8")
def test_do_bench_cudagraph_proton_runs_patched(gemm):
    before = cleanflush.flush_counts().get(("triton", "write-read"), 0)
    triton.testing.do_bench_cudagraph_proton(gemm)
    assert cleanflush.flush_counts()[("triton", "write-read")] > before


@pytest.mark.skipif(shutil.which("ncu") is None, reason="Nsight Compute (ncu) is not on PATH")
def test_timed_gemm_writes_almost_nothing_under_ncu():
    calls = 3
    kernels = _measure.ncu_write_bytes(_measure.ncu_script(N, K, "bfloat16", 0, calls))
    print("\n".join(f"{b / 1e6:8.3f} MB  {name[:70]}" for name, b in kernels))
    stock, patched = _measure.split_phases(kernels, calls)
    print(f"per timed GEMM: stock writes {stock / 1e6:.2f} MB, patched {patched / 1e6:.3f} MB")
    assert stock > 5e6  # the dirty write-back the stock flush leaves is visible
    assert patched <= 0.1e6


@pytest.mark.parametrize("policy, kernels", [("write-read", 2), ("read", 1), ("write", 1)])
def test_flush_launches_one_kernel_per_step(policy, kernels):
    # A split reduction (partials, then a final sum) would leave a gap that per-kernel
    # timers such as Proton can pick up; the read must be a single kernel.  torch's
    # reduction clears its few-byte semaphore buffer with a memset first: not a kernel of
    # ours to time, and it runs before the read, so it is left out of the count.
    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    torch.cuda.synchronize()
    with cleanflush.policy(policy), torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        driver.clear_cache(cache)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events()
             if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("Memset")]
    print(policy, names)
    assert len(names) == kernels, names
