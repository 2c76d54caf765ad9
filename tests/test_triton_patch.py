"""The Triton patch, against the installed triton's real driver classes on CPU tensors."""

import importlib.metadata
import sys
import warnings

import pytest
import torch
import wrapt

triton = pytest.importorskip("triton")

import cleanflush  # noqa: E402
from cleanflush import _flush, _hold, _read, _registry, _state, _targets  # noqa: E402
from cleanflush.patches import triton as triton_patch  # noqa: E402

from .ops import OpRecorder, overlaps  # noqa: E402
from .triton_layout import (  # noqa: E402
    DRIVER_EMPTY_CACHE,
    needs_do_bench_buffer,
    needs_driver_clear_cache,
    needs_driver_empty_cache,
)

STOCK_EMPTY = torch.empty
VERSION = importlib.metadata.version("triton")  # what each row must name
TRITON = _registry.BY_NAME["triton"]


def triton_rows():
    return [row for row in cleanflush.status() if row.name == "triton"]


def registry_drivers():
    return {name: backend.driver for name, backend in triton.backends.backends.items()}


def stock_functions():
    """The exact objects in each driver class's __dict__ right now."""
    return {
        (cls, attr): vars(cls)[attr]
        for cls in registry_drivers().values()
        for attr in ("clear_cache", "get_empty_cache_for_benchmark")
        if attr in vars(cls)
    }


def bare_driver(cls):
    # No GPU here: skip __init__ (it loads libcuda); class attributes are what we patch.
    return object.__new__(cls)


@needs_driver_clear_cache
def test_patch_lands_on_every_registry_driver_class():
    assert {"nvidia", "amd"} <= set(registry_drivers())
    for cls in registry_drivers().values():
        assert isinstance(vars(cls)["clear_cache"], wrapt.FunctionWrapper)
        assert isinstance(vars(cls)["get_empty_cache_for_benchmark"], wrapt.FunctionWrapper)


@needs_driver_clear_cache
def test_importable_class_is_patched_too():
    from triton.backends.nvidia.driver import CudaDriver

    assert isinstance(vars(CudaDriver)["clear_cache"], wrapt.FunctionWrapper)


@needs_driver_clear_cache
@pytest.mark.parametrize(
    "policy, expected",
    [("write-read", ["zero_", "sum"]), ("read", ["sum"]), ("write", ["zero_"])],
)
@pytest.mark.parametrize("backend", ["nvidia", "amd"])
def test_patched_clear_cache_runs_the_policy(backend, policy, expected):
    driver = bare_driver(registry_drivers()[backend])
    cache = torch.full((4096,), 5, dtype=torch.int32)
    _flush.prepare(cache.device)
    with cleanflush.policy(policy), OpRecorder() as rec:
        driver.clear_cache(cache)
    assert rec.names == expected
    if "zero_" in expected:
        assert rec.ops[0][1][0] is cache  # the stock write, on the stock buffer
    if "sum" in expected:
        data = rec.ops[-1][1][0]
        assert data.dtype == torch.float32 and not overlaps(data, cache)
    assert cleanflush.flush_counts() == {("triton", policy): 1}


@needs_driver_clear_cache
def test_clear_cache_zeroes_a_head_of_the_cache_where_the_read_holds(monkeypatch):
    # on a GPU the read kernel holds the stream; here its stand-ins say it can
    monkeypatch.setattr(_read, "l2_bytes", lambda device: 1 << 20)
    _flush.release()
    entry = _read.prepare(torch.device("cpu"))
    monkeypatch.setattr(entry, "sweep", lambda *args: None)
    monkeypatch.setattr(entry, "held", lambda *args: None)
    driver = bare_driver(registry_drivers()["nvidia"])
    cache = torch.full((1 << 20,), 5, dtype=torch.int32)
    with OpRecorder() as rec:
        driver.clear_cache(cache)
    [(name, (head,), _)] = rec.ops  # the stock clear_cache, handed a view of the cache's first lines
    assert name == "zero_" and head.data_ptr() == cache.data_ptr() and head.numel() == (1 << 20) // 8 // 4
    assert not cache[: head.numel()].any() and bool((cache[head.numel() :] == 5).all())
    assert cleanflush.flush_counts() == {("triton", "write-read"): 1}


@needs_driver_clear_cache
def test_uninstall_restores_exact_objects_and_install_is_idempotent():
    cleanflush.install()
    wrapped = stock_functions()
    originals = {key: fw.__wrapped__ for key, fw in wrapped.items()}
    cleanflush.uninstall()
    cleanflush.uninstall()
    assert stock_functions() == originals  # identity: the dict compares with `is` first
    for key, fn in stock_functions().items():
        assert fn is originals[key]
    driver = bare_driver(registry_drivers()["nvidia"])
    cache = torch.full((16,), 5, dtype=torch.int32)
    with OpRecorder() as rec:
        driver.clear_cache(cache)
    assert rec.names == ["zero_"]  # stock behaviour
    cleanflush.install()
    cleanflush.install()
    for key, fw in stock_functions().items():
        assert isinstance(fw, wrapt.FunctionWrapper)
        assert fw.__wrapped__ is originals[key]  # wrapped once, not twice


class CpuInterface:
    """The device interface do_bench times with, on CPU: events that say 1 ms."""

    class Event:
        def __init__(self, enable_timing=True):
            pass

        def record(self):
            pass

        def elapsed_time(self, end):
            return 1.0  # ms: one timed call for rep=1

    @staticmethod
    def synchronize():
        pass


@needs_driver_clear_cache
def test_do_bench_and_the_autotuners_benchmarker_run_their_loop_with_the_queued_bound(monkeypatch):
    """The real do_bench, its driver the real (patched) CudaDriver with a CPU device interface
    and cache: every call of the timed function runs inside a queued loop, and the flushes too."""
    import triton.testing
    from triton.backends.nvidia.driver import CudaDriver

    driver = bare_driver(CudaDriver)
    driver.get_device_interface = lambda: CpuInterface
    driver.get_empty_cache_for_benchmark = lambda: torch.zeros(64, dtype=torch.int32)
    config = triton.runtime.driver
    monkeypatch.setattr(config, "_active" if "_active" in vars(config) else "active", driver)
    bounds = []

    def fn():
        bounds.append(_hold.bound_ns())

    benchmarker = driver.get_benchmarker()  # what the autotuner times with (3.3+: asked of the driver)
    assert benchmarker is triton.testing.do_bench
    benchmarker(fn, warmup=1, rep=1)
    assert set(bounds) == {_hold.QUEUED_HOLD_NS} and len(bounds) > 5
    assert _hold.bound_ns() == _hold.HOLD_NS  # the loop ends with the call
    assert cleanflush.flush_counts()[("triton", "write-read")] > 5
    cleanflush.uninstall()  # the negative control: the stock do_bench, the stock bound
    bounds.clear()
    triton.testing.do_bench(fn, warmup=1, rep=1)
    assert set(bounds) == {_hold.HOLD_NS}


@needs_driver_clear_cache
def test_do_bench_is_restored_exactly():
    import triton.testing

    wrapper = triton.testing.do_bench
    assert isinstance(wrapper, wrapt.FunctionWrapper)
    cleanflush.uninstall()
    assert triton.testing.do_bench is wrapper.__wrapped__
    cleanflush.install()
    assert triton.testing.do_bench is wrapper  # the same wrapper back, not a second one


@needs_driver_clear_cache
def test_foreign_wrapper_on_top_is_kept_and_ours_disabled():
    cls = registry_drivers()["nvidia"]
    ours = vars(cls)["clear_cache"]

    def theirs(wrapped, instance, args, kwargs):
        calls.append("theirs")
        return wrapped(*args, **kwargs)

    calls = []
    wrapt.wrap_function_wrapper(cls, "clear_cache", theirs)
    foreign = vars(cls)["clear_cache"]
    try:
        with pytest.warns(RuntimeWarning, match="wrapped again after cleanflush"):
            cleanflush.uninstall()
        assert vars(cls)["clear_cache"] is foreign
        cache = torch.full((16,), 5, dtype=torch.int32)
        with OpRecorder() as rec:
            bare_driver(cls).clear_cache(cache)
        assert calls == ["theirs"] and rec.names == ["zero_"]
    finally:
        cls.clear_cache = ours.__wrapped__


@needs_driver_empty_cache
def test_get_empty_cache_prepares_the_read_buffer(monkeypatch):
    # Stand in for the CUDA allocation with a CPU tensor; the wrapper is the real one.
    cls = registry_drivers()["nvidia"]
    stock_cache = torch.zeros(8, dtype=torch.int32)
    monkeypatch.setattr(torch, "empty", lambda *a, **k: stock_cache)
    _flush.release()
    cache = bare_driver(cls).get_empty_cache_for_benchmark()
    # the stock tensor's storage, as the subclass whose zero_ is the flush
    assert type(cache).__name__ == "CleanFlushCache" and cache.data_ptr() == stock_cache.data_ptr()
    entry = _read.READS.buffers[cache.device]
    assert entry.buffer.numel() * 4 == _read.buffer_bytes(entry.l2) == 256 * 1024 * 1024


class Triton32Driver:
    """Stands in for triton 3.2's CudaDriver (not installable next to torch 2.13):
    get_empty_cache_for_benchmark exists, clear_cache does not, do_bench zeroes inline."""

    def get_empty_cache_for_benchmark(self):
        return torch.full((1024,), 9, dtype=torch.int32)


def do_bench_32_flush(driver):
    cache = driver.get_empty_cache_for_benchmark()
    cache.zero_()  # what triton 3.2's do_bench does inline
    return cache


def test_triton_3_2_layout_flushes_through_the_inline_zero():
    original = vars(Triton32Driver)["get_empty_cache_for_benchmark"]
    site = triton_patch.patch_class("fake32", Triton32Driver)
    try:
        assert site == _state.Site(
            "fake32.get_empty_cache_for_benchmark",
            "patched",
            "triton 3.2 layout: do_bench's inline zero_() runs the flush",
        )
        driver = Triton32Driver()
        _flush.prepare(torch.device("cpu"))
        for policy, expected in [("write-read", ["zero_", "sum"]), ("read", ["sum"]), ("write", ["zero_"])]:
            with cleanflush.policy(policy), OpRecorder() as rec:
                cache = do_bench_32_flush(driver)
            assert rec.names == expected
            assert int(cache.sum()) == (9 * 1024 if policy == "read" else 0)
    finally:
        cleanflush.uninstall()
    assert vars(Triton32Driver)["get_empty_cache_for_benchmark"] is original


def test_driver_without_flush_methods_is_reported_unsupported():
    class Triton31Driver:
        pass

    site = triton_patch.patch_class("fake31", Triton31Driver)
    assert site == _state.Site(
        "fake31.clear_cache",
        "unsupported",
        "this driver has neither clear_cache nor get_empty_cache_for_benchmark "
        "(triton < 3.2 flushes inline in do_bench); stock flush kept",
    )
    assert "clear_cache" not in vars(Triton31Driver)


@needs_driver_clear_cache
def test_status_lists_every_driver_class():
    rows = {row.target: row for row in cleanflush.status()}
    importable = {"nvidia": "triton.backends.nvidia.driver.CudaDriver", "amd": "triton.backends.amd.driver.HIPDriver"}
    for name, cls in registry_drivers().items():
        # the importable name where it is the registry's class (3.4+), else the registry's
        module, _, attr = importable[name].rpartition(".")
        same = getattr(sys.modules.get(module), attr, None) is cls
        label = importable[name] if same else f"triton.backends.backends[{name!r}].driver"
        row = rows[f"{label}.clear_cache"]
        assert row.patched and row.version == triton.__version__
    cleanflush.uninstall()
    assert not any(row.patched for row in cleanflush.status())


@needs_driver_clear_cache
def test_registry_copy_of_the_driver_is_patched_too(monkeypatch):
    """triton 3.0-3.3 load each backend with spec_from_file_location under a bare name, so
    the active driver class is a separate copy of the importable CudaDriver.  Reproduce that
    with the installed driver source and check that the copy is patched and restored."""
    import importlib.util

    import triton.backends.nvidia.driver as importable

    spec = importlib.util.spec_from_file_location("nvidia", importable.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    copy_cls = copy.CudaDriver
    assert copy_cls is not importable.CudaDriver
    backend = triton.backends.backends["nvidia"]
    monkeypatch.setitem(triton.backends.backends, "nvidia", type(backend)(backend.compiler, copy_cls))
    original = vars(copy_cls)["clear_cache"]

    _targets.apply(TRITON)
    assert isinstance(vars(copy_cls)["clear_cache"], wrapt.FunctionWrapper)
    assert isinstance(vars(importable.CudaDriver)["clear_cache"], wrapt.FunctionWrapper)
    rows = {row.target: row for row in cleanflush.status()}
    assert rows["triton.backends.backends['nvidia'].driver.clear_cache"] == cleanflush.TargetStatus(
        "triton",
        "triton.backends.backends['nvidia'].driver.clear_cache",
        VERSION,
        "patched",
        "do_bench, autotuner and Proton helpers flush through it; harnesses that zero its cache tensor "
        "directly (tritonbench, Helion) flush through that tensor",
    )
    cache = torch.full((16,), 5, dtype=torch.int32)
    _flush.prepare(cache.device)
    with OpRecorder() as rec, cleanflush.policy("write-read"):
        bare_driver(copy_cls).clear_cache(cache)
    assert rec.names == ["zero_", "sum"]
    monkeypatch.setattr(torch, "empty", lambda *a, **k: torch.zeros(8, dtype=torch.int32))
    cache = bare_driver(copy_cls).get_empty_cache_for_benchmark()  # the copy's, patched in this test
    with OpRecorder() as rec:
        cache.zero_()
    assert type(cache).__name__ == "CleanFlushCache" and rec.names == ["zero_", "sum"]
    cleanflush.uninstall()
    assert vars(copy_cls)["clear_cache"] is original


@needs_driver_clear_cache
def test_a_failing_patch_warns_and_leaves_the_stock_flush(monkeypatch):
    # Hooks run inside the user's `import triton`: an exception there must not escape.
    def broken():
        raise RuntimeError("unexpected triton layout")

    cleanflush.uninstall()
    monkeypatch.setattr(triton_patch, "apply", broken)
    with pytest.warns(RuntimeWarning, match=r"could not patch triton \(RuntimeError\('unexpected triton layout'\)\)"):
        cleanflush.install()
    for cls in registry_drivers().values():
        assert not isinstance(vars(cls)["clear_cache"], wrapt.FunctionWrapper)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once: a second install is quiet
        cleanflush.uninstall()
        cleanflush.install()


def test_triton_3_2_layout_counts_as_covering_do_bench(monkeypatch):
    monkeypatch.setattr(_state.STATE, "sites", {})
    _state.record("triton", triton_patch.patch_class("fake32", Triton32Driver))
    try:
        assert triton_patch.do_bench_state() == "patched"
    finally:
        cleanflush.uninstall()


# tritonbench (meta-pytorch/tritonbench 2cd46d0, tritonbench/components/do_bench/run.py) and
# Helion's pretuned timer take the tensor from get_empty_cache_for_benchmark and zero it
# through the bound method they keep: ``clear_cache_fn = cache.zero_``, called before each
# call, or captured into a CUDA graph; Triton's own do_bench calls clear_cache(cache).


def empty_cache_on_cpu(monkeypatch, numel=64):
    cls = registry_drivers()["nvidia"]
    monkeypatch.setattr(torch, "empty", lambda *a, **k: torch.full((numel,), 5, dtype=torch.int32))
    return bare_driver(cls), bare_driver(cls).get_empty_cache_for_benchmark()


@needs_driver_empty_cache
@pytest.mark.parametrize(
    "policy, expected", [("write-read", ["zero_", "sum"]), ("read", ["sum"]), ("write", ["zero_"])]
)
def test_a_harness_that_keeps_cache_zero_flushes_under_the_policy(monkeypatch, policy, expected):
    driver, cache = empty_cache_on_cpu(monkeypatch)
    clear_cache_fn = cache.zero_  # what tritonbench keeps
    with cleanflush.policy(policy), OpRecorder() as rec:
        for _ in range(3):
            clear_cache_fn()
    assert rec.names == expected * 3
    assert cleanflush.flush_counts() == {("triton", policy): 3}
    if "zero_" in expected:
        assert rec.ops[0][1][0].data_ptr() == cache.data_ptr() and int(cache.sum()) == 0


@needs_driver_clear_cache
def test_clear_cache_on_that_tensor_flushes_once(monkeypatch):
    driver, cache = empty_cache_on_cpu(monkeypatch)
    with OpRecorder() as rec:
        driver.clear_cache(cache)  # Triton's do_bench: the stock zero_ of the same tensor
        driver.clear_cache(cache=cache)
    assert rec.names == ["zero_", "sum"] * 2
    assert cleanflush.flush_counts() == {("triton", "write-read"): 2}


@needs_driver_empty_cache
def test_the_tensor_is_the_stock_one_for_everything_else(monkeypatch):
    driver, cache = empty_cache_on_cpu(monkeypatch, numel=16)
    assert isinstance(cache, torch.Tensor) and cache.dtype == torch.int32 and cache.shape == (16,)
    assert type(cache + 1) is torch.Tensor  # results of other operations are plain tensors
    cleanflush.uninstall()
    with OpRecorder() as rec:
        cache.zero_()  # a tensor handed out before uninstall flushes stock from then on
    assert rec.names == ["zero_"]


@needs_driver_empty_cache
def test_a_read_buffer_that_cannot_be_made_still_hands_out_the_flushing_tensor(monkeypatch):
    # the tensor's zero_ must still go through cleanflush, which says the read failed and
    # counts the write it fell back to (a plain tensor would flush stock, unsaid and uncounted)
    def no_memory(device, numel):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(_read, "_allocate_outside_pools", no_memory)
    _flush.release()
    driver, cache = empty_cache_on_cpu(monkeypatch)
    assert type(cache).__name__ == "CleanFlushCache"
    with pytest.warns(RuntimeWarning, match="the clean read could not run in triton"):
        cache.zero_()
    assert cleanflush.flush_counts() == {("triton", "write"): 1} and int(cache.sum()) == 0


# triton 3.0-3.1: no flush method on the driver; do_bench zeroes a local buffer.  So that
# every triton runs these tests (3.0's do_bench calls torch.cuda), the layout is a stand-in: the lines of
# triton 3.1.0's python/triton/testing.py do_bench that allocate and zero the buffer (3.0.0
# differs only in calling torch.cuda where 3.1.0 asks the device interface), with a fixed
# number of timed calls.  matrix/check.py runs the real 3.0.0 and 3.1.0 functions.
def do_bench_31(
    fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, fast_flush=True, return_mode="mean", device_type="cuda"
):
    import torch

    di = torch._dynamo.device_interface.get_interface_for_device(device_type)
    fn()
    di.synchronize()
    if fast_flush:
        cache = torch.empty(int(256e6 // 4), dtype=torch.int, device=device_type)
    else:
        cache = torch.empty(int(256e6), dtype=torch.int8, device=device_type)
    for _ in range(5):  # its runtime estimate, then (here) three timed calls
        cache.zero_()
        fn()
    for _ in range(3):
        cache.zero_()
        fn()
    return 1.0


@pytest.fixture
def triton_31(monkeypatch):
    """The installed triton made to look like 3.1: drivers without flush methods, a
    triton.testing whose do_bench is the stand-in above, and an autotuner module that bound
    that name when triton was imported (3.1.0's ``from ..testing import do_bench``)."""
    import types

    class Triton31Driver:
        pass

    cleanflush.uninstall()
    _state.reset()  # the real drivers' rows
    testing = types.ModuleType("triton.testing")
    testing.do_bench = do_bench_31
    monkeypatch.setattr(triton.backends, "backends", {"nvidia": types.SimpleNamespace(driver=Triton31Driver)})
    for module in ("triton.backends.nvidia.driver", "triton.backends.amd.driver"):
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    monkeypatch.setitem(sys.modules, "triton.testing", testing)
    monkeypatch.setattr(sys.modules[triton_patch.AUTOTUNER], "do_bench", do_bench_31, raising=False)
    cleanflush.install()
    yield testing
    cleanflush.uninstall()


def bench_31(testing, policy, **kwargs):
    x = torch.ones(8)
    with cleanflush.policy(policy), OpRecorder() as rec:
        testing.do_bench(lambda: torch.neg(x), **kwargs)
    return rec


def test_triton_31_autotuner_times_through_the_flush(triton_31):
    """triton 3.0-3.1's ``Autotuner._bench`` returns ``do_bench(kernel_call, warmup=...,
    rep=..., quantiles=(0.5, 0.2, 0.8))``, the name its module imported (triton v3.1.0,
    python/triton/runtime/autotuner.py; the same in v3.0.0); on CPU it also passes the device."""
    autotuner = sys.modules[triton_patch.AUTOTUNER]
    x = torch.ones(8)
    expected = {"write-read": ["zero_", "sum"], "read": ["sum"], "write": ["zero_"]}
    for policy, per_call in expected.items():
        with cleanflush.policy(policy), OpRecorder() as rec:
            autotuner.do_bench(lambda: torch.neg(x), warmup=25, rep=100, quantiles=(0.5, 0.2, 0.8), device_type="cpu")
        names = [name for name in rec.names if name in ("zero_", "sum", "neg")]
        assert names == ["neg"] + (per_call + ["neg"]) * 8, policy
    assert cleanflush.flush_counts() == {("triton", p): 8 for p in expected}


def test_triton_31_autotuner_that_copied_the_wrapper_gets_the_original_back(triton_31):
    """Imported while cleanflush was installed (``CLEANFLUSH=1`` hooks triton.testing while
    the autotuner's import of it runs), the autotuner binds our wrapper: uninstall puts the
    original there too.  Its import runs the patch again (a trigger module)."""
    autotuner = sys.modules[triton_patch.AUTOTUNER]
    assert triton_patch.AUTOTUNER in next(t for t in _registry.TARGETS if t.name == "triton").triggers
    cleanflush.uninstall()
    del autotuner.do_bench
    cleanflush.install()
    autotuner.do_bench = triton_31.do_bench  # what its ``from ..testing import do_bench`` binds now
    triton_patch.apply()  # what the trigger's import hook runs
    cleanflush.uninstall()
    assert autotuner.do_bench is do_bench_31


def test_an_alias_of_a_wrapper_gone_since_is_wrapped_anew_at_the_next_install(triton_31, monkeypatch):
    """The autotuner copied the wrapper of a triton.testing that has since been replaced (the
    alias is kept among the patches ever made); at the next install its do_bench must flush
    through a wrapper of its own, not the old module's disabled one."""
    import types

    test_triton_31_autotuner_that_copied_the_wrapper_gets_the_original_back(triton_31)
    autotuner = sys.modules[triton_patch.AUTOTUNER]
    testing = types.ModuleType("triton.testing")  # another triton.testing, its do_bench the same function
    testing.do_bench = do_bench_31
    monkeypatch.setitem(sys.modules, "triton.testing", testing)
    cleanflush.install()
    x = torch.ones(8)
    with cleanflush.policy("write-read"), OpRecorder() as rec:
        autotuner.do_bench(lambda: torch.neg(x), warmup=25, rep=100, quantiles=(0.5, 0.2, 0.8), device_type="cpu")
    assert [name for name in rec.names if name in ("zero_", "sum", "neg")] == ["neg"] + ["zero_", "sum", "neg"] * 8


@pytest.mark.parametrize("fast_flush", [True, False])
def test_triton_31_do_bench_flushes_its_local_buffer(triton_31, fast_flush):
    expected = {"write-read": ["zero_", "sum"], "read": ["sum"], "write": ["zero_"]}
    for policy, per_call in expected.items():
        rec = bench_31(triton_31, policy, fast_flush=fast_flush, device_type="cpu")
        names = [name for name in rec.names if name in ("zero_", "sum", "neg")]
        assert names == ["neg"] + (per_call + ["neg"]) * 8, policy
        written = [args[0] for name, args, _ in rec.ops if name == "zero_"]
        assert all(w.nbytes == int(256e6) for w in written)
        if policy != "write":
            read = next(args[0] for name, args, _ in rec.ops if name == "sum")
            assert read.dtype == torch.float32 and not any(overlaps(read, w) for w in written)
            # what the 256e6-byte write leaves of the stock 256 MiB, no L2 on a CPU
            assert read.nbytes == (256 << 20 if policy == "read" else (256 << 20) - int(256e6))
    assert cleanflush.flush_counts() == {("triton", p): 8 for p in expected}
    assert torch.empty is STOCK_EMPTY


@needs_do_bench_buffer
@pytest.mark.parametrize(
    "policy, per_call", [("write-read", ["zero_", "sum"]), ("read", ["sum"]), ("write", ["zero_"])]
)
def test_the_installed_do_bench_of_the_3_0_3_1_layout_flushes_its_buffer(monkeypatch, policy, per_call):
    """The real do_bench of the installed triton 3.0 or 3.1, on CPU tensors: 3.1 takes a
    device_type (CPU has a device interface); 3.0 calls torch.cuda and allocates on "cuda",
    which are stood in for here."""
    import inspect

    import triton.testing

    kwargs = {}
    if "device_type" in inspect.signature(triton.testing.do_bench).parameters:
        kwargs["device_type"] = "cpu"
    else:
        real_empty = torch.empty
        monkeypatch.setattr(torch, "empty", lambda *a, **k: real_empty(*a, **{**k, "device": "cpu"}))
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
        monkeypatch.setattr(torch.cuda, "Event", CpuInterface.Event)
    rec = bench_31(triton.testing, policy, warmup=1, rep=1, **kwargs)
    flushes, flush = [], []
    for name in rec.names[1:]:  # the first call has no flush before it
        if name == "neg":
            flushes.append(flush)
            flush = []
        elif name in ("zero_", "sum"):
            flush.append(name)
    flushes = [f for f in flushes if f]  # the warm-up calls are not flushed
    assert flushes and all(f == per_call for f in flushes), flushes
    assert cleanflush.flush_counts() == {("triton", policy): len(flushes)}
    written = [args[0] for name, args, _ in rec.ops if name == "zero_"]
    assert all(w.nbytes == int(256e6) for w in written)
    read = [args[0] for name, args, _ in rec.ops if name == "sum"]
    assert all(r.dtype == torch.float32 and not any(overlaps(r, w) for w in written) for r in read)


def test_triton_31_status_and_exact_restore(triton_31):
    assert [(r.target, r.state, r.version, r.detail) for r in triton_rows()] == [
        (
            "triton.testing.do_bench",
            "patched",
            VERSION,
            "triton 3.0-3.1 layout: the 256 MB buffer it allocates zeroes through the flush "
            "(the autotuner's copy of do_bench too)",
        )
    ]
    import torch._inductor.runtime.benchmarking  # noqa: F401  (TritonBenchmarker calls do_bench)

    inductor_row = {r.target: r for r in cleanflush.status()}["TritonBenchmarker.benchmark_gpu"]
    assert inductor_row.patched and inductor_row.detail.endswith("patched there")
    assert triton_31.do_bench.__wrapped__ is do_bench_31
    assert sys.modules[triton_patch.AUTOTUNER].do_bench.__wrapped__ is do_bench_31
    cleanflush.uninstall()
    assert triton_31.do_bench is do_bench_31
    assert sys.modules[triton_patch.AUTOTUNER].do_bench is do_bench_31


def test_triton_31_buffer_of_another_size_runs_stock_and_says_so(triton_31, monkeypatch):
    """Negative control: a do_bench whose buffer the patch does not recognise."""
    monkeypatch.setattr(triton_patch, "_is_do_bench_buffer", lambda tensor: False)
    with pytest.warns(RuntimeWarning, match="made no flush buffer of the shape cleanflush knows"):
        rec = bench_31(triton_31, "write-read", device_type="cpu")
    assert [name for name in rec.names if name in ("zero_", "sum")] == ["zero_"] * 8
    assert cleanflush.flush_counts() == {}
    row = {r.target: r for r in cleanflush.status()}["triton.testing.do_bench"]
    assert (row.state, row.version) == ("unsupported", VERSION) and "stock flush ran" in row.detail
    assert torch.empty is STOCK_EMPTY


def test_the_buffer_match_takes_only_the_two_allocations_of_do_bench():
    """``torch.empty`` does not touch memory: these cost nothing on a CPU.  Each miss differs
    from one of triton 3.1.0's two allocations in one property only."""
    fast = torch.empty(int(256e6 // 4), dtype=torch.int)  # fast_flush=True
    slow = torch.empty(int(256e6), dtype=torch.int8)  # fast_flush=False
    assert triton_patch._is_do_bench_buffer(fast) and triton_patch._is_do_bench_buffer(slow)
    misses = [
        torch.empty(2, int(256e6 // 8), dtype=torch.int),  # same numel, two dimensions
        torch.empty(int(256e6 // 4), dtype=torch.int8),
        torch.empty(int(256e6), dtype=torch.int),
        torch.empty(int(256e6 // 4) + 1, dtype=torch.int),
        torch.empty(1024, dtype=torch.int8),
    ]
    assert [triton_patch._is_do_bench_buffer(t) for t in misses] == [False] * len(misses)


def test_triton_31_do_bench_does_not_count_as_a_patched_driver(triton_31):
    """Proton's helpers flush through the driver, which triton 3.0-3.1 do not patch."""
    assert triton_patch.do_bench_state() == "patched"
    proton = _state.Site("triton.testing.do_bench_proton", "unsupported", "the driver is not patched")
    triton_31.do_bench_proton = lambda: None
    assert triton_patch.derived() == [proton]


def test_a_triton_without_driver_backends_is_reported_as_before_3_0(monkeypatch):
    if DRIVER_EMPTY_CACHE:  # with its backends, a triton whose driver flushes has do_bench patched
        assert [row.state for row in triton_rows() if row.target == "triton.testing.do_bench"] == ["patched"]
    cleanflush.uninstall()
    monkeypatch.delitem(sys.modules, "triton.backends")
    assert triton_patch.apply() == [
        _state.Site(
            "triton.testing.do_bench",
            "unsupported",
            "this triton has no driver backends (before 3.0); stock flush kept",
        )
    ]
    assert all(not isinstance(fn, wrapt.FunctionWrapper) for fn in stock_functions().values())


def test_a_do_bench_of_unknown_layout_is_reported_unsupported(triton_31):
    def do_bench(fn, warmup=25, rep=100):  # no fast_flush: not the 3.0-3.1 function
        return fn()

    cleanflush.uninstall()
    triton_31.do_bench = do_bench
    cleanflush.install()
    assert triton_31.do_bench is do_bench
    row = {r.target: r for r in cleanflush.status()}["triton.testing.do_bench"]
    assert (row.state, row.version, row.detail) == (
        "unsupported",
        VERSION,
        "neither the driver nor triton.testing.do_bench has a flush cleanflush knows; stock flush kept",
    )


def test_a_do_bench_that_cannot_be_inspected_is_unsupported(triton_31):
    cleanflush.uninstall()
    triton_31.do_bench = 3
    cleanflush.install()
    assert triton_31.do_bench == 3
    row = {r.target: r for r in cleanflush.status()}["triton.testing.do_bench"]
    assert row.state == "unsupported" and row.detail.startswith("neither the driver")


def test_before_triton_testing_is_imported_the_row_says_when(triton_31, monkeypatch):

    cleanflush.uninstall()
    _state.reset()
    monkeypatch.delitem(sys.modules, "triton.testing")
    cleanflush.install()
    row = {r.target: r for r in cleanflush.status()}["triton.testing.do_bench"]
    assert (row.state, row.version, row.detail) == (
        "pending",
        VERSION,
        "triton 3.0-3.1 layout: patched when triton.testing is imported",
    )


@needs_driver_empty_cache
@pytest.mark.parametrize(
    "names", [("do_bench_proton",), ("do_bench_proton", "do_bench_cudagraph_proton"), ("do_bench_cudagraph_proton",)]
)
def test_protons_helpers_have_a_row_of_their_own(monkeypatch, names):
    """triton 3.8's Proton helpers flush through the driver (set, or removed, on the installed
    triton's triton.testing here: triton before 3.8 has none)."""

    import triton.testing

    for name in ("do_bench_proton", "do_bench_cudagraph_proton"):
        if name in names:
            monkeypatch.setattr(triton.testing, name, lambda *a, **k: None, raising=False)
        else:
            monkeypatch.delattr(triton.testing, name, raising=False)
    row = [r for r in cleanflush.status() if r.target.startswith("triton.testing.do_bench_")]
    assert row == [
        cleanflush.TargetStatus(
            "triton",
            "triton.testing." + " / ".join(names),
            VERSION,
            "patched",
            "flushes through the driver's clear_cache",
        )
    ]
    cleanflush.uninstall()
    assert [(r.state, r.detail) for r in cleanflush.status() if r.target.startswith("triton.testing.do_bench_")] == [
        ("off", "the driver is not patched")
    ]


def test_protons_row_says_when_the_driver_is_not_patched(triton_31, monkeypatch):
    monkeypatch.setattr(triton_31, "do_bench_proton", lambda *a, **k: None, raising=False)
    rows = {r.target: (r.state, r.detail) for r in cleanflush.status()}
    assert rows["triton.testing.do_bench_proton"] == ("unsupported", "the driver is not patched")


def test_a_driver_class_under_two_registry_names_is_listed_once_under_the_first(monkeypatch):
    import types

    driver = registry_drivers()["nvidia"]
    monkeypatch.setattr(
        triton.backends,
        "backends",
        {"nvidia": types.SimpleNamespace(driver=driver), "alias": types.SimpleNamespace(driver=driver)},
    )
    # triton 3.0-3.3 load the backends under bare names: these may not be loaded
    monkeypatch.delitem(sys.modules, "triton.backends.nvidia.driver", raising=False)
    monkeypatch.delitem(sys.modules, "triton.backends.amd.driver", raising=False)
    assert triton_patch.driver_classes() == [("triton.backends.backends['nvidia'].driver", driver)]


@pytest.mark.parametrize(
    "installed, expected",
    [
        ({"pytorch-triton": "3.5.0+gitabc"}, "3.5.0+gitabc"),
        ({"triton": "3.6.0", "pytorch-triton": "3.5.0"}, "3.6.0"),
        ({}, None),
    ],
)
def test_the_version_is_tritons_or_that_of_nightly_torchs_pytorch_triton(monkeypatch, installed, expected):
    def version(dist):
        if dist not in installed:
            raise importlib.metadata.PackageNotFoundError(dist)
        return installed[dist]

    monkeypatch.setattr(importlib.metadata, "version", version)
    _targets.version.cache_clear()
    try:
        assert _targets.version(TRITON) == expected
    finally:
        _targets.version.cache_clear()
