"""Helion's autotuner flushes through Triton's driver (read in the helion 1.5.1 wheel,
helion/autotuner/benchmarking.py: ``_make_l2_cache_clearer`` and ``do_bench`` take the
cache from ``driver.active.get_empty_cache_for_benchmark()`` and call
``driver.active.clear_cache(cache)``), so the Triton patch covers it.  The real Helion
function runs here on CPU; stand-ins only for the GPU: ``torch.cuda.is_available``, the
active driver (the installed triton's real ``CudaDriver`` class, not initialised), and its
``device="cuda"`` allocation (a small CPU tensor).
"""

import pytest
import torch

import cleanflush

from .ops import OpRecorder, SmallCudaWrites

pytestmark = pytest.mark.harness  # the `harness` extra: pytest -m harness
benchmarking = pytest.importorskip("helion.autotuner.benchmarking")
triton = pytest.importorskip("triton")


@pytest.fixture
def cpu_driver(monkeypatch):
    from triton.backends.nvidia.driver import CudaDriver

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(triton.runtime.driver, "_active", object.__new__(CudaDriver))


@pytest.mark.parametrize(
    "policy, per_call", [("write-read", ["zero_", "sum"]), ("read", ["sum"]), ("write", ["zero_"])]
)
def test_helions_l2_clearer_flushes_through_the_patched_driver(cpu_driver, policy, per_call):
    with SmallCudaWrites():
        clear = benchmarking._make_l2_cache_clearer()
    with cleanflush.policy(policy), OpRecorder() as rec:
        for _ in range(3):
            clear()
    assert [name for name in rec.names if name in ("zero_", "sum")] == per_call * 3
    assert cleanflush.flush_counts() == {("triton", policy): 3}
    cleanflush.uninstall()  # the stock driver from here on: its own zero_ only
    with OpRecorder() as rec:
        clear()
    assert [name for name in rec.names if name in ("zero_", "sum")] == ["zero_"]
