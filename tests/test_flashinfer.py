"""FlashInfer's timers, the real ones (flashinfer-python 0.7.4 from the package index, whose
``flashinfer/testing/utils.py`` matches flashinfer-ai/flashinfer fb28d72 in the parts that
flush), on CPU tensors.

Stand-ins only for what needs a GPU: ``torch.cuda.Event`` / ``torch.cuda.synchronize`` for
the event timer, the device and size of the flush buffer (its deprecated arguments, or its
L2 lookup), and for ``bench_kineto`` the 8 GB ``device="cuda"`` write, made a small CPU
tensor by a torch function mode.
"""

import importlib
import sys
import threading

import pytest
import torch

import cleanflush
from cleanflush import _read
from cleanflush.patches import _local_buffer
from cleanflush.patches import flashinfer as patch

from .conftest import run_python
from .ops import OpRecorder, SmallCudaWrites, overlaps

pytestmark = pytest.mark.harness  # the `harness` extra: pytest -m harness
utils = pytest.importorskip("flashinfer.testing.utils")
testing = importlib.import_module("flashinfer.testing")
STOCK_EMPTY = torch.empty
FLUSHES = 5 + 2 + 3  # its runtime estimate, dry runs, timed runs


class CpuEvent:
    def __init__(self, enable_timing=True):
        pass

    def record(self, stream=None):
        pass

    def elapsed_time(self, other):
        return 1.0


@pytest.fixture
def cpu_timer(monkeypatch):
    monkeypatch.setattr(torch.cuda, "Event", CpuEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(utils, "_infer_device_from_tensors", lambda args, kwargs, default: "cpu")
    monkeypatch.setattr(utils, "get_l2_cache_size", lambda device: 1 << 20)  # 2 MiB buffer


def run(timer, policy, **kwargs):
    """Ops of one timer call; the kernel under test is ``neg``."""
    x = torch.ones(8)
    with cleanflush.policy(policy), OpRecorder() as rec:
        timer(lambda: torch.neg(x), dry_run_iters=2, repeat_iters=3, **kwargs)
    return rec


def flush_ops(rec):
    return [name for name in rec.names if name in ("zero_", "sum", "neg")]


@pytest.mark.parametrize(
    "policy, per_call", [("write-read", ["zero_", "sum"]), ("read", ["sum"]), ("write", ["zero_"])]
)
def test_the_event_timer_flushes_its_own_buffer_under_each_policy(cpu_timer, policy, per_call):
    rec = run(utils.bench_gpu_time_with_cuda_event, policy)
    assert flush_ops(rec) == ["neg"] + (per_call + ["neg"]) * FLUSHES
    written = [args[0] for name, args, _ in rec.ops if name == "zero_"]
    if policy != "write":
        read = next(args[0] for name, args, _ in rec.ops if name == "sum")
        assert read.dtype == torch.float32 and not any(overlaps(read, w) for w in written)
    assert cleanflush.flush_counts() == {("flashinfer", policy): FLUSHES}
    assert torch.empty is STOCK_EMPTY  # put back once the buffer was handed out


def test_the_deprecated_arguments_are_honoured(cpu_timer):
    with pytest.warns(DeprecationWarning):
        rec = run(
            utils.bench_gpu_time_with_cuda_event, "write-read", l2_flush=True, l2_flush_size_mb=1, l2_flush_device="cpu"
        )
    assert flush_ops(rec) == ["neg"] + ["zero_", "sum", "neg"] * FLUSHES
    with pytest.warns(DeprecationWarning):
        rec = run(utils.bench_gpu_time_with_cuda_event, "write-read", l2_flush=False)
    assert flush_ops(rec) == ["neg"] * (FLUSHES + 1)  # asked for no flush: none, and no warning
    assert cleanflush.flush_counts() == {("flashinfer", "write-read"): FLUSHES}


def test_cold_l2_cache_off_runs_stock_without_a_word(cpu_timer, recwarn):
    rec = run(utils.bench_gpu_time_with_cuda_event, "write-read", cold_l2_cache=False)
    assert flush_ops(rec) == ["neg"] * (FLUSHES + 1)
    assert not [w for w in recwarn if "cleanflush" in str(w.message)]


def test_the_cupti_timer_falling_back_to_events_flushes_once_per_call(cpu_timer, recwarn):
    """Without cupti-python (not installed here) the CUPTI timer calls the event timer,
    through its module global: our wrapper, nested in ours."""
    rec = run(utils.bench_gpu_time_with_cupti, "write-read")
    assert flush_ops(rec) == ["neg"] + ["zero_", "sum", "neg"] * FLUSHES
    assert cleanflush.flush_counts() == {("flashinfer", "write-read"): FLUSHES}
    assert not [w for w in recwarn if "cleanflush" in str(w.message)]
    assert all(r.patched for r in cleanflush.status() if r.name == "flashinfer")


def test_a_buffer_of_another_shape_runs_stock_and_says_so(cpu_timer, monkeypatch):
    """Negative control: the buffer is not recognised (a layout change), so nothing is
    handed out; the stock write runs, is said once, and status tells why."""
    monkeypatch.setattr(patch, "_is_flush_buffer", lambda tensor: False)
    with pytest.warns(RuntimeWarning, match="made no flush buffer of the shape cleanflush knows"):
        rec = run(utils.bench_gpu_time_with_cuda_event, "write-read")
    assert flush_ops(rec) == ["neg"] + ["zero_", "neg"] * FLUSHES
    assert cleanflush.flush_counts() == {}
    row = {r.target: r for r in cleanflush.status()}[f"{patch.MODULE}.bench_gpu_time_with_cuda_event"]
    assert (row.state, row.version) == ("unsupported", "0.7.4") and row.detail.startswith("made no flush buffer")
    assert torch.empty is STOCK_EMPTY
    # the other timer's miss is its own, said once more
    with pytest.warns(RuntimeWarning, match="bench_gpu_time_with_cupti made no flush buffer"):
        run(utils.bench_gpu_time_with_cupti, "write-read")


def test_the_timers_and_their_re_exports_are_restored_exactly():
    stock = {name: vars(utils)[name].__wrapped__ for name in patch.TIMERS}
    for name in patch.TIMERS:  # imported before this install: the re-export is wrapped in place
        assert vars(testing)[name].__wrapped__ is stock[name]
    kineto = vars(utils)["bench_kineto"].__wrapped__
    cleanflush.uninstall()
    for name in patch.TIMERS:
        assert vars(utils)[name] is stock[name] and vars(testing)[name] is stock[name]
    assert vars(utils)["bench_kineto"] is kineto


@pytest.mark.parametrize("first", ["cleanflush", "flashinfer"])
def test_re_exports_in_either_import_order(first):
    """``flashinfer.testing`` copies the names from ``utils`` at import: after our hook (a
    copy of our wrapper, put back on uninstall) or before install (wrapped in place)."""
    imports = ["import cleanflush", "import flashinfer.testing as t, flashinfer.testing.utils as u"]
    child = run_python(
        "\n".join(imports if first == "cleanflush" else imports[::-1])
        + """
        names = ("bench_gpu_time_with_cuda_event", "bench_gpu_time_with_cupti")
        stock = [getattr(u, n).__wrapped__ for n in names]
        print(all(getattr(t, n).__wrapped__ is s for n, s in zip(names, stock)))
        cleanflush.uninstall()
        print(all(getattr(t, n) is s and getattr(u, n) is s for n, s in zip(names, stock)))
        cleanflush.install()
        print(all(getattr(t, n).__wrapped__ is s for n, s in zip(names, stock)))
    """.replace("\n        ", "\n")
    )
    assert child.stdout.split() == ["True", "True", "True"], child.stderr


def test_status_rows():
    rows = {r.target: r for r in cleanflush.status() if r.name == "flashinfer"}
    assert sorted(rows) == [
        f"{patch.MODULE}.{name}"
        for name in ("bench_gpu_time_with_cuda_event", "bench_gpu_time_with_cupti", "bench_kineto")
    ]
    assert all(r.patched and r.version == "0.7.4" for r in rows.values())


def test_another_threads_allocations_are_not_handed_out():
    seen = {}
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait()
        seen["other"] = type(torch.empty(8, dtype=torch.int8))
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with _local_buffer.handing_out(lambda t: t.dtype == torch.int8, "flashinfer") as wait:
        inside.set()
        done.wait()
        seen["mine"] = type(torch.empty(8, dtype=torch.int8))
        seen["after"] = type(torch.empty(8, dtype=torch.int8))  # only the first is handed out
    thread.join()
    assert wait.caught and seen == {"other": torch.Tensor, "mine": seen["mine"], "after": torch.Tensor}
    assert seen["mine"].__name__ == "CleanFlushCache" and torch.empty is STOCK_EMPTY


@pytest.fixture
def kineto_on_cpu(monkeypatch):
    monkeypatch.setenv("DG_NSYS_PROFILING", "1")  # its no-profiler path: the same loop, returns 1
    monkeypatch.setattr(patch._kineto, "device", lambda: torch.device("cpu"))


def kineto_ops(policy, **kwargs):
    x = torch.ones(8)
    with cleanflush.policy(policy), OpRecorder() as rec, SmallCudaWrites():
        assert utils.bench_kineto(lambda: torch.neg(x), kwargs.pop("kernel_names", "nvjet"), num_tests=3, **kwargs) == 1
    return [name for name in rec.names if name in ("empty", "zero_", "sum", "neg")]


def test_bench_kineto_reads_between_its_write_and_each_call(kineto_on_cpu):
    # the first call (before profiling, no flush) gets no read
    assert kineto_ops("write-read") == ["neg"] + ["empty", "zero_", "sum", "neg"] * 6
    assert kineto_ops("write") == ["neg"] + ["empty", "zero_", "neg"] * 6
    assert kineto_ops("write-read", flush_l2=False) == ["neg"] * 7
    # its write cannot be skipped: `read` runs as write-read, counted so
    assert kineto_ops("read") == ["neg"] + ["empty", "zero_", "sum", "neg"] * 6
    assert cleanflush.flush_counts() == {("flashinfer", "write-read"): 12}


def test_bench_kineto_runs_stock_when_a_kernel_name_would_pick_the_read(kineto_on_cpu):
    with pytest.warns(RuntimeWarning, match="would match kernel name 'l2_sweep'"):
        ops = kineto_ops("write-read", kernel_names=("nvjet", "l2_sweep"))
    assert ops == ["neg"] + ["empty", "zero_", "neg"] * 6
    assert cleanflush.flush_counts() == {}


def test_the_read_kernel_name_is_not_picked_by_common_kernel_filters():
    for name in ("reduce", "gemm", "nvjet", "FillFunctor", "fp8", "dispatch", "combine", "attention"):
        assert name not in _read.READ_KERNEL


def test_the_deprecated_size_alone_turns_the_flush_on():
    timer = vars(utils)["bench_gpu_time_with_cuda_event"].__wrapped__
    assert patch._flush_asked(timer, (None,), {"l2_flush_size_mb": 1})
    assert patch._flush_asked(timer, (None,), {"l2_flush_device": "cpu"})
    assert not patch._flush_asked(timer, (None,), {"l2_flush": False, "l2_flush_size_mb": 1})
    assert not patch._flush_asked(timer, (None,), {"cold_l2_cache": False})
    cupti = vars(utils)["bench_gpu_time_with_cupti"].__wrapped__
    assert patch._flush_asked(cupti, (None,), {})
    assert not patch._flush_asked(cupti, (None,), {"use_cuda_graph": True})  # it rotates inputs instead


def test_a_call_the_signature_rejects_is_the_stock_codes_error(cpu_timer):
    with pytest.raises(TypeError, match="no_such_argument"):
        utils.bench_gpu_time_with_cuda_event(lambda: None, no_such_argument=1)
    assert cleanflush.flush_counts() == {}


def test_a_version_without_the_timers_says_so(monkeypatch):
    import types

    from cleanflush._state import Site

    module = types.ModuleType(patch.MODULE)
    monkeypatch.setitem(sys.modules, patch.MODULE, module)
    assert patch.apply() == [
        *(
            Site(f"{patch.MODULE}.{name}", "unsupported", f"{patch.MODULE} has no function {name}; stock flush kept")
            for name in patch.TIMERS
        ),
        Site(f"{patch.MODULE}.bench_kineto", "unsupported", f"{patch.MODULE} has no bench_kineto; stock flush kept"),
    ]


def test_a_match_that_raises_hands_out_nothing():
    def match(tensor):
        raise RuntimeError("no")

    with _local_buffer.handing_out(match, "flashinfer") as wait:
        tensor = torch.empty(8, dtype=torch.int8)
    assert type(tensor) is torch.Tensor and not wait.caught and torch.empty is STOCK_EMPTY


def test_a_wait_of_another_harness_is_not_this_ones():
    with _local_buffer.handing_out(lambda t: False, "triton"):
        assert _local_buffer.waiting("triton") and not _local_buffer.waiting("flashinfer")
    assert not _local_buffer.waiting("triton")


def test_nested_waits_swap_once_and_restore_once():
    with _local_buffer.handing_out(lambda t: t.dtype == torch.int8, "outer") as outer:
        with _local_buffer.handing_out(lambda t: t.dtype == torch.int8, "inner") as inner:
            first = torch.empty(8, dtype=torch.int8)  # the innermost wait takes it
        assert torch.empty is not STOCK_EMPTY  # the outer one still waits
        second = torch.empty(8, dtype=torch.int8)
    assert inner.caught and outer.caught and torch.empty is STOCK_EMPTY
    assert (first.target, second.target) == ("inner", "outer")


def test_a_torch_empty_replaced_during_a_wait_is_left_in_place(monkeypatch):
    with _local_buffer.handing_out(lambda t: False, "flashinfer"):
        ours = torch.empty

        def theirs(*args, **kwargs):
            return ours(*args, **kwargs)

        torch.empty = theirs
    try:
        assert torch.empty is theirs  # not put back over someone else's replacement
        assert type(torch.empty(4)) is torch.Tensor
    finally:
        torch.empty = STOCK_EMPTY


def test_the_autoload_patches_flashinfer_bench_style_imports_in_a_child():
    """flashinfer-bench runs each solution in a spawned child and imports the CUPTI timer
    by name from flashinfer.testing: CLEANFLUSH=1 alone must reach it there."""
    child = run_python(
        """
        import torch
        from flashinfer.testing import bench_gpu_time_with_cupti
        import sys
        print(type(bench_gpu_time_with_cupti).__name__, "cleanflush" in sys.modules)
    """,
        env={"CLEANFLUSH": "1"},
    )
    assert child.stdout.split() == ["FunctionWrapper", "True"], child.stderr


def test_only_a_one_dimensional_int8_tensor_is_its_buffer():
    assert patch._is_flush_buffer(torch.empty(8, dtype=torch.int8))
    assert not patch._is_flush_buffer(torch.empty(8, dtype=torch.int32))
    assert not patch._is_flush_buffer(torch.empty(2, 4, dtype=torch.int8))


def test_too_many_arguments_is_the_stock_codes_error(cpu_timer):
    with pytest.raises(TypeError, match="positional arguments but 15 were given"):
        utils.bench_gpu_time_with_cuda_event(*[None] * 15)


def test_a_reinstall_patches_the_timers_and_their_re_exports_again(cpu_timer):
    cleanflush.uninstall()
    cleanflush._state.reset()
    cleanflush.install()
    x = torch.ones(8)
    for timer in (utils.bench_gpu_time_with_cuda_event, testing.bench_gpu_time_with_cuda_event):
        timer(lambda: torch.neg(x), dry_run_iters=2, repeat_iters=3)
    assert cleanflush.flush_counts() == {("flashinfer", "write-read"): 2 * FLUSHES}
    detail = "its local flush buffer zeroes through the flush; checked against flashinfer-python 0.7.4"
    rows = [r for r in cleanflush.status() if r.name == "flashinfer" and r.target.endswith(patch.TIMERS)]
    assert rows == [
        cleanflush.TargetStatus("flashinfer", f"{patch.MODULE}.{name}", "0.7.4", "patched", detail)
        for name in patch.TIMERS
    ]


def test_a_timer_whose_signature_lost_its_flush_argument_runs_stock_and_says_so():
    """Negative control: a later FlashInfer that renamed ``cold_l2_cache``."""
    import wrapt as _wrapt

    def bench_gpu_time_with_cuda_event(
        fn, repeat_iters=None, l2_flush=None, l2_flush_size_mb=None, l2_flush_device=None, cold_cache=True
    ):
        fn()
        return [1.0]

    timer = _wrapt.FunctionWrapper(bench_gpu_time_with_cuda_event, patch._timer)
    with pytest.warns(RuntimeWarning, match="its signature has no 'cold_l2_cache' argument; its stock flush runs"):
        assert timer(lambda: None) == [1.0]
    row = {r.target: r for r in cleanflush.status()}[f"{patch.MODULE}.bench_gpu_time_with_cuda_event"]
    assert (row.state, row.detail) == (
        "unsupported",
        "its signature has no 'cold_l2_cache' argument; its stock flush ran",
    )
