"""``cleanflush.status()`` rows: what they say after uninstall, after one package is reverted,
before a target is imported, and the row schema the JSON outputs carry."""

import dataclasses
import json

import pytest
import torch
import wrapt

import cleanflush
from cleanflush import _state
from cleanflush.patches import inductor as inductor_patch
from cleanflush.patches import triton as triton_patch

from .conftest import run_python

triton = pytest.importorskip("triton")
pytest.importorskip("torch._inductor.runtime.benchmarking")
NVIDIA = "triton.backends.nvidia.driver.CudaDriver.clear_cache"


def rows():
    return {row.target: row for row in cleanflush.status()}


def test_after_uninstall_every_patched_row_says_uninstalled():
    # rows computed from others (TritonBenchmarker: through the triton driver) are not records
    computed = ("TritonBenchmarker.benchmark_gpu",)
    before = {name: row for name, row in rows().items() if row.patched and name not in computed}
    assert NVIDIA in before and "InductorBenchmarker.benchmark_gpu" in before
    cleanflush.uninstall()
    after = rows()
    for name, row in before.items():
        assert after[name] == _state.TargetStatus(row.target, row.package, row.version, False, "uninstalled")
    assert after["TritonBenchmarker.benchmark_gpu"].detail.endswith("its flush is not patched")


def test_reverting_one_package_leaves_the_others_rows():
    triton_patch.revert()
    after = rows()
    assert not after[NVIDIA].patched and after[NVIDIA].detail == "uninstalled"
    assert after["InductorBenchmarker.benchmark_gpu"].patched
    inductor_patch.revert()
    triton_patch.apply()
    after = rows()
    assert after[NVIDIA].patched and not after["InductorBenchmarker.benchmark_gpu"].patched


def test_a_target_not_imported_yet():
    version = triton.__version__
    row = _state.not_loaded_row("triton", "triton", version)
    assert row == _state.TargetStatus("triton", "triton", version, False, "not imported yet; patched when it is")
    cleanflush.uninstall()
    row = _state.not_loaded_row("triton", "triton", version)
    assert row == _state.TargetStatus("triton", "triton", version, False, "cleanflush is not installed")
    assert _state.not_loaded_row("x", "nothing", None) == _state.TargetStatus(
        "x", "nothing", None, False, "nothing is not installed")


def test_status_in_a_program_that_has_not_imported_torch_or_triton():
    child = run_python("""
        import json, cleanflush
        print(json.dumps([r.as_dict() for r in cleanflush.status()]))
        cleanflush.uninstall()
        print(json.dumps([r.as_dict() for r in cleanflush.status()]))
        """)
    installed, uninstalled = (json.loads(line) for line in child.stdout.splitlines())
    by_package = {r["package"]: r for r in installed}
    assert by_package["triton"] == {"target": "triton", "package": "triton", "version": triton.__version__,
                                    "patched": False, "detail": "not imported yet; patched when it is"}
    assert by_package["torch"]["version"] == torch.__version__ and not by_package["torch"]["patched"]
    assert all(not r["patched"] for r in installed + uninstalled)
    assert {r["detail"] for r in uninstalled if r["version"]} == {"cleanflush is not installed"}


def test_row_dicts_are_the_dataclass_fields():
    row = rows()[NVIDIA]
    assert row.as_dict() == dataclasses.asdict(row)
    assert list(row.as_dict()) == ["target", "package", "version", "patched", "detail"]


def test_a_foreign_wrapper_does_not_keep_a_dead_patch_alive():
    # uninstall under a foreign wrapper disables ours; install again must flush through a
    # live patch, not count the dead one as installed
    cls = triton.backends.backends["nvidia"].driver
    ours = vars(cls)["clear_cache"]
    wrapt.wrap_function_wrapper(cls, "clear_cache", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
    try:
        with pytest.warns(RuntimeWarning, match="wrapped again after cleanflush"):
            cleanflush.uninstall()
        cleanflush.install()
        cache = torch.zeros(16, dtype=torch.int32)
        object.__new__(cls).clear_cache(cache)
        assert cleanflush.flush_counts() == {("triton", "write-read"): 1}
    finally:
        cleanflush.uninstall()
        setattr(cls, "clear_cache", ours.__wrapped__)
        cleanflush.install()
