"""The Inductor patch, against the installed torch's real benchmarker classes on CPU."""

import inspect
import os
import subprocess
import sys

import pytest
import torch
import wrapt

benchmarking = pytest.importorskip("torch._inductor.runtime.benchmarking")
from torch._inductor import utils as inductor_utils  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import cleanflush  # noqa: E402
from cleanflush import _flush  # noqa: E402
from cleanflush.patches import inductor as inductor_patch  # noqa: E402

from .conftest import run_python  # noqa: E402
from .ops import OpRecorder, overlaps  # noqa: E402

InductorBenchmarker = benchmarking.InductorBenchmarker
record_function = torch.autograd.profiler.record_function


HAS_PROFILER_BENCH = hasattr(benchmarking, "TorchProfilerBenchmarker")
HAS_UTILS_REGION = hasattr(inductor_utils, "_DO_BENCH_PROFILE_EVENT_NAME")
HAS_DEVICE_TYPE = "device_type" in inspect.signature(InductorBenchmarker.benchmark_gpu).parameters
needs_cpu_device_type = pytest.mark.skipif(
    not HAS_DEVICE_TYPE, reason="benchmark_gpu takes no device_type before torch 2.13: GPU tests only")


def targets():
    """What this torch offers to patch, found by feature as the patch does."""
    found = {(InductorBenchmarker, "benchmark_gpu"), (InductorBenchmarker, "get_event_pairs")}
    if HAS_PROFILER_BENCH:
        found.add((benchmarking.TorchProfilerBenchmarker, "benchmark_gpu"))
    if HAS_UTILS_REGION:
        found.add((inductor_utils, "_do_bench_using_profiling"))
    if HAS_PROFILER_BENCH or HAS_UTILS_REGION:
        found.add((record_function, "__enter__"))
    return found


def bench_on_cpu(policy="write-read", iters=3):
    x = torch.ones(8)
    _flush.prepare(torch.device("cpu"))
    with cleanflush.policy(policy), OpRecorder() as rec:
        InductorBenchmarker().benchmark_gpu(
            lambda: torch.neg(x), device_type="cpu", benchmark_iters=iters, memory_warmup_iters=2
        )
    return rec


def test_every_target_is_wrapped():
    for owner, name in targets():
        assert isinstance(vars(owner)[name], wrapt.FunctionWrapper), (owner, name)


@needs_cpu_device_type
def test_read_sits_between_the_inline_write_and_each_timed_call():
    rec = bench_on_cpu()
    names = rec.names
    # warm-up call, buffer allocation and first zero_, then 5 estimation + 3 timed iterations
    timed = [i for i, n in enumerate(names) if n == "neg"][1:]
    assert len(timed) == 5 + 3
    buffer = next(args[0] for name, args, _ in rec.ops if name == "zero_")
    for i in timed:
        assert names[i - 2:i] == ["zero_", "sum"], names
        data = rec.ops[i - 1][1][0]
        assert data.dtype == torch.float32 and not overlaps(data, buffer)
    assert names.count("sum") == 8  # nothing added to the memory warm-up or elsewhere


@needs_cpu_device_type
def test_write_policy_is_stock_and_read_runs_as_write_read():
    assert "sum" not in bench_on_cpu("write").names
    before = cleanflush.flush_counts().get(("InductorBenchmarker.benchmark_gpu", "write-read"), 0)
    rec = bench_on_cpu("read")
    assert rec.names.count("sum") == 8
    assert cleanflush.flush_counts()[("InductorBenchmarker.benchmark_gpu", "write-read")] == before + 8


@needs_cpu_device_type
def test_upstream_decorators_and_counters_still_run():
    key = "benchmarking.InductorBenchmarker.benchmark_gpu"
    before = counters["inductor"][key]
    bench_on_cpu()
    assert counters["inductor"][key] == before + 1


@needs_cpu_device_type
def test_event_pairs_outside_a_benchmark_are_plain():
    pairs = InductorBenchmarker().get_event_pairs(2, device_type="cpu")
    assert not any(isinstance(start, wrapt.ObjectProxy) for start, _ in pairs)


@pytest.mark.skipif(not HAS_PROFILER_BENCH, reason="no profiler-region benchmarker in this torch")
def test_profiled_region_gets_the_read_before_it_opens():
    _flush.prepare(torch.device("cpu"))
    token = inductor_patch._active.set(("test-region", 0, "cpu"))
    try:
        with OpRecorder() as rec:
            with record_function(benchmarking._CALLABLE_PROFILE_EVENT_NAME):
                torch.neg(torch.ones(2))
            with record_function("some user region"):
                torch.neg(torch.ones(2))
    finally:
        inductor_patch._active.reset(token)
    assert rec.names == ["sum", "neg", "neg"]


def test_uninstall_restores_exact_objects():
    originals = {(o, n): vars(o)[n].__wrapped__ for o, n in targets()}
    cleanflush.uninstall()
    for (owner, name), original in originals.items():
        assert vars(owner)[name] is original, (owner, name)
    if HAS_DEVICE_TYPE:
        assert "sum" not in bench_on_cpu().names
    cleanflush.install()
    for (owner, name), original in originals.items():
        assert vars(owner)[name].__wrapped__ is original


def test_status_lists_each_inductor_target():
    rows = {row.target: row for row in cleanflush.status() if row.package == "torch"}
    assert rows["InductorBenchmarker.benchmark_gpu"].patched
    assert rows["TritonBenchmarker.benchmark_gpu"].patched
    utils_row = rows["torch._inductor.utils._do_bench_using_profiling"]
    assert utils_row.patched == HAS_UTILS_REGION
    if not HAS_UTILS_REGION:
        assert "unsupported" in utils_row.detail
    if HAS_PROFILER_BENCH:
        assert rows["TorchProfilerBenchmarker.benchmark_gpu"].patched
    assert "read runs as write-read" in rows["InductorBenchmarker.benchmark_gpu"].detail


def test_unknown_shape_keeps_stock_and_says_why():
    class FakeModule:  # stands in for a future torch whose benchmarker lost get_event_pairs
        class InductorBenchmarker:
            def benchmark_gpu(self):
                return "stock"

    with pytest.warns(RuntimeWarning, match="stock flush is kept"):
        inductor_patch._apply_benchmarking(FakeModule)
    assert "get_event_pairs" not in vars(FakeModule.InductorBenchmarker)
    assert not isinstance(vars(FakeModule.InductorBenchmarker)["benchmark_gpu"], wrapt.FunctionWrapper)
    row = cleanflush._state.STATE.targets["InductorBenchmarker.benchmark_gpu"]
    assert not row.patched and "unsupported" in row.detail
    inductor_patch._apply_benchmarking(benchmarking)  # back to the real module's row


PROBE = """
import torch._inductor.runtime.benchmarking as b, wrapt
print(type(vars(b.InductorBenchmarker)["benchmark_gpu"]).__name__)
import cleanflush
print(cleanflush.current_policy() if cleanflush.is_installed() else "off")
"""


def test_torch_imported_before_cleanflush():
    child = run_python("import torch._inductor.runtime.benchmarking as b\n"
                       "import cleanflush\n"
                       "print(type(vars(b.InductorBenchmarker)['benchmark_gpu']).__name__)")
    assert child.stdout.split() == ["FunctionWrapper"], child.stderr


def test_cleanflush_imported_before_torch():
    child = run_python("import cleanflush\n" + PROBE)
    assert child.stdout.split() == ["FunctionWrapper", "write-read"], child.stderr


def test_autotune_subprocess_environment_carries_the_policy():
    # Inductor starts its autotuning workers with utils.python_subprocess_env() (2.9+),
    # or as spawn children inheriting os.environ: either way the parent's environment.
    make_env = getattr(inductor_utils, "python_subprocess_env", lambda: dict(os.environ))
    with cleanflush.policy("read"):
        env = make_env()
    child = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert child.stdout.split() == ["FunctionWrapper", "read"], child.stderr
