"""`cleanflush verify` without a GPU: arguments, the exit-2 path, the verdict, the JSON."""

import json
import subprocess
import sys

import pytest

from cleanflush import _verify
from cleanflush.__main__ import main

NVIDIA = "triton.backends.nvidia.driver.CudaDriver.clear_cache"
INDUCTOR = "InductorBenchmarker.benchmark_gpu"


def record(stock=(18.9, 19.0, 18.95), patched=(15.2, 15.4, 15.3), ref=(15.5, 15.6, 15.55),
           inductor=((17.5, 17.6, 17.4), (14.1, 14.2, 14.15)), ref_min=(14.1, 14.1, 14.2),
           flushes=None, policy="write-read", others=(), installed=True, targets=None):
    """A measurement record as `measure` returns it (times in us)."""
    timings = {
        "do_bench_stock": list(stock),
        "do_bench_patched": list(patched),
        "reference_read_flush": list(ref),
        "reference_read_flush_min": list(ref_min),
        "reference_rotating_graph": [13.3, 13.4, 13.35],
    }
    if inductor:
        timings["inductor_stock"], timings["inductor_patched"] = map(list, inductor)
    if flushes is None:
        flushes = {f"triton | {policy}": 3000, "triton | write": 3000}
        if inductor:
            flushes[f"{INDUCTOR} | write-read"] = 400
    return {
        "schema": 1,
        "kernel": {"op": "F.linear, one input row", "n": 4096, "k": 4096, "dtype": "bfloat16", "device": 0},
        "machine": {"gpu": "NVIDIA H200", "l2_bytes": 62914560, "driver": "580.159.04",
                    "sm_clock_mhz_before": 345, "sm_clock_mhz_after": 1980, "warm_up_s": 1.0,
                    "other_processes": list(others), "probe": "nvml"},
        "software": {"torch": "2.11.0", "triton": "3.6.0", "cleanflush": "0.1.0", "python": "3.12.3"},
        "policy": policy,
        "installed": installed,
        "targets": targets if targets is not None else [
            {"target": NVIDIA, "package": "triton", "version": "3.6.0", "patched": True, "detail": "ok"},
            {"target": INDUCTOR, "package": "torch", "version": "2.11.0", "patched": True, "detail": "ok"},
        ],
        "rounds": len(stock),
        "timings_us": timings,
        "flushes": flushes,
        "ncu": None,
    }


def test_pass_on_the_h200_numbers():
    verdict = _verify.judge(record())
    assert verdict["result"] == "PASS" and verdict["exit_code"] == 0
    assert any("stock flush added" in r for r in verdict["reasons"])


def test_a_shift_shared_by_a_round_and_its_reference_is_not_a_failure():
    # round 2 ran in the slow state for both numbers; compared unpaired, patched's median
    # (16.5) would sit 1.6 us above the reference's (14.9)
    shifted = record(patched=(15.0, 16.5, 16.6), ref=(14.9, 16.4, 14.8))
    assert _verify.judge(shifted)["result"] == "PASS"
    biased = record(patched=(16.0, 17.5, 16.6), ref=(14.9, 16.4, 15.4))
    assert _verify.judge(biased)["result"] == "FAIL"


def test_noisy_rounds_widen_the_tolerance():
    noisy = record(patched=(14.6, 16.6, 15.4), ref=(15.0, 16.0, 15.5))
    assert _verify.judge(noisy)["result"] == "PASS"
    tight = record(patched=(16.6, 16.6, 16.6), ref=(15.5, 15.5, 15.5))
    assert _verify.judge(tight)["result"] == "FAIL"


def test_no_penalty_gpu_is_said_not_failed():
    verdict = _verify.judge(record(stock=(15.6, 15.5, 15.6), inductor=None))
    assert verdict["result"] == "NO-PENALTY" and verdict["exit_code"] == 0
    assert any("no measurable penalty" in r for r in verdict["reasons"])


def test_flush_that_never_ran_fails_naming_the_target_and_why():
    targets = [{"target": NVIDIA, "package": "triton", "version": "3.1.0", "patched": False,
                "detail": "unsupported: before triton 3.2 ..."}]
    verdict = _verify.judge(record(flushes={}, inductor=None, targets=targets,
                                   patched=(18.9, 19.0, 18.95)))
    assert verdict["result"] == "FAIL" and verdict["exit_code"] == 1
    assert any("triton: did not take effect" in r and "unsupported" in r for r in verdict["reasons"])


def test_inductor_not_taking_effect_fails():
    flushes = {"triton | write-read": 3000}
    verdict = _verify.judge(record(flushes=flushes))
    assert verdict["result"] == "FAIL"
    assert any(r.startswith(INDUCTOR) and "never ran" in r for r in verdict["reasons"])


def test_write_policy_and_uninstalled_fail():
    assert _verify.judge(record(policy="write"))["result"] == "FAIL"
    verdict = _verify.judge(record(installed=False))
    assert verdict["result"] == "FAIL" and "not installed" in verdict["reasons"][0]


def test_other_processes_make_the_result_unreliable():
    verdict = _verify.judge(record(others=(4242,)))
    assert any(r.startswith("UNRELIABLE") and "4242" in r for r in verdict["reasons"])
    data = record(others=(4242,))
    assert "WARNING: 1 other process" in _verify.format_report(data, verdict)


def test_report_is_a_readable_table():
    data = record()
    text = _verify.format_report(data, _verify.judge(data))
    assert "NVIDIA H200" in text and "SM 345 -> 1980 MHz" in text
    row = next(line for line in text.splitlines() if line.startswith("do_bench, stock flush"))
    assert "18.95" in row and f"{18.95 / 15.55 - 1:+.1%}" in row
    assert "PASS" in text.splitlines()


def test_json_record(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(_verify, "measure", lambda options, progress: record())
    path = tmp_path / "verify.json"
    assert main(["verify", "--json", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data["schema"] == 1
    assert {"kernel", "machine", "software", "policy", "targets", "timings_us", "flushes", "verdict"} <= set(data)
    assert data["verdict"]["result"] == "PASS"
    assert all(isinstance(v, list) for v in data["timings_us"].values())
    assert "PASS" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--shape", "4096"], "N,K"),
    (["--shape", "0,4096"], "N,K"),
    (["--rounds", "0"], "positive"),
    (["--dtype", "int8"], "invalid choice"),
    (["--device", "-1"], "device index"),
])
def test_bad_arguments_are_one_line_usage_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["verify", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_options_reach_the_measurement(monkeypatch):
    seen = {}

    def fake(options, progress):
        seen["options"] = options
        return record()

    monkeypatch.setattr(_verify, "measure", fake)
    main(["verify", "--shape", "6144,4096", "--dtype", "float16", "--device", "1", "--rounds", "3"])
    o = seen["options"]
    assert (o.n, o.k, o.dtype, o.device, o.rounds, o.ncu) == (6144, 4096, "float16", 1, 3, False)


def test_without_a_gpu_exit_2_with_one_line_and_no_traceback():
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    except ImportError:
        pass
    out = subprocess.run([sys.executable, "-m", "cleanflush", "verify"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stdout == ""
    lines = [line for line in out.stderr.splitlines() if line.startswith("cleanflush verify")]
    assert lines == ["cleanflush verify: cannot run here: no CUDA device: torch.cuda.is_available() is False"]
    assert "Traceback" not in out.stderr
