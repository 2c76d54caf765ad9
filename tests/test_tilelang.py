"""TileLang's timers, the real ones (tilelang 0.1.15 from the package index, on CPU tensors).

In 0.1.15 ``tilelang.profiler.bench`` imports its three helpers from ``torch_bench`` under
``_bench_with_*`` names and ``_do_bench_impl`` calls them as module globals; each receives
the flush buffer as ``cache``.  The CUPTI helper runs as it is on CPU (torch's profiler,
its ``tilelang::cache_flush`` range); the event helper needs a stand-in for the CUDA event
class it imports (``Event`` is None without a GPU).
"""

import importlib

import pytest
import torch
import wrapt

import cleanflush
from cleanflush import _read
from cleanflush.patches import tilelang as patch

from .ops import OpRecorder, overlaps

pytestmark = pytest.mark.harness  # the `harness` extra: pytest -m harness
bench = pytest.importorskip("tilelang.profiler.bench")
torch_bench = importlib.import_module("tilelang.profiler.torch_bench")

HELPERS = ["_bench_with_cuda_events", "_bench_with_cupti", "_bench_with_cudagraph"]


class CpuEvent:
    """Stand-in for the CUDA event ``torch_bench`` imports: record and elapsed_time."""

    def __init__(self, enable_timing=True):
        self.t = 0.0

    def record(self):
        self.t = 0.0

    def elapsed_time(self, other):
        return 1.0


def timed(policy, helper, n=3):
    """Ops of one helper call under ``policy``: the kernel under test is ``neg``."""
    cache = torch.empty(1 << 20, dtype=torch.int32)
    x = torch.ones(8)
    with cleanflush.policy(policy), OpRecorder() as rec:
        helper(lambda: torch.neg(x), cache, n)
    return cache, rec


def test_the_helpers_bench_calls_are_patched_and_restored_exactly():
    stock = {name: getattr(torch_bench, name.lstrip("_")) for name in HELPERS}  # where 0.1.15 defines them
    assert all(vars(bench)[name].__wrapped__ is stock[name] for name in HELPERS)
    assert not any(isinstance(vars(torch_bench)[name.lstrip("_")], wrapt.FunctionWrapper) for name in HELPERS)
    rows = [r for r in cleanflush.status() if r.name == "tilelang"]
    assert [(r.target, r.state, r.version) for r in rows] == [
        ("tilelang.profiler.bench._bench_with_*", "patched", "0.1.15")
    ]
    cleanflush.uninstall()
    assert all(vars(bench)[name] is stock[name] for name in HELPERS)
    assert [r.detail for r in cleanflush.status() if r.name == "tilelang"] == ["uninstalled"]


@pytest.mark.parametrize(
    "policy, per_call", [("write-read", ["zero_", "sum"]), ("read", ["sum"]), ("write", ["zero_"])]
)
def test_the_cupti_timer_flushes_inside_the_range_it_subtracts(policy, per_call):
    cache, rec = timed(policy, bench._bench_with_cupti)
    calls = [name for name in rec.names if name in ("zero_", "sum", "neg")]
    assert calls == (per_call + ["neg"]) * 6  # two profiler rounds of three
    if policy != "write":
        read = next(args[0] for name, args, _ in rec.ops if name == "sum")
        assert read.dtype == torch.float32 and not overlaps(read, cache)
    assert cleanflush.flush_counts() == {("tilelang", policy): 6}


def test_the_read_is_inside_the_cache_flush_range(monkeypatch):
    """The CUPTI timer subtracts the device time of ``tilelang::cache_flush`` ranges: the
    read must run inside one, or it is charged to the kernel."""
    seen = []
    stock = torch.profiler.record_function

    class Watch(stock):
        def __enter__(self):
            seen.append(("enter", self.name))
            return super().__enter__()

        def __exit__(self, *exc):
            seen.append(("exit", self.name))
            return super().__exit__(*exc)

    monkeypatch.setattr(torch.profiler, "record_function", Watch)
    monkeypatch.setattr(_read.ReadBuffer, "read", lambda entry, data, *rest: seen.append(("read", data.numel() * 4)))
    timed("write-read", bench._bench_with_cupti, n=1)
    flush = torch_bench._CACHE_FLUSH_ID
    # the read covers what the 4 MiB write left of the stock 256 MiB (no L2 on a CPU)
    assert seen[:3] == [("enter", flush), ("read", (256 - 4) << 20), ("exit", flush)]


def test_the_event_timer_flushes_before_each_start_event(monkeypatch):
    monkeypatch.setattr(torch_bench, "Event", CpuEvent)
    monkeypatch.setattr(torch_bench, "_cuda_synchronize", lambda device_idx: None)
    cache, rec = timed("write-read", lambda fn, c, n: bench._bench_with_cuda_events(fn, c, n, None, "mean", None))
    assert [name for name in rec.names if name in ("zero_", "sum", "neg")] == ["zero_", "sum", "neg"] * 3
    assert cleanflush.flush_counts() == {("tilelang", "write-read"): 3}


def test_a_cache_that_is_not_a_tensor_runs_the_stock_helper():
    calls = []

    def helper(fn, cache, n_repeat):
        calls.append(type(cache))

    wrapper = wrapt.FunctionWrapper(helper, patch._helper)
    with pytest.warns(RuntimeWarning) as said:
        wrapper(lambda: None, "not a tensor", 1)
        wrapper(lambda: None, torch.empty(4, dtype=torch.int32), 1)
        wrapper(lambda: None, "not a tensor", n_repeat=1)  # keywords reach the stock code too; said once
    assert calls[0] is str and calls[1].__name__ == "CleanFlushCache" and calls[2] is str
    assert [str(w.message) for w in said] == [
        "cleanflush: tilelang: helper got no cache tensor (got str); its stock flush runs"
    ]
    with pytest.raises(TypeError, match="got an unexpected keyword argument 'bogus'"):
        wrapper(lambda: None, torch.empty(4, dtype=torch.int32), 1, bogus=1)  # the stock code's own error


def test_a_layout_without_the_helpers_says_so(monkeypatch):
    import sys
    import types

    cleanflush.uninstall()
    monkeypatch.setitem(sys.modules, "tilelang.profiler.bench", types.ModuleType("tilelang.profiler.bench"))
    cleanflush.install()
    rows = [(r.target, r.state, r.version, r.detail) for r in cleanflush.status() if r.name == "tilelang"]
    assert rows == [
        (
            "tilelang.profiler",
            "unsupported",
            "0.1.15",
            "none of tilelang.profiler.bench, "
            "tilelang.profiler._torch_gpu has a timing helper that takes the cache; stock flush kept",
        )
    ]
    cleanflush.uninstall()


def test_the_newer_layout_is_patched_where_it_calls_them(monkeypatch):
    """tilelang 1ae8122 moved the helpers to tilelang.profiler._torch_gpu (same names)."""
    import sys
    import types

    module = types.ModuleType("tilelang.profiler._torch_gpu")
    for name in HELPERS:
        setattr(module, name, getattr(torch_bench, name.lstrip("_")))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    cleanflush.uninstall()
    cleanflush.install()
    assert all(vars(module)[name].__wrapped__ is getattr(torch_bench, name.lstrip("_")) for name in HELPERS)
    rows = [r for r in cleanflush.status() if r.name == "tilelang"]
    detail = "the cache tensor its _bench_with_cuda_events, _bench_with_cupti, _bench_with_cudagraph zero is the flush"
    assert rows == [
        cleanflush.TargetStatus("tilelang", f"{name}._bench_with_*", "0.1.15", "patched", detail)
        for name in ("tilelang.profiler.bench", "tilelang.profiler._torch_gpu")
    ]
    cache = torch.empty(1 << 10, dtype=torch.int32)
    with OpRecorder() as rec:  # called by keyword, as a caller may
        module._bench_with_cupti(fn=lambda: None, cache=cache, n_repeat=2)
    assert [name for name in rec.names if name in ("zero_", "sum")] == ["zero_", "sum"] * 4
    cleanflush.uninstall()
    assert all(vars(module)[name] is getattr(torch_bench, name.lstrip("_")) for name in HELPERS)


def test_nothing_of_tilelang_loaded_is_nothing_to_say(monkeypatch):
    import sys

    cleanflush.uninstall()
    for name in patch.MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert patch.apply() == []


def test_the_autoload_patches_tilelang_in_a_child():
    from .conftest import run_python

    child = run_python(
        """
        import tilelang.profiler.bench as bench
        print(type(bench._bench_with_cupti).__name__)
    """,
        env={"CLEANFLUSH": "1"},
    )
    assert child.stdout.split() == ["FunctionWrapper"], child.stderr


def test_a_helpers_miss_is_said_once_for_the_target_and_a_rejected_call_gets_the_stock_error(recwarn):
    def helper_a(fn, cache, n_repeat):
        pass

    def helper_b(fn, cache, n_repeat):
        pass

    for helper in (helper_a, helper_b, helper_a):
        wrapt.FunctionWrapper(helper, patch._helper)(lambda: None, None, 1)
    # once per target (docs/environment.md), the first helper's reason kept for status
    said = [str(w.message).split(" got no cache")[0] for w in recwarn]
    assert said == ["cleanflush: tilelang: helper_a"]
    row = [r for r in cleanflush.status() if r.target == "flushes in tilelang"]
    assert len(row) == 1 and row[0].detail.startswith("helper_a got no cache tensor"), row
    with pytest.raises(TypeError) as ours:
        wrapt.FunctionWrapper(helper_a, patch._helper)(lambda: None, None, 1, 2)  # one positional too many
    with pytest.raises(TypeError) as theirs:
        helper_a(lambda: None, None, 1, 2)
    assert str(ours.value) == str(theirs.value)
