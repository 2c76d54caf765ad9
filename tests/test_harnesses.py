"""Harnesses whose flush is a module function (KernelBench, SOL-ExecBench, DeepEP), on CPU.

None of them installs from the package index (git-only), so each is a stand-in module that
reproduces the real layout (tests/standins.py, with the commit each was read at): the flush
function's name, signature and body, and a benchmark loop that looks it up as a module
global before each timed call, as the real one does.  Their import orders, exact restore,
disable and status rows are in tests/test_contract.py.
"""

import importlib
import importlib.metadata
import sys

import pytest
import torch

import cleanflush
from cleanflush import _flush, _read

from .conftest import run_python, write_stand_ins
from .ops import OpRecorder, overlaps
from .standins import MODULE_FUNCTIONS

MODULES = {
    "kernelbench": "kernelbench.timing",
    "sol-execbench": "sol_execbench.core.bench.timing",
    "deep-ep": "deep_ep.utils.testing",
}
FUNCTIONS = {"kernelbench": "clear_l2_cache", "sol-execbench": "_clear_cache", "deep-ep": "flush_l2_cache"}
BENCH = {
    "kernelbench": lambda m, fn: m.time_execution_with_cuda_event(fn, (), device="cpu"),
    "sol-execbench": lambda m, fn: m.bench_time_with_cuda_events(fn, device="cpu"),
    "deep-ep": lambda m, fn: m.bench(fn),
}
STOCK_OPS = {"kernelbench": ["empty", "fill_"], "sol-execbench": ["zero_"], "deep-ep": ["empty", "zero_"]}
SETUP_OPS = {"sol-execbench": ["empty"]}  # its cache, allocated once before the loop


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    write_stand_ins(tmp_path, MODULE_FUNCTIONS)
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


def test_deep_ep_flush_switched_off_stays_off(stand_ins):
    module = importlib.import_module("deep_ep.utils.testing")
    with OpRecorder() as rec:
        module.bench(lambda: None, flush_l2=False)
    assert rec.names == []
    assert cleanflush.flush_counts() == {}


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
        {"CLEANFLUSH": "1"},
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "[(('kernelbench', 'write-read'), 3), (('sol-execbench', 'write-read'), 3)]"


MiB = 1 << 20
# bytes each harness's stock flush writes (its own constant or its cache), and so what the
# read after it covers under a 100 MiB L2: max(2 x L2, 256 MiB - written)
WRITTEN = {"kernelbench": 256 * MiB, "sol-execbench": 2 * MiB, "deep-ep": int(256e6) // 4 * 4}


@pytest.mark.parametrize("harness", list(MODULES))
def test_the_read_is_sized_from_what_the_harness_wrote(stand_ins, harness, monkeypatch):
    monkeypatch.setattr(_read, "l2_bytes", lambda device: 100 * MiB)
    _flush.release()
    names, rec = bench_ops(harness, "write-read")
    sizes = {args[0].numel() * 4 for name, args, _ in rec.ops if name == "sum"}
    assert sizes == {max(200 * MiB, 256 * MiB - WRITTEN[harness])}
    assert cleanflush.flush_counts() == {(harness, "write-read"): 3}


def rows_of(harness):
    return [(r.target, r.state, r.detail) for r in cleanflush.status() if r.name == harness]


@pytest.mark.parametrize(
    "harness, commit",
    [("kernelbench", "KernelBench 0de4ce8"), ("sol-execbench", "SOL-ExecBench 2f55c0f"), ("deep-ep", "DeepEP 855fa9d")],
)
def test_status_rows_name_the_commit_and_a_version_without_the_function(stand_ins, harness, commit):
    target = f"{MODULES[harness]}.{FUNCTIONS[harness]}"
    patched = f"the flush its benchmarks call; checked against {commit}'s layout"
    assert rows_of(harness) == [(target, "patched", patched)]
    module = importlib.import_module(MODULES[harness])
    stock = vars(module).pop(FUNCTIONS[harness]).__wrapped__
    try:  # a version of the harness without the function: stock, and said
        # the function went away under our wrapper: said once, and uninstall goes on
        with pytest.warns(
            RuntimeWarning,
            match=rf"^cleanflush: {MODULES[harness]}\.{FUNCTIONS[harness]} was "
            r"wrapped again after cleanflush \(or replaced\)",
        ):
            cleanflush.uninstall()
        cleanflush.install()
        gone = f"{MODULES[harness]} has no function {FUNCTIONS[harness]}; stock flush kept"
        assert rows_of(harness) == [(target, "unsupported", gone)]
    finally:
        setattr(module, FUNCTIONS[harness], stock)


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
    assert cleanflush.flush_counts() == {
        ("kernelbench", "write-read"): 1,
        ("deep-ep", "write-read"): 1,
        ("sol-execbench", "write-read"): 1,
    }
    # a call the stock function refuses is refused the same way, the fallback said once
    with pytest.warns(RuntimeWarning, match="called in a way cleanflush does not know"), pytest.raises(TypeError):
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
    for args in ((cache, 1), ("not a tensor",)):  # not the call it makes: stock, said by the wrapper
        with pytest.raises(TypeError, match="not _clear_cache\\(cache\\) with a tensor"):
            sol_execbench._where(args, {})


def test_a_module_function_target_of_its_own(monkeypatch):
    # the helper every module-function harness is built from, on a module made here
    import types as pytypes

    from cleanflush._state import Site
    from cleanflush.patches._function import ModuleFunction

    module = pytypes.ModuleType("x_harness.timing")
    calls = []

    def flush(cache, *, note="stock"):
        calls.append(note)
        cache.zero_()

    module.flush = flush
    target = ModuleFunction(
        "x-harness", "x_harness.timing", "flush", lambda args, kwargs: (args[0].device, 64), "checked against nothing"
    )
    assert target.apply() == []  # not imported: nothing to say
    monkeypatch.setitem(sys.modules, "x_harness.timing", module)
    assert target.apply() == [
        Site("x_harness.timing.flush", "patched", "the flush its benchmarks call; checked against nothing")
    ]
    try:
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


def test_a_call_the_where_function_cannot_read_runs_stock_said_once_and_counted(monkeypatch, recwarn):
    import types as pytypes

    from cleanflush.patches._function import ModuleFunction

    module = pytypes.ModuleType("y_harness")
    module.flush = lambda cache: cache.zero_()
    monkeypatch.setitem(sys.modules, "y_harness", module)

    def unreadable(args, kwargs):
        raise KeyError("a layout we do not know")

    target = ModuleFunction("y-harness", "y_harness", "flush", unreadable, "checked against nothing")
    target.apply()
    try:
        cache = torch.ones(16, dtype=torch.int32)
        with OpRecorder() as rec:
            module.flush(cache)
            module.flush(cache)
        assert rec.names == ["zero_", "zero_"] and cleanflush.flush_counts() == {("y-harness", "write"): 2}
    finally:
        target.revert()
    why = "y_harness.flush was called in a way cleanflush does not know (KeyError('a layout we do not know'))"
    assert [str(w.message) for w in recwarn] == [f"cleanflush: y-harness: {why}; its stock flush runs"]


def test_a_version_without_the_function_says_so(monkeypatch):
    import types as pytypes

    from cleanflush._state import Site
    from cleanflush.patches._function import ModuleFunction

    monkeypatch.setitem(sys.modules, "z_harness", pytypes.ModuleType("z_harness"))
    target = ModuleFunction("z-harness", "z_harness", "flush", lambda a, k: None, "checked")
    assert target.apply() == [
        Site("z_harness.flush", "unsupported", "z_harness has no function flush; stock flush kept")
    ]
