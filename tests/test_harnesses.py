"""Harnesses whose flush is a module function (KernelBench, SOL-ExecBench, DeepEP), on CPU.

None of them installs from the package index (git-only), so each is a stand-in module that
reproduces the real layout: the flush function's name, signature and body, and a benchmark
loop that looks it up as a module global before each timed call, as the real one does.
Read at: ScalingIntelligence/KernelBench 0de4ce8 (src/kernelbench/timing.py),
NVIDIA/SOL-ExecBench 2f55c0f (src/sol_execbench/core/bench/timing.py),
deepseek-ai/DeepEP 855fa9d (deep_ep/utils/testing.py).  Devices are the CPU here.
"""

import importlib
import importlib.metadata
import sys

import pytest
import torch
import wrapt

import cleanflush
from cleanflush import _flush

from .conftest import run_python, write_stand_ins
from .ops import OpRecorder, overlaps

STAND_INS = {
    "kernelbench/timing.py": '''
        import torch

        def clear_l2_cache(device="cuda"):
            dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device=device)
            dummy.fill_(42)
            del dummy

        def time_execution_with_cuda_event(kernel_fn, args, num_trials=3, device="cpu"):
            for _ in range(num_trials):
                clear_l2_cache(device=device)  # measuring cold cache performance
                kernel_fn(*args)
        ''',
    "sol_execbench/core/bench/timing.py": '''
        import torch

        def _get_empty_cache_for_benchmark(device):
            return torch.empty(2 * 1024 * 1024, dtype=torch.int8, device=device)

        def _clear_cache(cache):
            cache.zero_()

        def bench_time_with_cuda_events(fn, rep=3, device="cpu"):
            cache = _get_empty_cache_for_benchmark(device)
            for _ in range(rep):
                _clear_cache(cache)
                fn()
        ''',
    "deep_ep/utils/testing.py": '''
        import torch

        def flush_l2_cache(enabled=True):
            l2_flush_cache_size = 256e6
            if enabled:
                torch.empty(int(l2_flush_cache_size // 4), dtype=torch.int, device="cpu").zero_()

        def bench(fn, num_tests=3, flush_l2=True):
            for _ in range(num_tests):
                flush_l2_cache(flush_l2)
                fn()
        ''',
}
MODULES = {"kernelbench": "kernelbench.timing", "sol-execbench": "sol_execbench.core.bench.timing",
           "deep-ep": "deep_ep.utils.testing"}
FUNCTIONS = {"kernelbench": "clear_l2_cache", "sol-execbench": "_clear_cache", "deep-ep": "flush_l2_cache"}
BENCH = {"kernelbench": lambda m, fn: m.time_execution_with_cuda_event(fn, (), device="cpu"),
         "sol-execbench": lambda m, fn: m.bench_time_with_cuda_events(fn, device="cpu"),
         "deep-ep": lambda m, fn: m.bench(fn)}
STOCK_OPS = {"kernelbench": ["empty", "fill_"], "sol-execbench": ["zero_"], "deep-ep": ["empty", "zero_"]}
SETUP_OPS = {"sol-execbench": ["empty"]}  # its cache, allocated once before the loop


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    write_stand_ins(tmp_path, STAND_INS)
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in MODULES.values():
        importlib.import_module(module)
    # An import hook fires once per module name; these names are imported anew for every
    # test, so install again, which patches what is loaded (fresh interpreters below test
    # the import hook itself).
    cleanflush.uninstall()
    cleanflush.install()
    yield tmp_path
    for name in list(sys.modules):
        if name.split(".")[0] in ("kernelbench", "sol_execbench", "deep_ep"):
            del sys.modules[name]


def bench_ops(harness, policy):
    module = importlib.import_module(MODULES[harness])
    _flush.prepare(torch.device("cpu"))
    x = torch.ones(4)
    with cleanflush.policy(policy), OpRecorder() as rec:
        BENCH[harness](module, lambda: torch.neg(x))
    return [name for name in rec.names if name != "neg"], rec


@pytest.mark.parametrize("harness", list(MODULES))
def test_the_bench_loop_flushes_under_each_policy(stand_ins, harness):
    stock = STOCK_OPS[harness]
    expected = {"write-read": stock + ["sum"], "read": ["sum"], "write": stock}
    for policy, per_call in expected.items():
        names, rec = bench_ops(harness, policy)
        assert names == SETUP_OPS.get(harness, []) + per_call * 3, (policy, names)
        if policy != "write":
            read = [args[0] for name, args, _ in rec.ops if name == "sum"][0]
            assert read.dtype == torch.float32
            written = [args[0] for name, args, _ in rec.ops if name in ("zero_", "fill_")]
            assert not any(overlaps(read, w) for w in written)


@pytest.mark.parametrize("harness", list(MODULES))
def test_exact_restore_and_status(stand_ins, harness):
    module = importlib.import_module(MODULES[harness])
    name = FUNCTIONS[harness]
    patched = vars(module)[name]
    assert isinstance(patched, wrapt.FunctionWrapper)
    stock = patched.__wrapped__
    row = next(r for r in cleanflush.status() if r.target == f"{MODULES[harness]}.{name}")
    assert row.patched
    cleanflush.uninstall()
    assert vars(module)[name] is stock
    cleanflush.install()
    assert vars(module)[name].__wrapped__ is stock


def test_deep_ep_flush_switched_off_stays_off(stand_ins):
    module = importlib.import_module("deep_ep.utils.testing")
    with OpRecorder() as rec:
        module.bench(lambda: None, flush_l2=False)
    assert rec.names == []
    assert cleanflush.flush_counts() == {}


def test_disable_names_each_harness(stand_ins, monkeypatch):
    monkeypatch.setenv("CLEANFLUSH_DISABLE", "kernelbench")
    cleanflush.uninstall()
    cleanflush.install()
    module = importlib.import_module("kernelbench.timing")
    assert not isinstance(vars(module)["clear_l2_cache"], wrapt.FunctionWrapper)
    assert isinstance(vars(importlib.import_module("deep_ep.utils.testing"))["flush_l2_cache"],
                      wrapt.FunctionWrapper)
    rows = {r.target: r.detail for r in cleanflush.status()}
    assert rows["kernelbench: every target"] == "disabled by CLEANFLUSH_DISABLE; stock flush kept"


def test_disabled_deep_ep_says_so_in_status(stand_ins, monkeypatch):
    monkeypatch.setenv("CLEANFLUSH_DISABLE", "deep-ep")
    cleanflush.uninstall()
    cleanflush.install()
    rows = {r.target: r.detail for r in cleanflush.status()}
    assert rows["deep-ep: every target"] == "disabled by CLEANFLUSH_DISABLE; stock flush kept"


def test_a_spawned_evaluator_is_patched_by_the_autoload(stand_ins):
    # KernelBench's evaluators run in mp "spawn" children; SOL-ExecBench's in subprocesses
    child = run_python(
        f"""
        import sys; sys.path.insert(0, {str(stand_ins)!r})
        import torch
        import kernelbench.timing as t, sol_execbench.core.bench.timing as s
        t.time_execution_with_cuda_event(lambda: None, (), device="cpu")
        s.bench_time_with_cuda_events(lambda: None, device="cpu")
        import cleanflush
        print(sorted(cleanflush.flush_counts().items()))
        """,
        {"CLEANFLUSH": "1"})
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "[(('kernelbench', 'write-read'), 3), (('sol-execbench', 'write-read'), 3)]"


MiB = 1 << 20
# bytes each harness's stock flush writes (its own constant or its cache), and so what the
# read after it covers under a 100 MiB L2: max(2 x L2, 256 MiB - written)
WRITTEN = {"kernelbench": 256 * MiB, "sol-execbench": 2 * MiB, "deep-ep": int(256e6) // 4 * 4}


@pytest.mark.parametrize("harness", list(MODULES))
def test_the_read_is_sized_from_what_the_harness_wrote(stand_ins, harness, monkeypatch):
    monkeypatch.setattr(_flush, "l2_bytes", lambda device: 100 * MiB)
    _flush.release()
    names, rec = bench_ops(harness, "write-read")
    sizes = {args[0].numel() * 4 for name, args, _ in rec.ops if name == "sum"}
    assert sizes == {max(200 * MiB, 256 * MiB - WRITTEN[harness])}
    assert cleanflush.flush_counts() == {(harness, "write-read"): 3}


def expected_rows(harness, detail, patched):
    target = f"{MODULES[harness]}.{FUNCTIONS[harness]}"
    return [cleanflush._state.TargetStatus(target, harness, None, patched, detail)]  # not installed: no version


@pytest.mark.parametrize("harness, commit", [("kernelbench", "KernelBench 0de4ce8"),
                                             ("sol-execbench", "SOL-ExecBench 2f55c0f"),
                                             ("deep-ep", "DeepEP 855fa9d")])
def test_status_rows_through_a_harness_life(stand_ins, harness, commit):
    from cleanflush.patches import TARGETS

    target = next(t for t in TARGETS if t.NAME == harness)
    assert target.HOOKS == (MODULES[harness],)
    patched = f"the flush its benchmarks call; checked against {commit}'s layout"
    assert target.status() == expected_rows(harness, patched, True)
    cleanflush.uninstall()
    assert target.status() == expected_rows(harness, "uninstalled", False)
    cleanflush.install()
    module = importlib.import_module(MODULES[harness])
    stock = vars(module).pop(FUNCTIONS[harness]).__wrapped__
    try:  # a version of the harness without the function: stock, and said
        # the function went away under our wrapper: said once, and uninstall goes on
        with pytest.warns(RuntimeWarning, match=rf"^cleanflush: {MODULES[harness]}\.{FUNCTIONS[harness]} was "
                                                r"wrapped again after cleanflush \(or replaced\)"):
            cleanflush.uninstall()
        cleanflush.install()
        gone = f"unsupported: {MODULES[harness]} has no function {FUNCTIONS[harness]}; stock flush kept"
        assert target.status() == expected_rows(harness, gone, False)
    finally:
        setattr(module, FUNCTIONS[harness], stock)


@pytest.mark.parametrize("harness", list(MODULES))
def test_status_of_a_harness_that_is_not_installed(harness):
    from cleanflush.patches import TARGETS

    assert MODULES[harness] not in sys.modules
    target = next(t for t in TARGETS if t.NAME == harness)
    assert target.status() == expected_rows(harness, f"{harness} is not installed", False)


def test_keyword_calls_reach_the_stock_function_unchanged(stand_ins):
    kernelbench = importlib.import_module("kernelbench.timing")
    deep_ep = importlib.import_module("deep_ep.utils.testing")
    sol = importlib.import_module("sol_execbench.core.bench.timing")
    _flush.prepare(torch.device("cpu"))
    cache = torch.ones(64, dtype=torch.int8)
    with OpRecorder() as rec:
        kernelbench.clear_l2_cache(device="cpu")
        deep_ep.flush_l2_cache(enabled=True)
        deep_ep.flush_l2_cache(enabled=False)  # no flush asked for: none, and not counted
        sol._clear_cache(cache=cache)
    assert rec.names == ["empty", "fill_", "sum", "empty", "zero_", "sum", "zero_", "sum"]
    assert int(cache.sum()) == 0
    assert cleanflush.flush_counts() == {("kernelbench", "write-read"): 1, ("deep-ep", "write-read"): 1,
                                         ("sol-execbench", "write-read"): 1}
    with pytest.raises(TypeError):  # a call the stock function refuses is refused the same way
        sol._clear_cache(cache, "extra")


def test_where_each_harness_flushes(monkeypatch):
    # the device and bytes each harness's call asks for; CUDA's current device stood in for
    from cleanflush.patches import deep_ep, kernelbench, sol_execbench

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 2)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    cuda = torch.device
    assert kernelbench._where((), {}) == (cuda("cuda", 2), 256 * MiB)  # its default: "cuda"
    assert kernelbench._where(("cuda",), {}) == (cuda("cuda", 2), 256 * MiB)
    assert kernelbench._where(("cuda:1",), {}) == (cuda("cuda", 1), 256 * MiB)
    assert kernelbench._where((), {"device": "cpu"}) == (cuda("cpu"), 256 * MiB)
    assert kernelbench._where((cuda("cuda", 3),), {}) == (cuda("cuda", 3), 256 * MiB)
    assert deep_ep._where((), {}) == (cuda("cuda", 2), int(256e6))
    assert deep_ep._where((True,), {}) == (cuda("cuda", 2), int(256e6))
    assert deep_ep._where((False,), {}) is None and deep_ep._where((), {"enabled": False}) is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert deep_ep._where((), {"enabled": True}) == (cuda("cpu"), int(256e6))
    cache = torch.zeros(1000, dtype=torch.int8)
    assert sol_execbench._where((cache,), {}) == (cache.device, 1000)
    assert sol_execbench._where((), {"cache": cache.view(torch.int32)}) == (cache.device, 1000)
    assert sol_execbench._where((cache, 1), {}) is None  # not the call it makes: stock
    assert sol_execbench._where(("not a tensor",), {}) is None


def test_a_module_function_target_of_its_own(monkeypatch):
    # the helper every module-function harness is built from, on a module made here
    import types as pytypes

    from cleanflush.patches._function import ModuleFunction

    module = pytypes.ModuleType("x_harness.timing")
    calls = []

    def flush(cache, *, note="stock"):
        calls.append(note)
        cache.zero_()

    module.flush = flush
    monkeypatch.setitem(sys.modules, "x_harness.timing", module)
    # its distribution: one that is installed here (wrapt), so its version shows in status
    target = ModuleFunction("x-harness", "wrapt", "x_harness.timing", "flush",
                            lambda args, kwargs: (args[0].device, 64), "checked against nothing")
    assert (target.NAME, target.PACKAGE, target.HOOKS, target.target) == (
        "x-harness", "wrapt", ("x_harness.timing",), "x_harness.timing.flush")
    version = importlib.metadata.version("wrapt")
    assert target.status() == [cleanflush._state.TargetStatus(
        "x_harness.timing.flush", "x-harness", version, False, "not imported yet; patched when it is")]
    target.apply()
    try:
        assert target.status() == [cleanflush._state.TargetStatus(
            "x_harness.timing.flush", "x-harness", version, True, "the flush its benchmarks call; checked against nothing")]
        cache = torch.ones(16, dtype=torch.int32)
        _flush.prepare(cache.device)
        with OpRecorder() as rec:
            module.flush(cache, note="kw")
        assert calls == ["kw"] and rec.names == ["zero_", "sum"]
        assert cleanflush.flush_counts() == {("x-harness", "write-read"): 1}
        sizes = [args[0].numel() * 4 for name, args, _ in rec.ops if name == "sum"]
        assert sizes == [256 * MiB - 64]  # what the where function said was written
    finally:
        target.revert()
    assert module.flush is flush
    assert target.status()[0].detail == "uninstalled"


def test_a_call_the_where_function_cannot_read_runs_stock(monkeypatch):
    import types as pytypes

    from cleanflush.patches._function import ModuleFunction

    module = pytypes.ModuleType("y_harness")
    module.flush = lambda cache: cache.zero_()
    monkeypatch.setitem(sys.modules, "y_harness", module)

    def unreadable(args, kwargs):
        raise KeyError("a layout we do not know")

    target = ModuleFunction("y-harness", "wrapt", "y_harness", "flush", unreadable, "checked against nothing")
    target.apply()
    try:
        cache = torch.ones(16, dtype=torch.int32)
        with OpRecorder() as rec:
            module.flush(cache)
        assert rec.names == ["zero_"] and cleanflush.flush_counts() == {}
    finally:
        target.revert()


def test_a_version_without_the_function_says_so_with_its_version(monkeypatch):
    import types as pytypes

    from cleanflush.patches._function import ModuleFunction

    monkeypatch.setitem(sys.modules, "z_harness", pytypes.ModuleType("z_harness"))
    target = ModuleFunction("z-harness", "wrapt", "z_harness", "flush", lambda a, k: None, "checked")
    target.apply()
    assert target.status() == [cleanflush._state.TargetStatus(
        "z_harness.flush", "z-harness", importlib.metadata.version("wrapt"), False,
        "unsupported: z_harness has no function flush; stock flush kept")]
