"""Harnesses that are scripts' own top-level modules (GPU MODE's ``utils``, TileGym's
``bench_utils``, ThunderKittens' ``common``) and the CuTe DSL's driver memset, on CPU.

The scripts are stand-ins of the real files at the commits tests/standins.py names; the CuTe
DSL's timer is the real ``cutlass.testing`` where nvidia-cutlass-dsl installs (harness
tests), and a driver of our own below, which records its memsets, everywhere.  Import
orders, exact restore, disable and status rows are in tests/test_contract.py.
"""

import contextlib
import importlib
import inspect
import re
import sys
import textwrap
import types

import pytest
import torch

import cleanflush
from cleanflush import _flush, _read
from cleanflush.patches import cute_dsl, gpu_mode
from cleanflush.patches._tensor import flushing_tensor

from .conftest import run_python, write_stand_ins
from .ops import OpRecorder, overlaps
from .standins import SCRIPTS

MiB = 1 << 20
# the problem sets' copy of GPU MODE's flush (problems/pmpp_v2/utils.py at f83cb92): 256 MiB
PROBLEM_SET_FLUSH = """
    def clear_l2_cache():
        dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device=DEVICE)
        dummy.fill_(42)
        del dummy
"""


@pytest.fixture
def scripts(tmp_path, monkeypatch):
    files = dict(SCRIPTS)
    gpu_mode_utils = textwrap.dedent(SCRIPTS["utils.py"]).replace('DEVICE = "cuda"', 'DEVICE = "cpu"')
    files["utils.py"] = gpu_mode_utils + textwrap.dedent(PROBLEM_SET_FLUSH)
    write_stand_ins(tmp_path, files)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(_read, "l2_bytes", lambda device: MiB)  # the stand-ins' L2 (bench_utils.L2)
    _flush.release()
    modules = {name: importlib.import_module(name) for name in ("utils", "bench_utils", "common")}
    cleanflush.uninstall()  # each test imports them anew: install patches what is loaded
    cleanflush.install()
    yield modules
    for name in modules:
        sys.modules.pop(name, None)


def ops_of(call, policy):
    with cleanflush.policy(policy), OpRecorder() as rec:
        call()
    return [name for name in rec.names if name != "neg"], rec


POLICIES = ["write-read", "read", "write"]


@pytest.mark.parametrize("policy", POLICIES)
def test_thunderkittens_buffer_flushes_through_its_random_(scripts, policy):
    x = torch.ones(4)
    names, rec = ops_of(lambda: scripts["common"].benchmark_l2_clear(lambda: torch.neg(x), num_iters=3), policy)
    write = ["random_"]
    per_call = {"write-read": write + ["sum"], "read": ["sum"], "write": write}[policy]
    assert names == ["empty"] + per_call * 3
    if policy != "write":
        cache = next(args[0] for name, args, _ in rec.ops if name == "random_") if policy == "write-read" else None
        read = next(args[0] for name, args, _ in rec.ops if name == "sum")
        assert read.dtype == torch.float32 and (cache is None or not overlaps(read, cache))
        # after 128 MiB written, what is left of the stock 256 MiB (more than 2 x the 1 MiB L2)
        assert read.numel() * 4 == (256 - (128 if policy == "write-read" else 0)) * MiB
    assert cleanflush.flush_counts() == {("thunderkittens", policy): 3}


@pytest.mark.parametrize("policy", POLICIES)
def test_tilegym_buffer_of_one_l2_is_the_flush(scripts, policy):
    names, _ = ops_of(lambda: scripts["bench_utils"].profile_with_l2flush(lambda: None, warmup=1, rep=3), policy)
    per_call = {"write-read": ["zero_", "sum"], "read": ["sum"], "write": ["zero_"]}[policy]
    assert names == ["empty"] + per_call * 3
    assert cleanflush.flush_counts() == {("tilegym", policy): 3}


def test_tilegym_buffer_of_another_size_runs_stock_said_once(scripts, recwarn):
    scripts["bench_utils"].L2 = 2 * MiB  # not the device's L2: not a buffer cleanflush knows
    for _ in range(2):
        names, _ = ops_of(lambda: scripts["bench_utils"].profile_with_l2flush(lambda: None, warmup=0, rep=2), "read")
        assert names == ["empty", "zero_", "zero_"]
    said = [str(w.message) for w in recwarn if "cleanflush" in str(w.message)]
    assert len(said) == 1 and "bench_utils.profile_with_l2flush made no flush buffer" in said[0]
    assert cleanflush.flush_counts() == {}
    assert [(r.target, r.state) for r in cleanflush.status() if r.name == "tilegym"] == [
        ("bench_utils.profile_with_l2flush", "unsupported")
    ]


@pytest.mark.parametrize("policy", POLICIES)
def test_gpu_mode_flush_is_followed_by_a_read_of_2_l2(scripts, policy, monkeypatch):
    monkeypatch.setattr(gpu_mode, "written_on", lambda: torch.device("cpu"))
    names, rec = ops_of(lambda: [scripts["utils"].clear_l2_cache() for _ in range(2)], policy)
    per_call = {"write-read": ["empty", "fill_", "sum"], "read": ["sum"], "write": ["empty", "fill_"]}[policy]
    assert names == per_call * 2
    sizes = {args[0].numel() * 4 for name, args, _ in rec.ops if name == "sum"}
    assert sizes == ({2 * MiB} if policy == "write-read" else {256 * MiB} if policy == "read" else set())
    assert cleanflush.flush_counts() == {("gpu-mode", policy): 2}


def test_gpu_mode_without_cuda_runs_stock_said_once(scripts, recwarn):
    assert gpu_mode.written_on() is None  # the CPU torch of the tests
    for _ in range(2):
        names, _ = ops_of(scripts["utils"].clear_l2_cache, "write-read")
        assert names == ["empty", "fill_"]
    said = [str(w.message) for w in recwarn if "cleanflush" in str(w.message)]
    assert said == ["cleanflush: gpu-mode: it flushed with no CUDA device to read on; its stock flush runs"]
    assert cleanflush.flush_counts() == {("gpu-mode", "write"): 2}


@pytest.mark.parametrize(
    "body",
    [
        "def clear_l2_cache():\n    pass\n",  # no set_seed: some other script's utils
        "def set_seed(seed=42):\n    pass\n\ndef clear_l2_cache(n):\n    pass\n",  # a flush that takes arguments
    ],
)
def test_a_utils_module_that_is_not_gpu_modes_is_left_alone(tmp_path, body):
    (tmp_path / "utils.py").write_text(body)
    child = run_python(
        f"""
        import sys; sys.path.insert(0, {str(tmp_path)!r})
        import cleanflush, utils
        print(type(utils.clear_l2_cache).__name__, [r.state for r in cleanflush.status() if r.name == "gpu-mode"])
        """,
        args=("-W", "error"),
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["function", "['pending']"]


def test_the_scripts_are_patched_by_the_autoload_in_a_spawned_child(tmp_path):
    # GPU MODE's eval.py benchmarks in a "spawn" pool, binding the flush by name at import
    write_stand_ins(tmp_path, {**SCRIPTS, "utils.py": SCRIPTS["utils.py"].replace('"cuda"', '"cpu"')})
    (tmp_path / "eval.py").write_text(
        textwrap.dedent(
            """
            import multiprocessing
            from utils import set_seed, clear_l2_cache

            def run(_):
                import cleanflush
                return type(clear_l2_cache).__name__, [r.state for r in cleanflush.status() if r.name == "gpu-mode"]

            if __name__ == "__main__":
                with multiprocessing.get_context("spawn").Pool(1) as pool:
                    print(*pool.map(run, [0]))
            """
        )
    )
    child = run_python(
        f"import runpy, sys; sys.path.insert(0, {str(tmp_path)!r}); "
        f"runpy.run_path({str(tmp_path / 'eval.py')!r}, run_name='__main__')",
        {"CLEANFLUSH": "1"},
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "('FunctionWrapper', ['patched', 'patched'])"  # both of its flushes


class Driver:
    """The part of ``cuda.bindings.driver`` that ``cutlass.testing`` flushes through."""

    class CUresult:
        CUDA_SUCCESS = "CUDA_SUCCESS"

    def __init__(self):
        self.memsets = []

    def cuMemsetD32Async(self, ptr, value, count, stream):  # noqa: N802
        self.memsets.append((ptr, value, count, stream))
        return (self.CUresult.CUDA_SUCCESS,)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_cute_dsl_memset_is_the_flush_on_its_stream(policy, monkeypatch):
    streams = []

    @contextlib.contextmanager
    def on(handle):
        streams.append(handle)
        yield

    monkeypatch.setattr(cute_dsl, "where", lambda handle: (torch.device("cpu"), on(handle)))
    monkeypatch.setattr(_read, "l2_bytes", lambda device: 4 * MiB)
    _flush.release()
    driver = Driver()
    proxy = cute_dsl.FlushingDriver(driver)
    with cleanflush.policy(policy), OpRecorder() as rec:
        results = [proxy.cuMemsetD32Async(1234, 0, MiB, 77) for _ in range(2)]  # 4 MiB, as its L2
    assert results == [(Driver.CUresult.CUDA_SUCCESS,)] * 2
    assert driver.memsets == ([] if policy == "read" else [(1234, 0, MiB, 77)] * 2)
    reads = [args[0].numel() * 4 for name, args, _ in rec.ops if name == "sum"]
    assert reads == ([] if policy == "write" else [{"write-read": 252, "read": 256}[policy] * MiB] * 2)
    assert streams == ([] if policy == "write" else [77, 77]) or policy == "write"
    assert cleanflush.flush_counts() == {("cute-dsl", policy): 2}
    assert proxy.CUresult is Driver.CUresult and proxy.__wrapped__ is driver


def test_a_cute_dsl_memset_with_no_cuda_to_read_on_runs_stock_said_once(recwarn):
    driver = Driver()
    proxy = cute_dsl.FlushingDriver(driver)
    for _ in range(2):
        assert proxy.cuMemsetD32Async(1, 0, 8, 0) == (Driver.CUresult.CUDA_SUCCESS,)
    assert driver.memsets == [(1, 0, 8, 0)] * 2
    said = [str(w.message) for w in recwarn if "cleanflush" in str(w.message)]
    assert len(said) == 1 and said[0].startswith("cleanflush: cute-dsl: its memset could not be followed by the read")
    assert cleanflush.flush_counts() == {("cute-dsl", "write"): 2}


@pytest.mark.harness
def test_the_real_cute_dsl_flushes_through_the_proxy_with_the_arguments_it_reads():
    testing = pytest.importorskip("cutlass.testing")
    import cuda.bindings.driver as real

    assert isinstance(vars(testing)["cuda_driver"], cute_dsl.FlushingDriver)
    assert testing.cuda_driver.__wrapped__ is real
    # both flushes pass (pointer, value, count, stream) by position, as the proxy reads them
    source = inspect.getsource(testing)
    calls = re.findall(r"cuda_driver\.cuMemsetD32Async\(\s*(\w+), (\w+), int\([^)]*\), (\w+)\s*\)", source)
    assert [call[:2] for call in calls] == [("cache_ptr", "0")] * 2, calls
    assert "cuda_driver.cuMemsetD32Async" in inspect.getsource(testing._benchmark_for_autotune)
    cleanflush.uninstall()
    assert vars(testing)["cuda_driver"] is real


def test_a_module_copy_of_the_driver_gets_a_proxy_and_loses_it_exactly():
    module = types.ModuleType("cutlass.testing")
    driver = module.cuda_driver = Driver()
    sys.modules["cutlass.testing"] = module
    try:
        sites = cute_dsl.apply()
        proxy = module.cuda_driver
        assert [s.state for s in sites] == ["patched"] and proxy.__wrapped__ is driver
        cute_dsl.apply()  # once per trigger: idempotent
        assert module.cuda_driver is proxy
        cute_dsl.revert()
        assert module.cuda_driver is driver
        cute_dsl.apply()
        assert module.cuda_driver is proxy  # the same proxy again
        cute_dsl.revert()
        module.cuda_driver = object()  # a layout without the memset
        assert [(s.state, s.detail) for s in cute_dsl.apply()] == [
            ("unsupported", "cutlass.testing has no cuda_driver with cuMemsetD32Async; stock flush kept")
        ]
    finally:
        del sys.modules["cutlass.testing"]


@pytest.mark.parametrize("policy", POLICIES)
def test_a_one_kernel_flushing_tensor_off_cuda_flushes_as_any_other(policy, recwarn):
    # no device timeline to leave a gap on: the flush of every other flushing tensor, unsaid
    monkeypatch_l2 = pytest.MonkeyPatch()
    monkeypatch_l2.setattr(_read, "l2_bytes", lambda device: MiB)
    _flush.release()
    try:
        cache = torch.full((1024,), 3, dtype=torch.int32)
        flushing = flushing_tensor(cache, "tilelang", one_kernel=True)
        names, _ = ops_of(lambda: flushing.zero_(), policy)
    finally:
        monkeypatch_l2.undo()
    assert names == {"write-read": ["zero_", "sum"], "read": ["sum"], "write": ["zero_"]}[policy]
    assert not [w for w in recwarn if "cleanflush" in str(w.message)]
    assert cleanflush.flush_counts() == {("tilelang", policy): 1}
