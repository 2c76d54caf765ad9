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
    out = _run(["status", "--json"], {"CLEANFLUSH": "read"})
    data = json.loads(out.stdout)
    assert data["installed"] and data["policy"] == "read" and data["source"] == "autoload"
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
