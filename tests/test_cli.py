import json

import pytest

pytest.importorskip("triton")


def _run(args, env):
    import os
    import subprocess
    import sys

    child_env = dict(os.environ)
    child_env.pop("CLEANFLUSH", None)
    child_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "cleanflush", *args], env=child_env,
                          capture_output=True, text=True, timeout=300)


def test_status_table_lists_patched_triton_targets():
    out = _run(["status"], None)
    assert out.returncode == 0, out.stderr
    assert "installed (import), policy write-read" in out.stdout
    assert "triton.backends.nvidia.driver.CudaDriver.clear_cache" in out.stdout
    row = next(line for line in out.stdout.splitlines() if "CudaDriver.clear_cache" in line)
    assert " yes " in row


def test_status_json_matches_the_api():
    out = _run(["status", "--json"], {"CLEANFLUSH": "write-read"})
    data = json.loads(out.stdout)
    assert data["installed"] and data["policy"] == "write-read" and data["source"] == "autoload"
    targets = {t["target"]: t for t in data["targets"]}
    assert targets["triton.backends.nvidia.driver.CudaDriver.clear_cache"]["patched"]


def test_status_when_switched_off():
    out = _run(["status"], {"CLEANFLUSH": "0"})
    assert out.returncode == 0
    assert "NOT installed" in out.stdout
    assert "cleanflush is not installed" in out.stdout


def test_unknown_command_is_a_usage_error():
    out = _run(["frobnicate"], None)
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_report_file_records_each_process_that_flushed(tmp_path):
    from .conftest import run_python

    report = tmp_path / "report.jsonl"
    code = """
    import torch, triton
    driver = object.__new__(triton.backends.backends["nvidia"].driver)
    cache = torch.zeros(16, dtype=torch.int32)
    for _ in range(3):
        driver.clear_cache(cache)
    """
    for value in ("read", "0"):
        child = run_python(code, {"CLEANFLUSH": value, "CLEANFLUSH_REPORT": str(report)})
        assert child.returncode == 0, child.stderr
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(lines) == 1  # the CLEANFLUSH=0 process patched nothing and wrote nothing
    assert lines[0]["flushes"] == {"triton | read": 3}
    assert lines[0]["source"] == "autoload"


WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None   # import torch / import triton now raise ImportError
sys.modules["triton"] = None
from cleanflush.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_status_and_verify_without_torch_or_triton():
    import subprocess
    import sys

    import os

    env = {k: v for k, v in os.environ.items() if k != "CLEANFLUSH"}

    def run(*args):
        return subprocess.run([sys.executable, "-c", WITHOUT_TORCH, *args], capture_output=True, text=True,
                              timeout=120, env=env)

    status = run("status")
    assert status.returncode == 0, status.stderr
    assert "installed (import)" in status.stdout
    assert "installed, but the import failed" in status.stdout
    assert "before 3.0" not in status.stdout
    assert "Traceback" not in status.stderr
    verify = run("verify")
    assert verify.returncode == 3  # cannot run here
    assert verify.stderr.strip() == "cleanflush verify: cannot run here: torch is not installed"
