"""`cleanflush verify` without a GPU: the verdict on recorded measurements (every negative
control and both clean policies), arguments, exit codes, the JSON record."""

import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cleanflush
from cleanflush import _verify
from cleanflush._verify import measure as verify_measure
from cleanflush._verify import verdict
from cleanflush._verify.controls import CONTROLS
from cleanflush.cli import main
from cleanflush.cli._output import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_OK, EXIT_USAGE

from .triton_layout import needs_driver_clear_cache

NVIDIA = "triton.backends.nvidia.driver.CudaDriver.clear_cache"
INDUCTOR = "InductorBenchmarker.benchmark_gpu"
ROUNDS = 5
# medians of the H200 runs in benchmarks/results/h200 (us); each round jitters a little
STOCK, REFERENCE, GRAPH = 18.9, 15.4, 13.0


def jitter(value, spread=0.1):
    return [value + spread * ((i * 7) % 5 - 2) / 2 for i in range(ROUNDS)]


def record(
    candidates=("write-read",),
    timed=None,
    counts=None,
    policy="write-read",
    inductor=None,
    others=(),
    installed=True,
    ncu=None,
    stock=STOCK,
    targets=None,
):
    """A record built by the same function `measure` uses; ``timed`` maps each candidate to
    its do_bench time (us), ``counts`` to its flush counts."""
    rec = verdict.new_record(
        kernel={"op": "F.linear, one input row", "n": 4096, "k": 4096, "dtype": "bfloat16", "device": 0},
        machine={
            "gpu": "NVIDIA H200",
            "l2_bytes": 62914560,
            "driver": "580.159.04",
            "sm_clock_mhz_before": 345,
            "sm_clock_mhz_after": 1980,
            "warm_up_s": 1.0,
            "other_processes": list(others),
            "probe": "nvml",
        },
        software={"torch": "2.11.0", "triton": "3.6.0", "cleanflush": "0.1.0", "python": "3.12.3"},
        policy=policy,
        installed=installed,
        targets=targets
        if targets is not None
        else [
            {
                "name": "triton",
                "target": NVIDIA,
                "version": "3.6.0",
                "state": "patched",
                "patched": True,
                "detail": "ok",
            },
            {
                "name": "kernelbench",
                "target": "kernelbench.timing.clear_l2_cache",
                "version": None,
                "state": "absent",
                "patched": False,
                "detail": "kernelbench is not installed",
            },
        ],
        rounds=ROUNDS,
        candidates=list(candidates),
    )
    t = rec["timings_us"]
    t["do_bench"]["stock"] = jitter(stock)
    rec["flushes"]["stock"] = {"triton | write": 5000}
    t["rotating_graph"] = jitter(GRAPH)
    timed = timed or {}
    counts = counts or {}
    for name in candidates:
        t["do_bench"][name] = jitter(timed.get(name, 15.9))
        t["reference"][name] = jitter(REFERENCE)
        t["reference_min"][name] = jitter(14.1, 0.02)
        rec["flushes"][name] = counts.get(name, {f"triton | {verdict.claimed_policy(name)}": 5000})
    if inductor:
        t["inductor"]["stock"], t["inductor"][candidates[0]] = jitter(inductor[0], 0.05), jitter(inductor[1], 0.05)
        rec["flushes"][candidates[0]][f"{INDUCTOR} | write-read"] = 400
        rec["flushes"]["stock"][f"{INDUCTOR} | write"] = 400
    rec["ncu"] = ncu
    return rec


# what `cleanflush verify --ncu --json` wrote on an H200 (tests/data/README.md says when and where)
DATA = Path(__file__).resolve().parent / "data"
REAL_RECORD = DATA / "verify-h200-fresh-process.json"


def shape(value):
    """Keys all the way down and what kind each leaf is; counter keys ("target | policy")
    collapse to one, and a list to the set of its items' shapes."""
    if isinstance(value, dict):
        return {("<target | policy>" if " | " in key else key): shape(v) for key, v in value.items()}
    if isinstance(value, list):
        return ["list of", sorted({json.dumps(shape(v), sort_keys=True) for v in value})]
    if isinstance(value, bool) or value is None:
        return repr(type(value).__name__)
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def per_round_lengths(rec):
    t = rec["timings_us"]
    lists = [t["rotating_graph"]] + [
        xs for key in ("do_bench", "reference", "reference_min", "inductor") for xs in t[key].values()
    ]
    return {len(xs) for xs in lists}


def test_the_test_record_has_the_shape_of_a_real_one():
    # the judge tests below feed it records built here; they must look like what `measure`
    # wrote on the H200 (tests/data), or the judge is tested on a stale shape
    real = json.loads(REAL_RECORD.read_text())
    real.pop("verdict"), real.pop("elapsed_s")  # added by the command around measure()
    mine = record(inductor=(17.5, 14.2), ncu={"stock": 11.0, "write-read": 0.02})
    assert shape(mine) == shape(real)
    assert per_round_lengths(real) == {real["rounds"]} and per_round_lengths(mine) == {ROUNDS}


@pytest.mark.parametrize("name", ["verify-h200-pass-0.1.0.json", "verify-h200-fresh-process.json"])
def test_recorded_records_get_the_verdict_they_got_on_the_gpu(name):
    real = json.loads((DATA / name).read_text())
    assert verdict.judge(real)["result"] == real["verdict"]["result"]


def test_a_recorded_controls_run_is_judged_as_on_the_gpu():
    real = json.loads((DATA / "verify-h200-controls.json").read_text())
    judged = verdict.judge_controls(real)
    assert judged["wrong"] == real["verdict"]["wrong"] == []
    assert {name: v["result"] for name, v in judged["candidates"].items()} == {
        name: v["result"] for name, v in real["verdict"]["candidates"].items()
    }
    assert set(real["candidates"]) == {"write-read", "read", *CONTROLS}


def test_write_read_passes_on_the_h200_numbers():
    v = verdict.judge(record(inductor=(17.5, 14.2)))
    assert v["result"] == "PASS", v
    assert any("removed" in r and "stock penalty" in r for r in v["reasons"])
    assert any("Inductor" in r for r in v["reasons"])
    assert v["margin"] > 0


def test_read_passes_too():
    v = verdict.judge(record(candidates=("read",), policy="read", timed={"read": 15.3}))
    assert v["result"] == "PASS", v


# What each negative control leaves on the record, as the H200 shows it (see the closing
# notes): the timing of a flush that does not clean, and what the counters say of it.
CONTROL_RECORDS = {
    "control: stock write": ({"control: stock write": 18.8}, {"control: stock write": {"triton | write": 5000}}),
    "control: read of the zeroed tail": ({"control: read of the zeroed tail": 18.6}, {}),
    "control: read of half the L2": ({"control: read of half the L2": 17.6}, {}),
    "control: read that falls back": (
        {"control: read that falls back": 18.9},
        {"control: read that falls back": {"triton | write": 5000}},
    ),
}


@pytest.mark.parametrize("control", CONTROLS)
def test_every_negative_control_fails(control):
    timed, counts = CONTROL_RECORDS[control]
    v = verdict.judge_candidate(record(candidates=(control,), timed=timed, counts=counts), control)
    assert v["result"] == "FAIL", v
    assert any(r.startswith("FAIL") for r in v["reasons"])


def test_a_read_that_fell_back_fails_on_the_counters_alone():
    # even with a timing that looks clean, the stock write ran: FAIL
    name = "control: read that falls back"
    rec = record(candidates=(name,), timed={name: 15.4}, counts={name: {"triton | write": 5000}})
    v = verdict.judge_candidate(rec, name)
    assert v["result"] == "FAIL"
    assert any("ran the stock write" in r for r in v["reasons"])
    rec = record(counts={"write-read": {"triton | write-read": 4000, "triton | write": 1000}})
    assert verdict.judge(rec)["result"] == "FAIL"  # some of the clean flushes fell back


def test_controls_run_counts_wrong_verdicts():
    names = ("write-read", "read", *CONTROLS)
    timed = {"write-read": 15.9, "read": 15.3}
    counts = {}
    for control in CONTROLS:
        timed.update(CONTROL_RECORDS[control][0])
        counts.update(CONTROL_RECORDS[control][1])
    judged = verdict.judge_controls(record(candidates=names, timed=timed, counts=counts))
    assert judged["result"] == "PASS" and judged["wrong"] == [], judged
    # a verifier that passed everything would be caught: the half-L2 read timed as clean
    timed["control: read of half the L2"] = 15.5
    judged = verdict.judge_controls(record(candidates=names, timed=timed, counts=counts))
    assert judged["result"] == "FAIL" and judged["wrong"] == ["control: read of half the L2"]
    text = _verify.report.format_controls(record(candidates=names, timed=timed, counts=counts), judged)
    assert "WRONG" in text and "control: read of half the L2" in text


def test_ncu_bytes_that_contradict_the_timing_fail():
    dirty = record(ncu={"stock": 11.0, "write-read": 11.0})
    v = verdict.judge(dirty)
    assert v["result"] == "FAIL"
    assert any("Nsight Compute" in r and "dirty" in r for r in v["reasons"])
    clean = verdict.judge(record(ncu={"stock": 11.0, "write-read": 0.02}))
    assert clean["result"] == "PASS"


def test_ncu_that_could_not_run_is_said():
    v = verdict.judge(record(ncu={"error": "ncu failed (1): ERR_NVGPUCTRPERM"}))
    assert v["result"] == "PASS"
    assert any("could not run" in r and "ERR_NVGPUCTRPERM" in r for r in v["reasons"])


# The columns of Nsight Compute's --csv output (its details page), which ncu_metrics reads
NCU_HEADER = [
    "ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
    "Block Size", "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value",
]  # fmt: skip


def fake_ncu(tmp_path, monkeypatch, rows):
    """An ``ncu`` on PATH that prints ``rows`` (id, kernel, metric, unit, value) as its CSV."""
    import csv
    import io

    text = io.StringIO()
    writer = csv.writer(text, quoting=csv.QUOTE_ALL)
    writer.writerow(NCU_HEADER)
    for launch, kernel, metric, unit, value in rows:
        writer.writerow([launch, "1", "python", "host", kernel, "1", "7", "(128, 1, 1)", "(528, 1, 1)", "0", "9.0",
                         "Command line profiler metrics", metric, unit, value])  # fmt: skip
    tool = tmp_path / "ncu"
    tool.write_text(f"#!/bin/sh\necho '==PROF== Connected to process'\ncat <<'EOF'\n{text.getvalue()}EOF\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_ncu_metrics_come_back_in_bytes_microseconds_and_sectors(tmp_path, monkeypatch):
    from cleanflush import _measure

    metrics = ("dram__bytes_write.sum", "gpu__time_duration.sum", "lts__t_sectors_srcunit_ltcfabric.sum")
    fake_ncu(
        tmp_path,
        monkeypatch,
        [
            ("0", "nvjet_tst", "dram__bytes_write.sum", "Mbyte", "1.50"),
            ("0", "nvjet_tst", "gpu__time_duration.sum", "usecond", "56.50"),
            ("0", "nvjet_tst", "lts__t_sectors_srcunit_ltcfabric.sum", "Msector", "3.69"),
            # as ncu printed them on an H200 (benchmarks/results/h200/residual.json, its ncu rows)
            ("1", "splitK_reduce", "dram__bytes_write.sum", "byte", "104,448"),
            ("1", "splitK_reduce", "gpu__time_duration.sum", "ns", "56,512"),
            ("1", "splitK_reduce", "lts__t_sectors_srcunit_ltcfabric.sum", "sector", "3,686,030"),
        ],
    )
    kernels = _measure.ncu_metrics(["-c", "pass"], metrics)
    assert [name for name, _ in kernels] == ["nvjet_tst", "splitK_reduce"]
    first, second = (values for _, values in kernels)
    assert first == pytest.approx(dict(zip(metrics, (1.5e6, 56.5, 3.69e6))))
    assert second == pytest.approx(dict(zip(metrics, (104448.0, 56.512, 3686030.0))))


def test_ncu_metrics_in_a_unit_it_does_not_know_raise(tmp_path, monkeypatch):
    from cleanflush import _measure

    fake_ncu(tmp_path, monkeypatch, [("0", "nvjet_tst", "dram__bytes_write.sum", "furlong", "3")])
    with pytest.raises(RuntimeError, match="unknown unit 'furlong'"):
        _measure.ncu_metrics(["-c", "pass"], ("dram__bytes_write.sum",))


def test_faster_than_the_cold_graph_means_warm_data():
    v = verdict.judge(record(timed={"write-read": 10.5}))
    assert v["result"] == "FAIL"
    assert any("warm" in r for r in v["reasons"])


def test_a_shift_shared_by_a_round_and_its_reference_is_not_a_failure():
    rec = record()
    t = rec["timings_us"]
    # round 2 ran 1.5 us slower for every method timed in it
    for series in (t["do_bench"]["stock"], t["do_bench"]["write-read"], t["reference"]["write-read"]):
        series[2] += 1.5
    assert verdict.judge(rec)["result"] == "PASS"


def test_no_penalty_gpu_is_said_not_failed():
    v = verdict.judge(record(stock=15.5))
    assert v["result"] == "NO-PENALTY"
    assert any("no measurable penalty" in r for r in v["reasons"])


def test_flush_that_never_ran_fails_naming_the_target_and_why():
    targets = [
        {
            "name": "triton",
            "target": NVIDIA,
            "version": "3.1.0",
            "state": "unsupported",
            "patched": False,
            "detail": "unsupported: before triton 3.2 ...",
        }
    ]
    v = verdict.judge(record(counts={"write-read": {}}, targets=targets, timed={"write-read": 18.9}))
    assert v["result"] == "FAIL"
    assert any("no flush ran" in r for r in v["reasons"])
    assert any("unsupported" in r for r in v["reasons"])


def test_inductor_not_taking_effect_fails():
    rec = record(inductor=(17.5, 14.2))
    del rec["flushes"]["write-read"][f"{INDUCTOR} | write-read"]
    v = verdict.judge(rec)
    assert v["result"] == "FAIL"
    assert any(INDUCTOR in r and "no flush ran" in r for r in v["reasons"])
    rec = record(inductor=(17.5, 17.4))  # it ran, but removed nothing
    assert verdict.judge(rec)["result"] == "FAIL"


def test_write_policy_and_uninstalled_fail():
    assert verdict.judge(record(candidates=("write",), policy="write"))["result"] == "FAIL"
    v = verdict.judge(record(installed=False))
    assert v["result"] == "FAIL" and "not installed" in v["reasons"][0]


def test_other_processes_make_the_result_unreliable():
    rec = record(others=(4242,))
    v = verdict.judge(rec)
    assert any(r.startswith("UNRELIABLE") and "4242" in r for r in v["reasons"])
    assert "WARNING: 1 other process" in _verify.report.format_report(rec, v)


def test_report_is_a_readable_table():
    rec = record(inductor=(17.5, 14.2))
    text = _verify.report.format_report(rec, verdict.judge(rec))
    assert "NVIDIA H200" in text and "SM 345 -> 1980 MHz" in text
    row = next(line for line in text.splitlines() if line.startswith("do_bench, stock flush"))
    assert "18.90" in row and f"{STOCK / REFERENCE - 1:+.1%}" in row
    assert "PASS" in text.splitlines()


def test_json_record_and_exit_code(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(verify_measure, "measure", lambda options, progress: record())
    path = tmp_path / "verify.json"
    assert main(["verify", "--json", str(path)]) == EXIT_OK
    data = json.loads(path.read_text())
    assert data["schema"] == verdict.SCHEMA and data["verdict"]["result"] == "PASS"
    assert data["verdict"]["exit_code"] == EXIT_OK
    monkeypatch.setattr(verify_measure, "measure", lambda options, progress: record(timed={"write-read": 18.9}))
    assert main(["verify"]) == EXIT_FAIL
    assert "PASS" in capsys.readouterr().out


def test_bad_json_path_is_refused_before_measuring(tmp_path, monkeypatch, capsys):
    def never(options, progress):
        raise AssertionError("measured although the record could not be written")

    monkeypatch.setattr(verify_measure, "measure", never)
    assert main(["verify", "--json", str(tmp_path / "no" / "such" / "dir.json")]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write --json" in err


def test_exit_codes_are_distinct():
    codes = [EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_CANNOT_RUN]
    assert len(set(codes)) == 4 and EXIT_USAGE == 2  # argparse's usage code


@pytest.mark.parametrize(
    "args, message",
    [
        (["--shape", "4096"], "N,K"),
        (["--shape", "0,4096"], "N,K"),
        (["--rounds", "0"], "positive"),
        (["--dtype", "int8"], "invalid choice"),
        (["--device", "-1"], "device index"),
    ],
)
def test_bad_arguments_are_one_line_usage_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["verify", *args])
    assert exit_.value.code == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_a_bad_shape_names_the_form_it_takes(capsys):
    with pytest.raises(SystemExit):
        main(["verify", "--shape", "4096"])
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .endswith(
            "argument --shape: expected N,K (or NxK) as two positive integers, e.g. 4096,4096 or 4096x4096; got '4096'"
        )
    )


@pytest.mark.parametrize("text", ["4096x14336", "4096,14336", " 4096 , 14336 "])
def test_a_shape_is_taken_in_either_form_verify_prints(text):
    from cleanflush.cli.verify import _shape

    assert _shape(text) == (4096, 14336)


@pytest.mark.parametrize("text", ["4096x", "x4096", "4096x4096x2", "4096X4096", "0x4096", "4096×4096"])
def test_a_shape_in_neither_form_is_refused(text):
    import argparse

    from cleanflush.cli.verify import _shape

    with pytest.raises(argparse.ArgumentTypeError):
        _shape(text)


@pytest.mark.parametrize(
    "args, labelled",
    [
        ([], []),  # the one default GEMM on device 0: no label
        (["--shape", "8,8"], []),
        (["--shape", "8,8", "--shape", "16,8"], ["cuda:0, 8 x 8 bfloat16", "cuda:0, 16 x 8 bfloat16"]),
        (["--device", "1"], ["cuda:1, 4096 x 4096 bfloat16"]),
    ],
)
def test_each_gemm_is_labelled_in_the_progress_when_there_is_more_than_the_one(args, labelled, monkeypatch, capsys):
    def measured(options, progress):
        progress("checking the machine")  # as the real one does, once it can run
        return record()

    monkeypatch.setattr(verify_measure, "measure", measured)
    main(["verify", *args])
    err = capsys.readouterr().err
    assert [line.split("] ", 1)[1] for line in err.splitlines() if "] cuda:" in line] == labelled


def test_a_gemm_that_cannot_run_is_not_labelled_first(monkeypatch, capsys):
    def cannot(options, progress):
        raise verify_measure.CannotRun(f"no CUDA device {options.device}")

    monkeypatch.setattr(verify_measure, "measure", cannot)
    assert main(["verify", "--device", "1"]) == EXIT_CANNOT_RUN
    assert capsys.readouterr().err == "cleanflush verify: cannot run here: no CUDA device 1\n"


def test_the_elapsed_time_is_in_tenths_of_a_second(monkeypatch, capsys):
    clock = iter([100.0, 112.3456])
    monkeypatch.setattr(verify_measure, "measure", lambda options, progress: record())
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    main(["verify", "--json", "-"])
    assert json.loads(capsys.readouterr().out)["elapsed_s"] == 12.3


def test_options_reach_the_measurement(monkeypatch):
    seen = {}

    def fake(options, progress):
        seen["options"] = options
        return record()

    monkeypatch.setattr(verify_measure, "measure", fake)
    main(["verify", "--shape", "6144,4096", "--dtype", "float16", "--device", "1", "--rounds", "3", "--controls"])
    o = seen["options"]
    assert (o.n, o.k, o.dtype, o.device, o.rounds, o.ncu, o.controls) == (6144, 4096, "float16", 1, 3, False, True)
    assert verify_measure.candidates(o)[-len(CONTROLS) :] == list(CONTROLS)  # the controls asked for


def test_verify_times_every_policy_that_reads_then_the_controls(monkeypatch):
    """The candidates come from the policy records: a new policy that reads is timed, one that
    does not is not, whatever their names."""
    from cleanflush import _policies

    options = verify_measure.Options(n=8, k=8, dtype="bfloat16", device=0, rounds=1, ncu=False, controls=True)

    def record(name, reads):
        return _policies.Policy(name, writes=True, reads=reads, shrinks_owned_write=False, summary="")

    records = [record("b-reads", True), record("a-writes", False), record("c-reads", True), record("d-writes", False)]
    monkeypatch.setattr(_policies, "BY_NAME", {p.name: p for p in records})
    assert verify_measure.candidates(options) == ["b-reads", "c-reads", *CONTROLS]  # in the records' order


def test_without_a_gpu_exit_3_with_one_line_and_no_traceback():
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    except ImportError:
        pass
    env = {k: v for k, v in os.environ.items() if k != "CLEANFLUSH"}
    out = subprocess.run(
        [sys.executable, "-m", "cleanflush", "verify"], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.returncode == EXIT_CANNOT_RUN
    assert out.stdout == ""
    lines = [line for line in out.stderr.splitlines() if line.startswith("cleanflush verify")]
    assert lines == ["cleanflush verify: cannot run here: no CUDA device: torch.cuda.is_available() is False"]
    assert "Traceback" not in out.stderr


# The controls themselves, through the real patched driver on CPU tensors: each must be
# broken in the way it claims, or a FAIL verdict on it would prove nothing.


def _clear_cache_under(name, monkeypatch, l2=None):
    torch = pytest.importorskip("torch")
    triton = pytest.importorskip("triton")
    from cleanflush import _flush, _read
    from cleanflush._verify.controls import flushing

    from .ops import OpRecorder

    if l2 is not None:
        monkeypatch.setattr(_read, "l2_bytes", lambda device: l2)
    driver = object.__new__(triton.backends.backends["nvidia"].driver)
    cache = torch.full((4096,), 5, dtype=torch.int32)
    _flush.prepare(cache.device)
    before = cleanflush.flush_counts()
    with flushing(name), OpRecorder() as rec:
        driver.clear_cache(cache)
    counted = {k: n - before.get(k, 0) for k, n in cleanflush.flush_counts().items() if n != before.get(k, 0)}
    return cache, rec, counted


@needs_driver_clear_cache
def test_control_tail_read_rereads_the_lines_just_zeroed(monkeypatch):
    from .ops import overlaps

    cache, rec, counted = _clear_cache_under("control: read of the zeroed tail", monkeypatch, l2=4096)
    assert rec.names == ["zero_", "sum"]
    assert overlaps(rec.ops[1][1][0], cache)  # the dirty lines themselves
    assert counted == {("triton", "write-read"): 1}  # and it claims to be clean


@needs_driver_clear_cache
def test_control_half_l2_reads_too_little(monkeypatch):
    cache, rec, counted = _clear_cache_under("control: read of half the L2", monkeypatch, l2=8192)
    assert rec.names == ["zero_", "sum"]
    assert rec.ops[1][1][0].numel() * 4 == 8192 // 2
    assert counted == {("triton", "write-read"): 1}


@needs_driver_clear_cache
def test_control_fallback_runs_the_write_and_counts_it(monkeypatch):
    cache, rec, counted = _clear_cache_under("control: read that falls back", monkeypatch)
    assert rec.names == ["zero_"]
    assert counted == {("triton", "write"): 1}


@needs_driver_clear_cache
def test_the_clean_policies_read_a_separate_region(monkeypatch):
    from .ops import overlaps

    for name in ("write-read", "read"):
        cache, rec, counted = _clear_cache_under(name, monkeypatch)
        assert not overlaps(rec.ops[-1][1][0], cache)
        assert counted == {("triton", name): 1}


# The verdict's words, written out by hand from the record() numbers (jitter cancels in the
# per-round penalty, so each share is exact): what a user reads must say what happened.


def test_every_reason_of_a_pass_word_for_word():
    v = verdict.judge(record(inductor=(17.5, 14.2), ncu={"stock": 11.0, "write-read": 0.02}))
    assert v["reasons"] == [
        "triton flushed through cleanflush: write-read x 5000",
        "do_bench: 15.90 us against stock 18.90 us and the clean reference 15.40 us, rotating graph "
        "13.00 us: removed 86% of the 3.50 us stock penalty (needs 60%, less the noise of 0.25 us)",
        "InductorBenchmarker.benchmark_gpu flushed through cleanflush: write-read x 400",
        "Inductor benchmark_gpu (min): 14.20 us against stock 17.50 us and the clean reference 14.10 us: "
        "removed 97% of the 3.40 us stock penalty (needs 60%, less the noise of 0.25 us)",
        "Nsight Compute: the timed GEMM writes 0.020 MB after this flush (stock 11.00 MB); at most 1.0 MB is clean",
    ]
    assert v["result"] == "PASS"
    # the smallest of both rules' margins for do_bench and Inductor: the median rule's is the
    # share removed, less 60%, plus the noise's share; the rounds rule's (every round removed
    # the same share here) the share less 60%
    assert v["margin"] == pytest.approx(3.0 / 3.5 - 0.6)


def test_every_reason_of_a_fail_word_for_word():
    rec = record(
        timed={"write-read": 18.8},
        inductor=(17.5, 17.45),
        counts={"write-read": {"triton | write": 5000, "triton | write-read": 1}},
        ncu={"write-read": 11.0},
        targets=[
            {
                "name": "triton",
                "target": "triton.x",
                "version": "3.6.0",
                "state": "failed",
                "patched": False,
                "detail": "unsupported here",
            },
            {
                "name": "inductor",
                "target": "torch.y",
                "version": "2.11.0",
                "state": "failed",
                "patched": False,
                "detail": "another package",
            },
        ],
    )
    rec["flushes"]["write-read"][f"{INDUCTOR} | write-read"] = 0  # counted nothing: not evidence
    v = verdict.judge(rec)
    assert v["reasons"] == [
        "FAIL: 5000 of 5001 flushes in triton ran the stock write (the clean read failed or was skipped)",
        "  triton.x: unsupported here",
        "FAIL: do_bench: 18.80 us against stock 18.90 us and the clean reference 15.40 us, rotating graph "
        "13.00 us: removed 3% of the 3.50 us stock penalty (needs 60%, less the noise of 0.25 us), and under "
        "60% in 5 of 5 rounds (3% to 3%): a flush that typically removes 60% does that with a chance under 5%",
        "FAIL: no flush ran through cleanflush in InductorBenchmarker.benchmark_gpu",
        "FAIL: Inductor benchmark_gpu (min): 17.45 us against stock 17.50 us and the clean reference 14.10 us: "
        "removed 1% of the 3.40 us stock penalty (needs 60%, less the noise of 0.25 us), and under 60% in 5 of "
        "5 rounds (1% to 1%): a flush that typically removes 60% does that with a chance under 5%",
        "FAIL: Nsight Compute: the timed GEMM writes 11.000 MB after this flush; more than 1.0 MB is dirty "
        "write-back, whatever the timing says",
    ]
    assert v["result"] == "FAIL"
    # Inductor's rounds rule, the smallest: its best round's share (its jitter does not cancel) less 60%
    i, reference = rec["timings_us"]["inductor"], rec["timings_us"]["reference_min"]["write-read"]
    best = max((s - c) / (s - r) for s, c, r in zip(i["stock"], i["write-read"], reference))
    assert v["margin"] == pytest.approx(best - 0.6) and best == pytest.approx(0.05 / 3.4, abs=0.01)


def test_do_bench_failing_where_inductor_passes_points_at_launch_latency():
    hint = "do_bench's mean failed where Inductor's min under the same flush did not"
    v = verdict.judge(record(timed={"write-read": 18.8}, inductor=(17.5, 14.2)))
    assert v["result"] == "FAIL" and any(reason.startswith(hint) for reason in v["reasons"])
    # also where Inductor's own stock timing is too noisy to show a penalty
    v = verdict.judge(record(timed={"write-read": 18.8}, inductor=(14.2, 14.2)))
    assert "no measurable penalty" in v["reasons"][3] and v["reasons"][4].startswith(hint)
    # negative controls: both failing (dirty lines slow every call), or do_bench passing
    both = verdict.judge(record(timed={"write-read": 18.8}, inductor=(17.5, 17.45)))
    assert both["result"] == "FAIL" and not any(reason.startswith(hint) for reason in both["reasons"])
    fine = verdict.judge(record(inductor=(17.5, 14.2)))
    assert fine["result"] == "PASS" and not any(reason.startswith(hint) for reason in fine["reasons"])


def test_only_the_stock_write_and_the_write_policy_are_said_plainly():
    v = verdict.judge(record(counts={"write-read": {"triton | write": 7}}, policy="write-read"))
    assert (
        v["reasons"][0] == "FAIL: 7 of 7 flushes in triton ran the stock write (the clean read failed or was skipped)"
    )
    v = verdict.judge_candidate(
        record(candidates=("control: stock write",), counts={"control: stock write": {"triton | write": 7}}),
        "control: stock write",
    )
    assert v["reasons"][0] == "FAIL: only the stock write ran in triton (7 flushes)"
    v = verdict.judge(record(policy="write"))
    assert v == {
        "result": "FAIL",
        "margin": None,
        "reasons": ["the policy is 'write', the stock flush: there is no clean flush to verify"],
    }
    v = verdict.judge(record(installed=False))
    assert v["reasons"] == ["cleanflush is not installed in this process (CLEANFLUSH=0?)"]


def flat(rec, candidate, stock, timed, reference, graph, rounds=ROUNDS):
    """The record with every round equal (no jitter), to put a number exactly on a bar."""
    t = rec["timings_us"]
    t["do_bench"]["stock"], t["do_bench"][candidate] = [stock] * rounds, [timed] * rounds
    t["reference"][candidate], t["rotating_graph"] = [reference] * rounds, [graph] * rounds
    rec["rounds"] = rounds
    return rec


def test_the_bars_are_inclusive_where_the_docs_say_so():
    # the median rule alone (4 rounds: too few for the rounds rule): a 5 us penalty with the
    # least noise (0.25 us): 40% of it plus the noise may be left
    v = verdict.judge(flat(record(), "write-read", 21.0, 18.25, 16.0, 10.0, rounds=4))
    assert v["result"] == "PASS" and v["margin"] == pytest.approx(0.0)
    assert verdict.judge(flat(record(), "write-read", 21.0, 18.26, 16.0, 10.0, rounds=4))["result"] == "FAIL"
    # the rounds rule: 60% removed in every round passes, a hair less in all five fails
    v = verdict.judge(flat(record(), "write-read", 21.0, 18.0, 16.0, 10.0))
    assert v["result"] == "PASS" and v["margin"] == pytest.approx(0.0)
    assert verdict.judge(flat(record(), "write-read", 21.0, 18.01, 16.0, 10.0))["result"] == "FAIL"
    # the rotating graph's time less 2% of it (more than the least spread, 0.25 us): not warm
    assert verdict.judge(flat(record(), "write-read", 21.0, 15.68, 16.0, 16.0))["result"] == "PASS"
    assert "stayed warm in L2" in verdict.judge(flat(record(), "write-read", 21.0, 15.67, 16.0, 16.0))["reasons"][1]
    # and where the graph is fast, the timer's resolution
    assert verdict.judge(flat(record(), "write-read", 21.0, 8.75, 10.0, 9.0))["result"] == "PASS"
    assert verdict.judge(flat(record(), "write-read", 21.0, 8.74, 10.0, 9.0))["result"] == "FAIL"
    # where the plain read loop runs faster than the graph, it is the floor (both are clean)
    assert verdict.judge(flat(record(), "write-read", 21.0, 14.70, 15.0, 16.0))["result"] == "PASS"
    warm = verdict.judge(flat(record(), "write-read", 21.0, 14.69, 15.0, 16.0))
    assert warm["result"] == "FAIL" and warm["reasons"][1] == (
        "FAIL: do_bench: 14.69 us against stock 21.00 us and the clean reference 15.00 us: faster than the clean "
        "reference 15.00 us (faster than the rotating-weight graph here) by more than 0.30 us (their spread or 2% "
        "of it), so data stayed warm in L2"
    )
    # a penalty exactly at the noise floor (the timer's resolution) is no penalty
    v = verdict.judge(flat(record(), "write-read", 50.25, 50.0, 50.0, 10.0))
    assert v["result"] == "NO-PENALTY" and v["reasons"][1] == (
        "do_bench: the stock flush shows no measurable penalty here: +0.25 us (+0.5%) against noise of 0.25 us"
    )
    assert verdict.judge(flat(record(), "write-read", 50.26, 50.0, 50.0, 10.0))["result"] == "PASS"
    # exactly 1 MB written by the GEMM under ncu is still clean
    assert verdict.judge(record(ncu={"write-read": 1.0}))["result"] == "PASS"
    assert verdict.judge(record(ncu={"write-read": 1.001}))["result"] == "FAIL"


def test_the_rounds_rule_needs_the_sign_test_count_of_rounds_below_the_bar():
    # One-sided sign test at 5%: P(k or more of n below | each round below with p = 1/2) < 5%:
    # 1/32 for 5 of 5, 7/64 for 5 of 6 (not enough), 11/1024 for 9 of 10, 56/1024 for 8 of 10.
    assert [verdict.rounds_needed(n) for n in (3, 4, 5, 6, 10)] == [None, None, 5, 6, 9]

    def shares_removed(*shares):  # stock 20, reference 10: a round removing s leaves 20 - 10 s
        return [20.0] * len(shares), [20.0 - 10.0 * s for s in shares], [10.0] * len(shares)

    # 9 of 10 rounds at 50% and one at 95%: the median rule passes it (its noise, the rounds'
    # spread, is 30% of the penalty ... no: it is 0), so both are shown on their own numbers
    rules = verdict.share_rules(*shares_removed(0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.95))
    assert (rules["below"], rules["needed"]) == (9, 9) and rules["rounds"] == pytest.approx(0.5 - 0.6)
    # 8 of 10 below: not evidence enough; the round that decides is the second from the top
    rules = verdict.share_rules(*shares_removed(0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.9, 0.95))
    assert (rules["below"], rules["needed"]) == (8, 9) and rules["rounds"] == pytest.approx(0.9 - 0.6)
    # a round without a penalty has no share and never counts as below
    stock, candidate, reference = shares_removed(0.5, 0.5, 0.5, 0.5, 0.5)
    reference[0] = 21.0
    rules = verdict.share_rules(stock, candidate, reference)
    assert rules["shares"][0] is None and rules["below"] == 4 and rules["rounds"] == math.inf


def test_a_flush_with_no_penalty_to_remove_is_judged_zero():
    shares = verdict.penalty_share([10.0, 10.0, 10.0], [9.0, 9.0, 9.0], [10.0, 10.5, 12.0])
    assert shares["share"] == 0.0 and shares["penalty_us"] == -0.5


def test_the_controls_exit_code_follows_the_wrong_ones():
    names = ("write-read", "control: stock write")
    counts = {"control: stock write": {"triton | write": 5000}}
    good = verdict.judge_controls(record(candidates=names, timed={"control: stock write": 18.8}, counts=counts))
    assert (good["result"], good["wrong"]) == ("PASS", [])
    bad = verdict.judge_controls(record(candidates=names, timed={"write-read": 18.8}, counts=counts))
    assert (bad["result"], bad["wrong"]) == ("FAIL", ["write-read"])


def test_every_policy_that_ran_is_listed():
    v = verdict.judge(record(counts={"write-read": {"triton | write-read": 2, "triton | read": 3}}))
    assert v["reasons"][0] == "triton flushed through cleanflush: read x 3, write-read x 2"


def test_a_penalty_under_one_microsecond_still_counts():
    assert verdict.penalty_share([10.5] * 3, [10.0] * 3, [10.0] * 3)["share"] == 1.0


def test_judge_timing_names_its_state():
    assert verdict.judge_timing("t", [20.0] * 3, [16.0] * 3, [16.0] * 3, None)[0] == "pass"
    assert verdict.judge_timing("t", [20.0] * 3, [19.0] * 3, [16.0] * 3, None)[0] == "fail"
    assert verdict.judge_timing("t", [16.1] * 3, [16.0] * 3, [16.0] * 3, None)[0] == "no-penalty"
    state, margin, why = verdict.judge_timing("t", [20.0] * 3, [15.0] * 3, [16.0] * 3, [15.5] * 3)
    assert (state, margin) == ("fail", None) and why == (
        "t: 15.00 us against stock 20.00 us and the clean reference 16.00 us: faster than the "
        "rotating-weight graph 15.50 us (cold weight, no launch gaps) by more than 0.31 us (their spread or 2% "
        "of it), so data stayed warm in L2"
    )


def test_a_candidate_with_no_counts_or_an_old_record_without_inductor():
    rec = record()
    del rec["flushes"]["write-read"]
    assert verdict.judge(rec)["reasons"][0] == "FAIL: no flush ran through cleanflush in triton"
    rec = record()
    del rec["timings_us"]["inductor"]
    assert verdict.judge(rec)["result"] == "PASS"


def test_a_control_that_claims_the_stock_write_is_told_so_in_inductor_too():
    name = "control: stock write"
    rec = record(candidates=(name,), timed={name: 18.8}, counts={name: {"triton | write": 50}}, inductor=(17.5, 17.4))
    rec["flushes"][name] = {"triton | write": 50, f"{INDUCTOR} | write": 400}
    reasons = verdict.judge_candidate(rec, name)["reasons"]
    assert f"FAIL: only the stock write ran in {INDUCTOR} (400 flushes)" in reasons


def test_one_failed_kind_of_evidence_is_not_undone_by_a_later_one():
    # the flush counts fail; timing, Inductor and ncu all pass: still FAIL
    rec = record(
        inductor=(17.5, 14.2),
        ncu={"write-read": 0.02},
        counts={"write-read": {"triton | write": 5, "triton | write-read": 5}},
    )
    assert verdict.judge(rec)["result"] == "FAIL"
    # timing fails, the Nsight Compute bytes are clean: still FAIL
    assert verdict.judge(record(timed={"write-read": 18.8}, ncu={"write-read": 0.02}))["result"] == "FAIL"


def test_no_do_bench_penalty_with_an_inductor_one_has_no_margin():
    rec = flat(record(inductor=(17.5, 14.2)), "write-read", 50.2, 50.0, 50.0, 10.0)
    v = verdict.judge(rec)
    assert v["result"] == "NO-PENALTY" and v["margin"] is None


# The LM head (128256 x 4096, 1 GiB of weight), as the H200 measured it: the stock penalty is
# +2.7% over the reference with rounds 0.2 us apart, and the rotating graph's rounds spread
# 248.74-251.25 us around do_bench.  Each rule's tolerance must come from that spread.


def lm_head(candidate):
    rec = record(candidates=("write-read",))
    t = rec["timings_us"]
    t["reference"]["write-read"] = [248.9, 249.0, 249.0, 249.1, 249.0]
    t["do_bench"]["stock"] = [255.6, 255.7, 255.7, 255.8, 255.7]
    t["do_bench"]["write-read"] = [c + d for c, d in zip([candidate] * 5, [-0.1, 0.0, 0.0, 0.1, 0.0])]
    t["rotating_graph"] = [248.74, 249.5, 250.16, 250.8, 251.25]
    rec["kernel"].update(n=128256, k=4096)
    return rec


def test_the_lm_head_passes_where_its_penalty_is_above_the_measured_noise():
    v = verdict.judge(lm_head(249.39))
    assert v["result"] == "PASS", v["reasons"]
    assert "removed 94% of the 6.70 us stock penalty" in v["reasons"][1]


def test_the_lm_head_still_fails_when_nothing_is_removed_or_data_stays_warm():
    # negative controls for the same noise: the stock flush's time, and a time under the
    # graph's spread
    assert verdict.judge(lm_head(255.6))["result"] == "FAIL"
    # under the faster clean timing (the reference, 249.0 us, here) by more than 2% of it
    warm = verdict.judge(lm_head(244.0))
    assert (
        warm["result"] == "FAIL"
        and "249.00 us (faster than the rotating-weight graph here) by more than 4.98 us" in warm["reasons"][1]
    )
    assert verdict.judge(lm_head(244.1))["result"] == "PASS"


# Recorded on the H200 by `python -m benchmarks verdicts` (benchmarks/results/h200/verdicts.json):
# the LM head's do_bench after write-read ran 1.8 us (0.7%) under the rotating graph, whose
# rounds spread 1.0 us.  A 1 GiB weight cannot stay warm in a 60 MiB L2.


def test_the_lm_head_just_under_the_graph_is_not_warm_data():
    rec = json.loads((DATA / "verify-h200-lm-head-under-graph.json").read_text())
    v = verdict.judge(rec)
    assert v["result"] == "PASS", v["reasons"]
    # the negative control: the same record 3% under the graph fails the warm-data rule
    t = rec["timings_us"]
    floor = statistics.median(t["rotating_graph"])
    t["do_bench"]["write-read"] = [0.97 * floor] * len(t["rotating_graph"])
    warm = verdict.judge(rec)
    assert warm["result"] == "FAIL" and "stayed warm in L2" in warm["reasons"][1]


def test_a_graph_behind_the_clean_reference_is_not_the_floor():
    # 28672 x 4096 under read: the rotating graph ran 2.2% behind the plain read loop, and
    # do_bench with it; both are clean, so the faster is the floor
    rec = json.loads((DATA / "verify-h200-graph-behind-reference.json").read_text())
    t = rec["timings_us"]
    assert statistics.median(t["rotating_graph"]) > 1.02 * statistics.median(t["reference"]["read"])
    v = verdict.judge(rec)
    assert v["result"] == "PASS", v["reasons"]
    # the negative control: 3% under that loop is warm data
    t["do_bench"]["read"] = [0.97 * statistics.median(t["reference"]["read"])] * rec["rounds"]
    warm = verdict.judge(rec)
    assert warm["result"] == "FAIL" and "stayed warm in L2" in warm["reasons"][1]


def test_the_lm_head_controls_are_all_judged_as_they_must_be():
    # A read of half the L2 removed 43-52% of the stock penalty in each of 5 rounds: the median
    # rule lets it pass (52%, and the reference's spread is 14% of the penalty), the rounds
    # rule does not.
    rec = json.loads((DATA / "verify-h200-lm-head-controls.json").read_text())
    v = verdict.judge_controls(rec)
    assert v["wrong"] == []
    half = v["candidates"]["control: read of half the L2"]
    assert "under 60% in 5 of 5 rounds (43% to 52%)" in half["reasons"][1]
    t, half = rec["timings_us"], "control: read of half the L2"
    rules = verdict.share_rules(t["do_bench"]["stock"], t["do_bench"][half], t["reference"][half])
    assert rules["median"] > 0 > rules["rounds"]
    # the negative control: one round that removed 70% is enough to leave it to the median rule
    stock, reference = t["do_bench"]["stock"][0], t["reference"][half][0]
    t["do_bench"][half][0] = reference + 0.3 * (stock - reference)
    assert verdict.judge_controls(rec)["wrong"] == ["control: read of half the L2"]


def test_no_penalty_says_how_large_the_penalty_and_the_noise_are():
    rec = lm_head(249.0)
    rec["timings_us"]["do_bench"]["stock"] = [249.0, 249.3, 248.9, 249.2, 249.1]
    v = verdict.judge(rec)
    assert v["result"] == "NO-PENALTY"
    assert v["reasons"][1] == (
        "do_bench: the stock flush shows no measurable penalty here: +0.10 us (+0.0%) against noise of 0.25 us"
    )


# Several shapes or devices in one command: one row each, one verdict and exit code.


def test_several_shapes_are_measured_one_row_each_with_one_overall_verdict(monkeypatch, capsys, tmp_path):
    seen = []

    def fake(options, progress):
        seen.append((options.device, options.n, options.k))
        timed = {"write-read": 18.8 if options.n == 6144 else 15.9}  # one shape fails
        rec = record(timed=timed)
        rec["kernel"].update(n=options.n, k=options.k, device=options.device)
        return rec

    monkeypatch.setattr(verify_measure, "measure", fake)
    monkeypatch.setattr(verify_measure, "devices", lambda wanted: [0, 1] if wanted == "all" else [0])
    path = tmp_path / "v.json"
    code = main(
        [
            "verify",
            "--shape",
            "2048,2048",
            "--preset",
            "llama-3.1-8b",
            "--shape",
            "4096,4096",
            "--device",
            "all",
            "--json",
            str(path),
        ]
    )
    shapes = [(2048, 2048), (4096, 4096), (6144, 4096), (4096, 14336), (28672, 4096), (128256, 4096)]
    assert seen == [(d, n, k) for d in (0, 1) for n, k in shapes]  # repeated shapes measured once
    assert code == EXIT_FAIL
    data = json.loads(path.read_text())
    assert data["verdict"] == {"result": "FAIL", "exit_code": EXIT_FAIL} and len(data["records"]) == 12
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("cuda:")]
    assert len(rows) == 12 and sum(line.endswith("FAIL") for line in rows) == 2
    assert "6144 x 4096 bfloat16 on cuda:1: FAIL" in text and text.rstrip().endswith("FAIL")


def test_the_overall_verdict():
    assert verdict.overall(["PASS", "NO-PENALTY"]) == "PASS"
    assert verdict.overall(["NO-PENALTY", "NO-PENALTY"]) == "NO-PENALTY"
    assert verdict.overall(["PASS", "FAIL", "NO-PENALTY"]) == "FAIL"


def test_controls_take_shapes_too(monkeypatch, capsys):
    names = ("write-read", "read", *CONTROLS)
    calls = []

    def fake(options, progress):
        calls.append((options.n, options.controls))
        return record(
            candidates=names,
            timed=dict.fromkeys(CONTROLS, 18.8),
            counts={
                "control: stock write": {"triton | write": 5000},
                "control: read that falls back": {"triton | write": 5000},
            },
        )

    monkeypatch.setattr(verify_measure, "measure", fake)
    monkeypatch.setattr(verify_measure, "devices", lambda wanted: [0])
    assert main(["verify", "--controls", "--shape", "4096,4096", "--shape", "28672,4096"]) == EXIT_OK
    assert calls == [(4096, True), (28672, True)]
    assert "6 of 6 right" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [(["--device", "x"], "or all"), (["--preset", "llama"], "invalid choice")])
def test_bad_devices_and_presets_are_usage_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["verify", *args])
    assert exit_.value.code == EXIT_USAGE and message in capsys.readouterr().err


def test_what_verify_asks_measure_for_and_writes_back(monkeypatch, capsys, tmp_path):
    asked = []

    def fake(options, progress):
        asked.append(options)
        progress("a step")
        rec = record()
        rec["kernel"].update(n=options.n, k=options.k)
        return rec

    monkeypatch.setattr(verify_measure, "measure", fake)
    monkeypatch.setattr(verify_measure, "devices", lambda wanted: [int(d) for d in wanted.split(",")])
    path = tmp_path / "v.json"
    before = time.perf_counter()
    assert main(["verify", "--json", str(path)]) == EXIT_OK
    took = time.perf_counter() - before
    assert asked.pop() == _verify.Options(
        n=4096, k=4096, dtype="bfloat16", device=0, rounds=5, ncu=False, controls=False, json_path=str(path)
    )
    err = capsys.readouterr().err
    assert re.fullmatch(r"\[ +\d+\.\d s\] a step\n", err)  # one GEMM: no line naming it
    single = json.loads(path.read_text())
    assert 0 <= single["elapsed_s"] <= round(took, 1) + 0.1 and single["elapsed_s"] == round(single["elapsed_s"], 1)

    args = ["verify", "--shape", "1,1", "--shape", "2,3", "--dtype", "float16", "--device", "2,0"]
    assert main([*args, "--rounds", "3", "--ncu", "--json", str(path)]) == EXIT_OK
    assert [(o.device, o.n, o.k, o.dtype, o.rounds, o.ncu) for o in asked] == [
        (d, n, k, "float16", 3, True) for d in (2, 0) for n, k in ((1, 1), (2, 3))
    ]
    err = capsys.readouterr().err
    assert "] cuda:2, 1 x 1 float16\n" in err and "] cuda:0, 2 x 3 float16\n" in err
    several = json.loads(path.read_text())
    assert several["schema"] == verdict.SCHEMA and isinstance(several["elapsed_s"], float)


def test_a_record_of_cannot_run_has_the_schema_and_exit_code(tmp_path, monkeypatch, capsys):
    def cannot(options, progress):
        raise verify_measure.CannotRun("no CUDA device")

    monkeypatch.setattr(verify_measure, "measure", cannot)
    path = tmp_path / "v.json"
    assert main(["verify", "--json", str(path)]) == EXIT_CANNOT_RUN
    assert capsys.readouterr().out == ""  # the record went to its file, and nothing else is said there
    assert json.loads(path.read_text()) == {
        "schema": verdict.SCHEMA,
        "result": "CANNOT-RUN",
        "reason": "no CUDA device",
        "exit_code": EXIT_CANNOT_RUN,
    }
