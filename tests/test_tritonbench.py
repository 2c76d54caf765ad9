"""tritonbench's profiler timer drops our read kernel as it drops the stock fill kernel.

tritonbench installs only from git, so each layout of its do_bench module is a stand-in
(tests/standins.py) that reproduces the part that matters: the kernel-name filter of
``_do_bench_profiler``'s trace handler, a module global looked up at call time, in both
layouts.  The timers that zero ``cache.zero_`` are in tests/test_triton_patch.py; the
contract of every target (orders, restore, disable, status) in tests/test_contract.py.
"""

import importlib
import sys
import textwrap

import pytest
import wrapt

import cleanflush
from cleanflush.patches import tritonbench as patch

from .standins import FILL, TRITONBENCH_EXACT, TRITONBENCH_SUBSTRING

SUM = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::func_wrapper<float, ...>>>"
GEMM = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT"
STOCK: dict = {}


@pytest.fixture(params=["exact", "substring"])
def run_module(request, tmp_path, monkeypatch):
    folder = tmp_path / "tritonbench" / "components" / "do_bench"
    folder.mkdir(parents=True)
    for parent in (tmp_path / "tritonbench", tmp_path / "tritonbench" / "components", folder):
        (parent / "__init__.py").touch()
    (folder / "run.py").write_text(
        textwrap.dedent(TRITONBENCH_EXACT if request.param == "exact" else TRITONBENCH_SUBSTRING)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(patch.MODULE)
    cleanflush.uninstall()
    STOCK.clear()
    STOCK.update(vars(module))  # the exact objects uninstall must put back
    cleanflush.install()  # the hook fires once per name: patch what is loaded now
    yield request.param, module
    cleanflush.uninstall()
    for name in list(sys.modules):
        if name.split(".")[0] == "tritonbench":
            del sys.modules[name]
    cleanflush.install()


def test_the_profiler_timer_counts_only_the_kernel_under_test(run_module):
    layout, module = run_module
    trace = [FILL, "cleanflush_l2_sweep", GEMM] * 3
    assert module.counted(trace) == [GEMM] * 3
    assert module.counted([SUM, GEMM]) == [SUM, GEMM]  # torch's sum is not ours to drop
    row = {r.target: r for r in cleanflush.status()}[patch.TARGET]
    name = "_is_cache_clear_kernel" if layout == "substring" else "CACHE_CLEAR_KERNEL"
    assert row.patched and row.detail == f"its profiler timer drops the read kernel as it drops the stock fill ({name})"


def test_uninstall_restores_the_exact_objects(run_module):
    layout, module = run_module
    name = "_is_cache_clear_kernel" if layout == "substring" else "CACHE_CLEAR_KERNEL"
    patched = vars(module)[name]
    stock = STOCK[name]
    assert isinstance(patched, wrapt.FunctionWrapper if layout == "substring" else patch.AlsoTheRead)
    cleanflush.uninstall()
    assert vars(module)[name] is stock and type(module.CACHE_CLEAR_KERNEL) is str
    assert module.counted([FILL, "cleanflush_l2_sweep", GEMM]) == ["cleanflush_l2_sweep", GEMM]
    assert {r.target: r for r in cleanflush.status()}[patch.TARGET].state == "off"
    cleanflush.install()
    cleanflush.install()
    assert module.counted([FILL, "cleanflush_l2_sweep", GEMM]) == [GEMM]


def test_the_name_stays_a_string_everywhere_else():
    kernel = patch.AlsoTheRead(FILL)
    assert kernel == FILL and kernel == "cleanflush_l2_sweep" and kernel != GEMM
    assert not (kernel != "cleanflush_l2_sweep") and (kernel != GEMM)  # noqa: SIM202  (__ne__ itself)
    assert hash(kernel) == hash(FILL) and str(kernel) == FILL and kernel != 3
    assert (kernel == 3) is False


def test_a_layout_without_either_name_is_left_stock(monkeypatch):
    from cleanflush._state import Site

    module = type(sys)(patch.MODULE)
    monkeypatch.setitem(sys.modules, patch.MODULE, module)
    assert patch.apply() == [
        Site(
            patch.TARGET,
            "unsupported",
            "no CACHE_CLEAR_KERNEL or _is_cache_clear_kernel in this tritonbench; its profiler timer counts the read",
        )
    ]


def test_a_keyword_call_of_the_kernel_filter_reaches_it(run_module):
    layout, module = run_module
    if layout != "substring":
        pytest.skip("only the substring layout has the function")
    assert module._is_cache_clear_kernel(name=FILL) and module._is_cache_clear_kernel(name="cleanflush_l2_sweep")
    assert not module._is_cache_clear_kernel(name=GEMM)
    with pytest.raises(TypeError, match="missing 1 required positional argument"):  # the stock code's error
        module._is_cache_clear_kernel()


def test_a_constant_set_again_after_us_is_left_and_said_once(run_module, recwarn):
    layout, module = run_module
    if layout != "exact":
        pytest.skip("only the exact-name layout has the constant")
    module.CACHE_CLEAR_KERNEL = "something else"
    cleanflush.uninstall()
    assert module.CACHE_CLEAR_KERNEL == "something else"
    said = [str(w.message) for w in recwarn if "CACHE_CLEAR_KERNEL" in str(w.message)]
    assert said == [f"cleanflush: {patch.MODULE}.CACHE_CLEAR_KERNEL was set again after cleanflush; left as it is"]
    cleanflush.install()
    module.CACHE_CLEAR_KERNEL = "another"
    cleanflush.uninstall()  # this module again: not said again
    assert len([w for w in recwarn if "CACHE_CLEAR_KERNEL" in str(w.message)]) == 1
