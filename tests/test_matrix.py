"""The version matrix's own check (matrix/check.py), on the torch and triton installed here:
CI runs the one pairing it has, so the checker cannot rot between matrix runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "matrix"))
import run as matrix  # noqa: E402

pytest.importorskip("triton")
pytest.importorskip("torch._inductor.runtime.benchmarking")


def test_the_matrix_check_passes_on_this_pairing():
    out = subprocess.run(
        [sys.executable, str(ROOT / "matrix" / "check.py")], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(out.stdout.strip().splitlines()[-1])
    assert matrix.checks(record).startswith("all pass"), record
    assert matrix.cell(record, "triton flush") == "patched"
    assert matrix.cell(record, "InductorBenchmarker") == "patched"


def test_the_judge_of_the_matrix_fails_a_wrong_sequence():
    # negative control: a record whose read never ran must not pass
    record = {
        "restored_exactly": True,
        "rewrapped": True,
        "env_switch_matches": True,
        "errors": [],
        "sequences": {"triton.backends.nvidia.driver.CudaDriver | write-read": ["zero_"]},
    }
    assert matrix.checks(record) == "FAIL: sequence triton.backends.nvidia.driver.CudaDriver | write-read"


def test_the_findings_list_the_targets_a_record_marks_unsupported():
    """Rows carry ``state`` (and a detail without it) since the target registry: an unsupported
    target is a finding and an unsupported cell; one not in that torch is absent, not a finding."""
    unsupported = {
        "target": "torch._inductor.utils._do_bench_using_profiling",
        "state": "unsupported",
        "patched": False,
        "detail": "torch < 2.10 inlines the flush in do_bench_using_profiling; stock flush kept",
    }
    missing = {
        "target": "InductorBenchmarker.benchmark_gpu",
        "state": "unsupported",
        "patched": False,
        "detail": "not in this torch (added in 2.7)",
    }
    not_installed = {"target": "tilelang.profiler", "state": "absent", "patched": False, "detail": "not installed"}
    record = {"targets": [unsupported, missing, not_installed]}
    assert matrix.reasons(record) == [f"{unsupported['target']}: {unsupported['detail']}"]
    assert matrix.cell(record, "_do_bench_using_profiling") == "unsupported"
    assert matrix.cell(record, "InductorBenchmarker") == "absent"
