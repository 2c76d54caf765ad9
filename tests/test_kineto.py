"""DeepGEMM's and SGLang's ``bench_kineto`` (FlashInfer's copy runs for real in
tests/test_flashinfer.py).  Neither installs on CPU from the package index (DeepGEMM is
git-only and compiles at import; SGLang's package pulls a serving stack), so each is a
stand-in (tests/standins.py, with the commits read): the signature, the first unflushed
call, and the 8 GB inline write before each profiled call.  Their import orders, restore,
disable and status rows are in tests/test_contract.py.
"""

import importlib
import sys

import pytest
import torch
import wrapt

import cleanflush
from cleanflush.patches import deep_gemm, sglang

from .conftest import run_python, write_stand_ins
from .ops import OpRecorder, SmallCudaWrites
from .standins import KINETO

TARGETS = {"deep-gemm": (deep_gemm, "deep_gemm.testing.bench"), "sglang": (sglang, "sglang.srt.bench_utils")}


@pytest.fixture
def stand_ins(tmp_path, monkeypatch):
    write_stand_ins(tmp_path, KINETO)
    monkeypatch.syspath_prepend(str(tmp_path))
    for patch in (deep_gemm, sglang):
        monkeypatch.setattr(patch.TARGET, "device", lambda: torch.device("cpu"))
    for module in ("deep_gemm.testing", "sglang.srt.bench_utils"):
        importlib.import_module(module)
    # an import hook fires once per module name, and these are imported anew for every
    # test: install again, which patches what is loaded (the autoload test below checks
    # the hook itself, in a fresh interpreter)
    cleanflush.uninstall()
    cleanflush.install()
    yield tmp_path
    for name in list(sys.modules):
        if name.split(".")[0] in ("deep_gemm", "sglang"):
            del sys.modules[name]


def ops(bench_kineto, policy, **kwargs):
    x = torch.ones(8)
    with cleanflush.policy(policy), OpRecorder() as rec, SmallCudaWrites():
        assert bench_kineto(lambda: torch.neg(x), ("nvjet", "reduce"), num_tests=3, **kwargs) == 1
    return [name for name in rec.names if name in ("empty", "zero_", "sum", "neg")]


@pytest.mark.parametrize("harness", list(TARGETS))
def test_the_read_runs_between_the_write_and_each_call(stand_ins, harness):
    patch, module = TARGETS[harness]
    bench_kineto = importlib.import_module(module).bench_kineto
    assert ops(bench_kineto, "write-read") == ["neg"] + ["empty", "zero_", "sum", "neg"] * 6
    assert ops(bench_kineto, "write") == ["neg"] + ["empty", "zero_", "neg"] * 6
    assert ops(bench_kineto, "write-read", flush_l2=False) == ["neg"] * 7
    assert cleanflush.flush_counts() == {(harness, "write-read"): 6}


def test_deep_gemm_tests_get_the_patched_name_through_the_star_import(stand_ins):
    from deep_gemm.testing import bench_kineto  # as DeepGEMM's tests import it

    bench = importlib.import_module("deep_gemm.testing.bench")
    stock = vars(bench)["bench_kineto"].__wrapped__
    assert isinstance(bench_kineto, wrapt.FunctionWrapper) and bench_kineto.__wrapped__ is stock
    assert ops(bench_kineto, "write-read") == ["neg"] + ["empty", "zero_", "sum", "neg"] * 6
    cleanflush.uninstall()
    testing = sys.modules["deep_gemm.testing"]
    assert vars(testing)["bench_kineto"] is stock and vars(bench)["bench_kineto"] is stock


def test_a_fresh_interpreter_with_the_autoload_patches_deep_gemm(stand_ins):
    child = run_python(
        """
        import sys; sys.path.insert(0, %r)
        import torch
        from deep_gemm.testing import bench_kineto
        import deep_gemm.testing.bench as bench, cleanflush
        print(type(bench_kineto).__name__, bench_kineto is bench.bench_kineto)
        cleanflush.uninstall()  # the star import copied our wrapper: the stock one goes back
        print(sys.modules["deep_gemm.testing"].bench_kineto is bench.bench_kineto is bench_kineto.__wrapped__)
    """
        % str(stand_ins),
        env={"CLEANFLUSH": "1"},
    )
    assert child.stdout.split() == ["FunctionWrapper", "True", "True"], child.stderr


def test_a_signature_without_flush_l2_runs_stock_and_says_so(stand_ins):
    def bench_kineto(fn, kernel_names):
        fn()
        return 1

    wrapper = wrapt.FunctionWrapper(bench_kineto, sglang.TARGET._wrapper)
    with pytest.warns(RuntimeWarning, match="runs stock: its signature has no fn or flush_l2; its stock flush runs"):
        assert wrapper(lambda: None, "nvjet") == 1


def test_a_name_bound_before_a_reinstall_flushes_again(stand_ins):
    """DeepGEMM's tests bind ``bench_kineto`` once; uninstall then install (a fixture that
    resets cleanflush) must not leave them with a disabled wrapper."""
    from deep_gemm.testing import bench_kineto

    cleanflush.uninstall()
    assert ops(bench_kineto, "write-read") == ["neg"] + ["empty", "zero_", "neg"] * 6  # stock meanwhile
    cleanflush.install()
    assert ops(bench_kineto, "write-read") == ["neg"] + ["empty", "zero_", "sum", "neg"] * 6
    assert vars(sys.modules["deep_gemm.testing"])["bench_kineto"] is bench_kineto


def test_the_read_goes_to_the_current_cuda_device(monkeypatch):
    from cleanflush.patches import _kineto

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert _kineto.cuda_device() == torch.device("cuda", 3)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _kineto.cuda_device() is None  # no CUDA: the flush has no device to read on, and runs stock


def test_no_read_buffer_runs_stock_and_says_why(stand_ins, monkeypatch):
    from cleanflush import _read

    def unavailable(device):
        raise _read.ReadUnavailable("out of memory")

    monkeypatch.setattr(_read, "prepare", unavailable)
    bench_kineto = importlib.import_module("sglang.srt.bench_utils").bench_kineto
    with pytest.warns(RuntimeWarning, match=r"runs stock: no read buffer \(out of memory\)"):
        assert ops(bench_kineto, "write-read") == ["neg"] + ["empty", "zero_", "neg"] * 6
    assert cleanflush.flush_counts() == {}


def test_torchs_sum_in_place_of_the_read_kernel_runs_stock_on_cuda(stand_ins, monkeypatch):
    """Where the named kernel could not be built the read would be a reduce_kernel, which
    DeepGEMM's tests pick by 'reduce': the stock benchmark runs instead."""
    from cleanflush import _read

    buffer = _read.ReadBuffer(torch.zeros(4), torch.zeros(()), 0)  # no read kernel
    monkeypatch.setattr(_read, "prepare", lambda device: buffer)
    monkeypatch.setattr(sglang.TARGET, "device", lambda: torch.device("cuda", 0))
    bench_kineto = importlib.import_module("sglang.srt.bench_utils").bench_kineto
    with pytest.warns(RuntimeWarning, match="read kernel cleanflush_l2_sweep is unavailable"):
        assert ops(bench_kineto, "write-read") == ["neg"] + ["empty", "zero_", "neg"] * 6


def test_a_call_its_signature_rejects_is_the_stock_codes_error(stand_ins):
    bench_kineto = importlib.import_module("sglang.srt.bench_utils").bench_kineto
    with pytest.raises(TypeError, match="no_such_argument"):
        bench_kineto(lambda: None, "nvjet", no_such_argument=1)


def test_a_module_without_bench_kineto_says_so(monkeypatch):
    import types

    from cleanflush._state import Site

    module = types.ModuleType("sglang.srt.bench_utils")
    monkeypatch.setitem(sys.modules, "sglang.srt.bench_utils", module)
    assert sglang.apply() == [
        Site(
            "sglang.srt.bench_utils.bench_kineto",
            "unsupported",
            "sglang.srt.bench_utils has no bench_kineto; stock flush kept",
        )
    ]


def test_the_read_after_the_8_gb_write_is_2_l2(stand_ins):
    """After 8e9 bytes written the read is 2 x L2 (no stock-size top-up): no bytes on a CPU,
    which has no L2."""
    bench_kineto = importlib.import_module("sglang.srt.bench_utils").bench_kineto
    x = torch.ones(8)
    with OpRecorder() as rec, SmallCudaWrites():
        bench_kineto(lambda: torch.neg(x), "nvjet", num_tests=1)
    reads = [args[0] for name, args, _ in rec.ops if name == "sum"]
    assert len(reads) == 2 and all(read.numel() == 0 for read in reads)


def test_each_reason_to_run_stock_is_said(stand_ins, monkeypatch):
    bench_kineto = importlib.import_module("sglang.srt.bench_utils").bench_kineto
    with pytest.warns(RuntimeWarning) as said, SmallCudaWrites():
        bench_kineto(lambda: None, "sweep", num_tests=1)
        monkeypatch.setattr(sglang.TARGET, "device", lambda: torch.device("cuda", 0))
        from cleanflush import _read

        monkeypatch.setattr(_read, "prepare", lambda device: _read.ReadBuffer(torch.zeros(4), torch.zeros(()), 0))
        bench_kineto(lambda: None, "nvjet", num_tests=1)
    # said once per target (docs/environment.md); status keeps the first reason
    assert [str(w.message) for w in said] == [
        "cleanflush: sglang: sglang.srt.bench_utils.bench_kineto runs stock: the read kernel cleanflush_l2_sweep "
        "would match kernel name 'sweep'; its stock flush runs",
    ]
    [row] = [r for r in cleanflush.status() if r.target == "flushes in sglang"]
    assert "would match kernel name 'sweep'" in row.detail


def test_too_many_arguments_is_the_stock_codes_error(stand_ins):
    bench_kineto = importlib.import_module("sglang.srt.bench_utils").bench_kineto
    with pytest.raises(TypeError, match="positional arguments but 8 were given"):
        bench_kineto(lambda: None, "nvjet", 30, False, None, True, False, "one too many")


def test_rows_of_an_installed_harness(stand_ins, tmp_path, monkeypatch):
    from cleanflush import _registry, _targets

    dist = tmp_path / "sglang-0.5.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.1\n")
    _targets.version.cache_clear()
    try:
        cleanflush.uninstall()
        cleanflush.install()
        target = "sglang.srt.bench_utils.bench_kineto"
        rows = [r for r in cleanflush.status() if r.name == "sglang"]
        assert rows == [
            cleanflush.TargetStatus(
                "sglang",
                target,
                "0.5.1",
                "patched",
                "the read runs between its 8 GB write and each call; checked against SGLang 126a97f's layout",
            )
        ]
        cleanflush.uninstall()
        cleanflush._state.reset()
        del sys.modules["sglang.srt.bench_utils"]
        cleanflush.install()
        rows = [r for r in cleanflush.status() if r.name == "sglang"]
        assert [(r.version, r.state) for r in rows] == [("0.5.1", "pending")]  # installed, not imported yet
        assert _targets.version(_registry.BY_NAME["sglang"]) == "0.5.1"
    finally:
        _targets.version.cache_clear()
