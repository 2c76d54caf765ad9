"""`cleanflush ab` on CPU: decision capture from the real Triton Autotuner (through Triton's
interpreter) and the real Inductor selector's feedback hook, the comparison, the report,
cache isolation, and the whole command end to end."""

import argparse
import json
import os
import re
import subprocess
import sys
import time

import pytest

import cleanflush
from cleanflush import _ab, _labels
from cleanflush import _decisions as decisions
from cleanflush._ab import compare as _ab_compare
from cleanflush._ab import report as _ab_report

from .conftest import environ_without_cleanflush, run_python
from .triton_layout import needs_autotune_do_bench

pytest.importorskip("triton")
pytest.importorskip("numpy")  # Triton's interpreter needs it

# A real @triton.autotune kernel run through Triton's interpreter on CPU tensors.  The
# timings come from a do_bench of the test's own (the autotuner takes one): under the stock
# flush the 16-wide config looks fastest, under a clean one the 64-wide one, as a dirty L2
# favours the kernel that moves fewer bytes.
TUNED = """
import json, os, sys
import torch, triton, triton.language as tl

CLEAN = os.environ.get("CLEANFLUSH") != "write"
TIMES = {16: (2.0, 1.5), 64: (1.2, 1.8)}  # BLOCK -> (clean ms, stock ms)
calls = []

def fake_bench(kernel_call, quantiles=None, **kw):
    kernel_call()  # the kernel really runs, through the interpreter
    block = calls[-1] if calls else 16
    t = TIMES[block][0 if CLEAN else 1]
    return [t, t, t]

def pre(nargs):
    calls.append(nargs["BLOCK"])

@triton.autotune(configs=[triton.Config({"BLOCK": 16}, pre_hook=pre), triton.Config({"BLOCK": 64}, pre_hook=pre)],
                 key=["n"], do_bench=fake_bench, restore_value=["x_ptr"])
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=m) + 1, mask=m)

for n in (256, 256, 512):  # the second call hits the autotuner's cache: no new decision
    x = torch.zeros(n)
    add_one[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
    assert float(x.sum()) == n
print("best", add_one.best_config, "cache", os.environ.get("TRITON_CACHE_DIR"))
"""


@needs_autotune_do_bench
def test_triton_autotuner_decisions_are_recorded(tmp_path):
    path = tmp_path / "d.jsonl"
    child = run_python(TUNED, {"CLEANFLUSH": "1", "CLEANFLUSH_DECISIONS": str(path), "TRITON_INTERPRET": "1"})
    assert child.returncode == 0, child.stderr[-3000:]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    counted = [d for d in lines if d["kind"] == "calls"]  # written at the process's exit
    lines = [d for d in lines if d["kind"] != "calls"]
    assert [d["key"] for d in lines] == ["(256, 'torch.float32')", "(512, 'torch.float32')"]
    assert [c["counts"] for c in counted] == [{"(256, 'torch.float32')": 2, "(512, 'torch.float32')": 1}]
    first = lines[0]
    assert first["kind"] == "triton" and first["op"].endswith(".add_one") and first["policy"] == "write-read"
    assert set(first["timings_ms"].values()) == {2.0, 1.2}
    assert "BLOCK: 64" in first["winner"] and first["timings_ms"][first["winner"]] == 1.2
    assert first["winner"] in child.stdout  # the autotuner's own best_config


@needs_autotune_do_bench
def test_nothing_is_recorded_without_the_variable(tmp_path):
    child = run_python(TUNED, {"CLEANFLUSH": "1", "TRITON_INTERPRET": "1"})
    assert child.returncode == 0, child.stderr[-2000:]
    assert not list(tmp_path.iterdir())


class Choice:
    def __init__(self, name, description=""):
        self.name, self.description = name, description


class Node:
    def __init__(self, size):
        self.size = size

    def get_size(self):
        return self.size

    def get_dtype(self):
        return "torch.bfloat16"


@pytest.fixture
def recording(tmp_path, monkeypatch):
    """cleanflush installed with CLEANFLUSH_DECISIONS set; yields the decisions file."""
    path = tmp_path / "d.jsonl"
    monkeypatch.setenv("CLEANFLUSH_DECISIONS", str(path))
    cleanflush.uninstall()
    cleanflush.install()
    return path


def test_inductor_feedback_saver_is_registered_records_and_is_removed(recording):
    select = pytest.importorskip("torch._inductor.select_algorithm")
    path = recording
    savers = select.get_algorithm_selector_cache().feedback_saver_fns
    ours = [fn for fn in savers if fn is decisions._inductor_feedback]
    assert len(ours) == 1
    timings = {
        Choice("triton_mm_12", "BLOCK_M=16, BLOCK_N=32"): 0.020,
        Choice("mm"): 0.015,
        Choice("triton_mm_13", "BLOCK_M=64, BLOCK_N=64"): float("inf"),
    }
    ours[0](timings, "mm", [Node([1, 4096]), Node([4096, 4096])], list(timings), lambda: {}, {})
    line = json.loads(path.read_text())
    assert line["kind"] == "inductor" and line["op"] == "mm"
    assert line["key"] == "1x4096 bfloat16, 4096x4096 bfloat16"
    assert line["winner"] == "mm"
    assert "triton_mm BLOCK_M=16, BLOCK_N=32" in line["timings_ms"]  # the running index is gone
    cleanflush.uninstall()
    assert decisions._inductor_feedback not in select.get_algorithm_selector_cache().feedback_saver_fns


def decision(op, key, timings, kind="triton"):
    return {"kind": kind, "op": op, "key": key, "timings_ms": timings, "winner": min(timings, key=timings.get)}


def runs(*timings, op="k", key="1"):
    """One run per mapping of choice -> ms, each run tuning one decision (winner: the fastest)."""
    return [[decision(op, key, t)] for t in timings]


def record_of(stock, clean):
    """What ``_ab.run`` returns for these runs, as far as the report reads it."""
    return {
        "command": ["python", "x.py"],
        "policy": "write-read",
        "runs": len(stock),
        "runs_compared": len(stock),
        "run_codes": [],
        "skipped_lines": [],
        "interrupted": False,
        "comparison": _ab_compare.compare(stock, clean),
    }


STOCK_PICKS_A = runs({"a": 1.5, "b": 1.8}, {"a": 1.4, "b": 1.9})


def test_a_pick_slower_beyond_the_clean_runs_spread_is_changed_and_priced():
    clean = runs({"a": 2.0, "b": 1.2}, {"a": 2.1, "b": 1.25})
    cmp = _ab_compare.compare(STOCK_PICKS_A, clean)
    [d] = cmp["changed"]
    assert (d["class"], d["stock_winner"], d["clean_winner"]) == ("changed", "a", "b")
    each = [2.0 / 1.2 - 1, 2.1 / 1.25 - 1]
    assert d["cost"] == pytest.approx(sum(each) / 2)
    assert (d["cost_low"], d["cost_high"]) == pytest.approx((min(each), max(each)))
    assert d["clean_spread"] == pytest.approx(max(each) - min(each))
    assert cmp["classes"]["changed"] == 1
    assert cmp["agreement"] == {
        "write": {"runs": 2, "made_in_every_run": 1, "agree": 1, "agree_by_price": 1},
        "clean": {"runs": 2, "made_in_every_run": 1, "agree": 1, "agree_by_price": 1},
    }


def test_a_pick_slower_inside_the_clean_runs_spread_is_within_the_noise():
    # the negative control of the test above: the same picks, but the clean runs themselves
    # move the a/b ratio by more than a is slower on the whole
    clean = runs({"a": 1.30, "b": 1.20}, {"a": 1.25, "b": 1.24})
    [d] = _ab_compare.compare(STOCK_PICKS_A, clean)["decisions"]
    assert d["class"] == "within noise" and not d["changed"]
    assert "inside the write-read runs' spread of 7.5%" in d["reason"]
    # a pick that ties with the clean winner in one clean run is never a change, however small the spread
    tie = {**decision("k", "1", {"a": 1.20, "b": 1.20}), "winner": "b"}
    clean = [[decision("k", "1", {"a": 1.50, "b": 1.20})], [tie]]
    assert _ab_compare.compare(STOCK_PICKS_A, clean)["decisions"][0]["class"] == "within noise"


def test_runs_of_a_side_that_disagree_make_the_decision_unstable_and_say_which_side():
    disagree = runs({"a": 1.0, "b": 2.0}, {"a": 2.0, "b": 1.0})
    clean_b = runs({"a": 2.0, "b": 1.0}, {"a": 2.1, "b": 1.0})
    [d] = _ab_compare.compare(disagree, clean_b)["decisions"]
    assert (d["class"], d["unstable_side"]) == ("unstable", "write")
    assert d["reason"] == "the stock runs disagree (a in 1 of 2 runs, b in 1); every write-read run picked b"
    [d] = _ab_compare.compare(STOCK_PICKS_A, disagree)["decisions"]
    assert (d["class"], d["unstable_side"]) == ("unstable", "write-read")
    [d] = _ab_compare.compare(disagree, disagree, "read")["decisions"]
    assert (d["class"], d["unstable_side"]) == ("unstable", "both")
    assert d["reason"].startswith("the read runs disagree")
    cmp = _ab_compare.compare(disagree, clean_b)
    assert cmp["agreement"]["write"]["agree"] == 0 and cmp["agreement"]["clean"]["agree"] == 1
    assert cmp["changed"] == []


def test_stock_runs_that_disagree_but_all_lose_beyond_the_noise_are_a_change():
    stock = runs({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 2.0, "b": 1.0, "c": 3.0})
    clean = runs({"a": 2.0, "b": 2.2, "c": 1.0}, {"a": 2.1, "b": 2.3, "c": 1.0})
    [d] = _ab_compare.compare(stock, clean)["changed"]
    assert d["clean_winner"] == "c" and "the stock runs disagree" in d["reason"]
    each = [(p["pick"], p["runs"], round(p["cost_low"], 6), round(p["cost_high"], 6)) for p in d["stock_picks"]]
    assert each == [("a", 1, 1.0, 1.1), ("b", 1, 1.2, 1.3)]
    report = _ab_report.format_report(record_of(stock, clean))
    lines = report.splitlines()
    # each pick's own time in the clean runs (median), so a ratio reads as the microseconds it is
    assert (
        "    stock picked a in 1 of 2 runs: +105.0% slower by the clean timing (runs: +100.0% .. +110.0%), 2050.00 us"
        in lines
    )
    assert "    write-read picked c, 1000.00 us" in lines


def test_every_run_picking_the_same_is_unchanged():
    same = runs({"a": 1.0, "b": 2.0}, {"a": 1.1, "b": 2.0})
    [d] = _ab_compare.compare(same, same)["decisions"]
    assert d["class"] == "unchanged" and d["cost"] is None


def test_one_run_a_side_cannot_tell_a_change_from_noise():
    [d] = _ab_compare.compare(runs({"a": 1.5, "b": 1.8}), runs({"a": 2.0, "b": 1.2}))["decisions"]
    assert d["class"] == "undecided" and d["cost"] == pytest.approx(2.0 / 1.2 - 1)
    assert "one write-read run: its noise is unknown" in d["reason"]


def test_a_stock_pick_the_clean_runs_did_not_time_is_undecided():
    clean = runs({"b": 1.2}, {"b": 1.25})
    [d] = _ab_compare.compare(STOCK_PICKS_A, clean)["decisions"]
    assert d["class"] == "undecided" and d["cost"] is None


def test_a_decision_of_one_side_only_and_a_crashed_run_are_kept_apart():
    stock = [[decision("k", "1", {"a": 1.0, "b": 2.0}), decision("only", "s", {"x": 1.0})], []]  # run 2 crashed
    clean = runs({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.1})
    cmp = _ab_compare.compare(stock, clean)
    assert cmp["only_stock"] == [["triton", "only", "s"]]
    assert cmp["agreement"]["write"] == {"runs": 2, "made_in_every_run": 0, "agree": 0, "agree_by_price": 0}
    [d] = cmp["decisions"]
    assert d["class"] == "unchanged" and d["stock_winners"] == ["a"] and d["clean_winners"] == ["a", "a"]
    assert d["stock_winner_slower_by"] == d["cost"]
    mirrored = _ab_compare.compare(clean, stock)
    assert mirrored["only_clean"] == [["triton", "only", "s"]] and mirrored["only_stock"] == []


def test_timings_shown_per_choice_are_the_medians_over_a_sides_runs():
    stock = runs({"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 2.0}, {"a": 1.0, "b": 2.0})
    clean = runs({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0})
    [d] = _ab_compare.compare(stock, clean)["decisions"]
    assert d["timings_ms"]["a"] == {"stock": 1.0, "clean": 1.0}
    assert d["class"] == "unstable"  # b won one stock run
    ratios = sorted(_ab_compare.compare(STOCK_PICKS_A, STOCK_PICKS_A)["ratio_stock_over_clean"]["values"])
    assert ratios == [1.0, 1.0]


def test_report_says_when_nothing_changed_and_when_nothing_was_tuned():
    same = [[decision("k", "1", {"a": 1.0, "b": 2.0})]]
    result = record_of(same, same)
    assert "the dirty flush changed no decision here beyond the noise and the 2% floor" in _ab_report.format_report(
        result
    )
    result["comparison"] = _ab_compare.compare([[]], [[]])
    assert "no autotuning decision was recorded" in _ab_report.format_report(result)


def test_the_report_counts_the_decisions_of_each_kind_and_says_when_one_run_cannot_agree():
    stock = [[decision("k", "1", {"a": 1.0}), decision("mm", "2", {"a": 1.0}, "inductor")]]
    stock[0] += [decision("t", "3", {"a": 1.0}, "inductor-kernel"), decision("t", "4", {"a": 1.0}, "inductor-kernel")]
    stock[0] += [decision("t", "3", {"a": 1.0}, "inductor-coordesc")]
    lines = _ab_report.format_report(record_of(stock, stock)).splitlines()
    assert lines[3] == (
        "autotuning decisions matched in both: 5 (Triton autotuner 1, Inductor max-autotune 1, "
        "Inductor kernel configs 2, their coordinate descent 1); priced independently: 0"
    )
    assert lines[4] == (
        "reproducible: stock runs agree on 5 of 5 decisions (5 by price), write-read runs on 5 of 5 (5 by price) "
        "(one run a side: nothing to agree with)"
    )
    two = _ab_report.format_report(record_of(stock * 2, stock * 2)).splitlines()
    assert two[4] == (
        "reproducible: stock runs agree on 5 of 5 decisions (5 by price), write-read runs on 5 of 5 (5 by price)"
    )


def test_a_runs_folder_that_is_there_already_is_used(tmp_path):
    # a kept folder's end-to-end timing folder outlives the command that made it
    again = str(tmp_path / "end-to-end")
    assert _ab.run_env({}, _ab.Side("read", "read"), again) == _ab.run_env({}, _ab.Side("read", "read"), again)


def test_an_interrupted_ab_records_no_end_to_end_timing(monkeypatch, capsys, tmp_path):
    def interrupted(*args, **kwargs):  # Ctrl-C while the first run's job runs
        raise KeyboardInterrupt

    monkeypatch.setattr(_ab.subprocess, "run", interrupted)
    result, code = _ab.run([sys.executable, "-c", "pass"], runs=1, keep=str(tmp_path))
    assert (code, result["interrupted"], result["runs_compared"]) == (130, True, 0)
    assert result["end_to_end"] is None and result["run_codes"] == []
    assert capsys.readouterr().err.splitlines()[-1] == (
        "cleanflush ab: interrupted; the report covers the runs that finished"
    )


def test_a_key_tuned_twice_in_one_run_counts_once_with_the_first_pick():
    first, again = decision("k", "1", {"a": 1.0, "b": 2.0}), decision("k", "1", {"a": 2.0, "b": 1.0})
    assert _ab_compare.by_key([[first, again]]) == {("triton", "k", "1"): [first]}


def test_the_clock_counts_whole_minutes_and_seconds():
    assert [_ab._clock(s) for s in (0, 59.9, 60, 120, 3599)] == ["0m00s", "0m59s", "1m00s", "2m00s", "59m59s"]


def test_the_report_names_its_figure():
    stock = runs({"a": 1.0, "b": 2.0})
    assert "figure: ab.png" in _ab_report.format_report({**record_of(stock, stock), "figure": "ab.png"}).splitlines()
    assert not any(
        line.startswith("figure:") for line in _ab_report.format_report(record_of(stock, stock)).splitlines()
    )


def test_every_run_gets_caches_of_its_own(tmp_path):
    a = _ab.run_env({}, _ab.Side("write", "write"), str(tmp_path / "1"))
    b = _ab.run_env({}, _ab.Side("write-read", "write-read"), str(tmp_path / "2"))
    for key in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CLEANFLUSH_DECISIONS"):
        assert a[key] != b[key]
    assert a["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] == "1" and (a["CLEANFLUSH"], b["CLEANFLUSH"]) == (
        "write",
        "write-read",
    )


@needs_autotune_do_bench
def test_ab_end_to_end_finds_the_flip(tmp_path):
    script = tmp_path / "tune.py"
    script.write_text(TUNED)
    out = tmp_path / "ab.json"
    child = run_python(
        "import sys\nfrom cleanflush.__main__ import main\n"
        f"sys.exit(main(['ab', '--runs', '2', '--keep', {str(tmp_path / 'runs')!r}, '--json', {str(out)!r}, "
        f"'--', sys.executable, {str(script)!r}]))",
        {"TRITON_INTERPRET": "1"},
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.count("best") == 4  # the command ran 4 times, its output untouched
    caches = {line.split("cache ")[1] for line in child.stdout.splitlines() if line.startswith("best")}
    assert len(caches) == 4  # a fresh cache folder per run
    assert "changed by the dirty flush: 2 of 2" in child.stdout
    assert "+66.7% slower by the clean timing" in child.stdout
    assert "reproducible: stock runs agree on 2 of 2 decisions (2 by price), write-read runs on 2 of 2" in child.stdout
    assert "cleanflush ab: run 1 of 4: write (0m00s elapsed)" in child.stderr
    assert re.search(r"run 4 of 4: write-read \(\d+m\d\ds elapsed, about \d+m\d\ds left\)", child.stderr)
    assert "end to end: no run compiled an Inductor program" in child.stdout
    data = json.loads(out.read_text())
    assert [r["policy"] for r in data["run_codes"]] == ["write", "write-read"] * 2
    assert len(data["comparison"]["changed"]) == 2
    assert data["interrupted"] is False and data["elapsed_s"] > 0


def test_ab_reports_a_failed_run(tmp_path):
    child = run_python(
        "import sys\nfrom cleanflush.__main__ import main\n"
        "sys.exit(main(['ab', '--', sys.executable, '-c', 'raise SystemExit(3)']))"
    )
    assert child.returncode == 1
    assert "exited with code 3" in child.stdout
    assert "no autotuning decision was recorded" in child.stdout


def test_ab_refuses_the_stock_policy_as_the_clean_side():
    child = run_python(
        "import sys\nfrom cleanflush.__main__ import main\n"
        "sys.exit(main(['ab', '--policy', 'write', '--', sys.executable, '-c', 'pass']))"
    )
    assert child.returncode == 2 and "write-read or read" in child.stderr
    assert child.stdout == ""  # the command never ran


def test_inductor_kernel_config_tuning_is_recorded(recording, monkeypatch):
    # The real CachingAutotuner class, wrapped; its GPU benchmark stood in for by a method
    # returning launcher timings, as torch 2.13's benchmark_all_configs does.
    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    path = recording
    wrapper = vars(heuristics.CachingAutotuner)["benchmark_all_configs"]
    assert type(wrapper).__name__ == "FunctionWrapper"

    class Launcher:
        def __init__(self, config):
            self.config = config

    tuner = object.__new__(heuristics.CachingAutotuner)
    tuner.inductor_meta = {"kernel_name": "triton_red_fused_mv_0"}
    tuner.size_hints = {"x": 4096, "r0_": 4096}
    fast, slow = (
        Launcher("XBLOCK: 1, R0_BLOCK: 2048, num_warps: 16"),
        Launcher("XBLOCK: 8, R0_BLOCK: 512, num_warps: 8"),
    )
    monkeypatch.setattr(wrapper, "__wrapped__", lambda *a, **k: {fast: 0.013, slow: 0.019})
    assert tuner.benchmark_all_configs() == {fast: 0.013, slow: 0.019}
    line = json.loads(path.read_text())
    assert (line["kind"], line["op"], line["winner"]) == ("inductor-kernel", "triton_red_fused_mv_0", fast.config)
    cleanflush.uninstall()
    assert type(vars(heuristics.CachingAutotuner)["benchmark_all_configs"]).__name__ == "function"


def test_ab_with_a_command_that_cannot_start():
    child = run_python(
        "import sys\nfrom cleanflush.__main__ import main\nsys.exit(main(['ab', '--', 'no-such-command-here']))"
    )
    assert child.returncode == 1 and "Traceback" not in child.stderr
    assert "cannot start 'no-such-command-here': No such file or directory\n" in child.stderr
    assert "exited with code 127" in child.stdout


def test_a_key_filled_from_the_disk_cache_is_not_recorded(recording):
    # Triton's Autotuner with cache_results: a disk hit fills the key without benchmarking
    # and leaves configs_timings as the previous key left it
    class Tuner:
        def __init__(self):
            self.cache, self.configs_timings = {}, {"old config": [1.0]}

    tuner = Tuner()

    def disk_hit(self, *args, **kwargs):
        self.cache[(256,)] = "cfg from disk"

    def benchmarked(self, *args, **kwargs):
        self.cache[(512,)] = "new best"
        self.configs_timings = {"new best": [0.5], "other": [0.9]}

    for stock in (disk_hit, benchmarked):  # through the wrapper that Autotuner.run gets
        decisions._autotuner_run(lambda stock=stock: stock(tuner), tuner, (), {})
    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    assert [d["key"] for d in lines] == ["(512,)"] and lines[0]["winner"] == "new best"


def test_the_winner_is_the_fastest_choice_that_ran():
    assert decisions._winner({"a": 2.0, "b": 1.0, "c": 3.0}) == "b"
    assert decisions._winner({"failed": float("inf"), "nan": float("nan"), "ran": 5.0}) == "ran"
    assert decisions._winner({"failed": float("inf"), "nan": float("nan")}) is None
    assert decisions._winner({}) is None


def test_a_kernel_decision_word_for_word():
    class Launcher:
        def __init__(self, config):
            self.config = config

    class Tuner:
        inductor_meta = {"kernel_name": "triton_red_fused_mv_0"}
        size_hints = {"x": 4096}

    fast, slow = Launcher("XBLOCK: 1"), Launcher("XBLOCK: 8")
    assert decisions.kernel_decision(Tuner(), {fast: 0.013, slow: [0.019, 0.018, 0.02]}) == {
        "kind": "inductor-kernel",
        "op": "triton_red_fused_mv_0",
        "key": "{'x': 4096}",
        "timings_ms": {"XBLOCK: 1": 0.013, "XBLOCK: 8": 0.019},
        "winner": "XBLOCK: 1",
    }

    def triton_poi_0():
        pass

    class Bare:  # no inductor_meta, no size_hints; launchers without a config: their str
        fn = triton_poi_0

    assert decisions.kernel_decision(Bare(), {"launcher-a": 1.0}) == {
        "kind": "inductor-kernel",
        "op": "triton_poi_0",
        "key": "",
        "timings_ms": {"launcher-a": 1.0},
        "winner": "launcher-a",
    }
    assert decisions.kernel_decision(object(), {})["op"] == "?"


def test_choice_labels_and_shapes_are_the_same_in_every_process():
    assert decisions.choice_label(Choice("triton_mm_12", "BLOCK_M=16")) == "triton_mm BLOCK_M=16"
    assert decisions.choice_label(Choice("mm", None)) == "mm"

    class ExternKernelChoice:  # no name: its type's
        description = "cublas"

    assert decisions.choice_label(ExternKernelChoice()) == "ExternKernelChoice cublas"
    assert _labels.shape(Node([1, 4096])) == "1x4096 bfloat16"
    assert _labels.shape(object()) == "object"


def test_a_decision_that_cannot_be_read_is_said_once_and_the_timings_pass_through(recording):
    timings = {"not a launcher": "not a time"}
    with pytest.warns(RuntimeWarning, match=r"could not read an Inductor kernel's autotuning \(ValueError"):
        result = decisions._benchmark_all_configs(lambda *a, **k: (a, k, timings)[2], object(), (1,), {"k": 2})
    assert result is timings
    assert "decisions:kernel" in cleanflush._state.STATE.warned
    with pytest.warns(RuntimeWarning, match=r"could not read an Inductor autotuning decision \(TypeError"):
        decisions._inductor_feedback(None, "mm", [])
    assert "decisions:inductor" in cleanflush._state.STATE.warned
    assert not recording.exists()


def test_the_benchmark_gets_the_callers_arguments(recording):
    seen = []
    decisions._benchmark_all_configs(lambda *a, **k: seen.append((a, k)) or {}, object(), (1, 2), {"k": 3})
    assert seen == [((1, 2), {"k": 3})]


def test_a_recorded_line_word_for_word(recording):
    """Every key of a line, as `cleanflush ab` reads it; the op named after the tuned
    function (``base_fn`` before ``fn``: Triton's Autotuner wraps a heuristics layer)."""

    def kernel():
        pass

    class Tuner:
        def __init__(self, **attributes):
            self.cache, self.configs_timings = {}, None
            vars(self).update(attributes)

    for tuner in (Tuner(base_fn=kernel, fn="a heuristics wrapper"), Tuner(fn=kernel)):

        def benchmarked(tuner=tuner):
            tuner.cache[(64,)] = "BLOCK=32"
            tuner.configs_timings = {"BLOCK=32": [0.5, 0.4, 0.6], "BLOCK=64": 0.9}

        with cleanflush.policy("read"):
            decisions._autotuner_run(benchmarked, tuner, (), {})
    lines = [json.loads(line) for line in recording.read_text().splitlines()]
    assert (
        lines
        == [
            {
                "pid": os.getpid(),
                "policy": "read",
                "rule": "fastest",
                "kind": "triton",
                "op": f"{__name__}.kernel",
                "key": "(64,)",
                "timings_ms": {"BLOCK=32": 0.5, "BLOCK=64": 0.9},
                "winner": "BLOCK=32",
            }
        ]
        * 2
    )
    assert decisions.triton_decision(object(), 1, {}, None)["op"] == "?.?"


def test_a_tuner_without_a_cache_or_timings_records_nothing_and_says_nothing(recording, recwarn):
    class Bare:
        pass

    class CacheOnly:
        def __init__(self):
            self.cache = {}

    tuner = CacheOnly()
    assert decisions._autotuner_run(lambda: "result", Bare(), (), {}) == "result"
    assert decisions._autotuner_run(lambda: tuner.cache.update({(1,): "cfg"}), tuner, (), {}) is None
    assert not recording.exists() and not [w for w in recwarn if "cleanflush" in str(w.message)]


def test_a_triton_decision_that_cannot_be_read_is_said_once(recording):
    class Tuner:
        def __init__(self):
            self.cache, self.configs_timings = {}, None

    tuner = Tuner()

    def benchmarked():
        tuner.cache[(1,)] = "x"
        tuner.configs_timings = 42  # not a mapping

    with pytest.warns(RuntimeWarning) as said:
        assert decisions._autotuner_run(benchmarked, tuner, (), {}) is None
        tuner.configs_timings = None
        decisions._autotuner_run(benchmarked, tuner, (), {})  # the same failure: not said again
    assert [str(w.message) for w in said] == [
        "cleanflush: could not read a Triton autotuning decision (TypeError(\"'int' object is not iterable\"))"
    ]


def test_a_decisions_file_that_cannot_be_written_is_said_once(tmp_path, monkeypatch):
    monkeypatch.setenv("CLEANFLUSH_DECISIONS", str(tmp_path))  # a directory
    with pytest.warns(RuntimeWarning) as said:
        decisions.write({"kind": "x"})
        decisions.write({"kind": "y"})
    assert len(said) == 1 and str(said[0].message).startswith(
        f"cleanflush: could not record an autotuning decision in {str(tmp_path)!r} ("
    )


def test_a_choice_without_a_description_is_named_by_its_kind():
    class Bare:
        name = "extern_mm_3"

    assert decisions.choice_label(Bare()) == "extern_mm"


# An A/B run survives whatever its job writes or however it dies.


def ab_main(*args, env=None, timeout=300):
    """`cleanflush ab ARGS` in a fresh process, with the environment of this one."""
    clean = environ_without_cleanflush()
    return subprocess.run(
        [sys.executable, "-m", "cleanflush", "ab", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**clean, **(env or {})},
    )


WRITES = """
import json, os, sys
stock = os.environ["CLEANFLUSH"] == "write"
line = {"kind": "triton", "op": "k", "key": "256", "winner": "a" if stock else "b",
        "timings_ms": {"a": 1.0, "b": 2.0 if stock else 0.5, "bad": float("inf")}}
with open(os.environ["CLEANFLUSH_DECISIONS"], "a") as f:
    f.write(json.dumps(line) + "\\n")
    f.write(sys.argv[1])
"""


@pytest.mark.parametrize(
    "garbage",
    [
        '{"kind": "triton", "op": "k", "ke',
        "not json at all\n",
        "[1, 2, 3]\n",
        '{"kind": "triton"}\n',
        '{"kind": "triton", "op": 1, "key": "x", "winner": "a", "timings_ms": {}}\n',
    ],
)
def test_bad_decision_lines_are_skipped_and_named_and_every_run_finishes(tmp_path, garbage):
    out = ab_main("--runs", "2", "--json", "--", sys.executable, "-c", WRITES, garbage)
    assert out.returncode == 0, out.stderr
    record = json.loads(out.stdout)  # strict JSON: no NaN, no Infinity
    assert [r["code"] for r in record["run_codes"]] == [0, 0, 0, 0]
    assert len(record["skipped_lines"]) == 4 and all(":2: skipped, " in line for line in record["skipped_lines"])
    [changed] = record["comparison"]["changed"]
    assert (changed["stock_winner"], changed["clean_winner"]) == ("a", "b")
    assert set(changed["timings_ms"]) == {"a", "b"}  # the failed config times nothing
    assert out.stderr.count("skipped, ") == 4


def test_the_inf_of_a_failed_config_never_reaches_a_ratio():
    for text in (
        '{"kind":"t","op":"o","key":"k","winner":"a","timings_ms":{"a":1.0,"b":Infinity}}',
        '{"kind":"t","op":"o","key":"k","winner":"a","timings_ms":{"a":1.0,"b":NaN}}',
    ):
        d = _ab.decision(text)
        assert d["timings_ms"] == {"a": 1.0} and d["failed_choices"] == ["b"]


def test_a_kept_folder_never_lends_a_run_another_runs_decisions(tmp_path):
    keep = tmp_path / "runs"
    first = ab_main("--keep", str(keep), "--json", "--", sys.executable, "-c", WRITES, "")
    assert len(json.loads(first.stdout)["comparison"]["decisions"]) == 1
    # beside them: the lock of the ab using it, the calls its runs recorded
    runs = sorted(p.name for p in keep.iterdir() if p.name.startswith("run"))
    assert runs == ["run1-write", "run2-write-read", "run3-write", "run4-write-read"]
    quiet = ab_main("--keep", str(keep), "--json", "--", sys.executable, "-c", "pass")  # the job changed
    assert json.loads(quiet.stdout)["comparison"]["decisions"] == []
    assert not (keep / "run1-write" / "decisions.jsonl").exists()


def test_no_temporary_folder_is_left_behind(tmp_path):
    before = set(tmp_path.iterdir())
    out = ab_main("--", sys.executable, "-c", "pass", env={"TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert set(tmp_path.iterdir()) == before


def test_a_job_that_deletes_the_runs_folder_still_gets_its_report(tmp_path):
    gone = "import os, shutil; shutil.rmtree(os.path.dirname(os.path.dirname(os.environ['CLEANFLUSH_DECISIONS'])))"
    out = ab_main("--json", "--", sys.executable, "-c", gone, env={"TMPDIR": str(tmp_path)})
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert json.loads(out.stdout)["comparison"]["decisions"] == []
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_stops_the_job_and_reports_what_it_has(tmp_path):
    import signal
    import time

    started = tmp_path / "started"
    # a job that dies of SIGINT as a shell command does, without a traceback of its own
    job = (
        f"import pathlib, signal, time; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        f"pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    )
    env = environ_without_cleanflush()
    proc = subprocess.Popen(
        [sys.executable, "-m", "cleanflush", "ab", "--", sys.executable, "-c", job],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a test run started in the background (or by mutmut) inherits SIGINT ignored: as in a
        # terminal, the command gets it with the default disposition
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group
    try:
        stdout, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        raise AssertionError(f"ab did not end after Ctrl-C; it said: {stderr[-2000:]}") from None
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "cleanflush ab: interrupted; the report covers the runs that finished" in stderr.splitlines()
    assert "interrupted: 0 of 2 pairs of runs compared" in stdout


def test_long_winner_labels_are_cut_to_the_width():
    assert _ab_report.short("x" * 90) == "x" * 90
    assert _ab_report.short("x" * 91) == "x" * 87 + "..."
    assert _ab_report.short("abcdefgh", 6) == "abc..."
    stock = runs({"a" * 120: 1.0, "b": 2.0}, {"a" * 120: 1.0, "b": 2.0})
    clean = runs({"a" * 120: 3.0, "b": 2.0}, {"a" * 120: 3.0, "b": 2.0})
    lines = _ab_report.format_report(record_of(stock, clean)).splitlines()
    assert f"    stock picked {'a' * 87}...: +50.0% slower by the clean timing, 3000.00 us" in lines


def ab_result(changed):
    stock = runs({"a": 1.0, "b": 2.0}, {"a": 1.0, "b": 2.0})
    clean = runs(*[{"a": 3.0, "b": 2.0} if changed else {"a": 1.0, "b": 2.0}] * 2)
    return {"policy": "write-read", "runs_compared": 2, "comparison": _ab_compare.compare(stock, clean)}


@pytest.mark.parametrize("changed", [True, False])
def test_the_figure_is_a_png(tmp_path, changed):
    pytest.importorskip("matplotlib")
    from cleanflush._ab import figure as _ab_figure

    path = tmp_path / "ab.png"
    assert _ab_figure.draw(ab_result(changed), str(path)) is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_no_matplotlib_is_said_instead_of_a_figure(tmp_path, monkeypatch):
    from cleanflush._ab import figure as _ab_figure

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    path = tmp_path / "ab.png"
    said = _ab_figure.draw(ab_result(True), str(path))
    assert said == "matplotlib is not installed: no figure (pip install matplotlib)"
    assert not path.exists()


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("[1, 2, 3]", "not a JSON object but list"),
        ('{"kind": "triton", "winner": "a"}', "no op, key, timings_ms"),
        ('{"kind": "t", "op": "o", "key": "k", "winner": "a", "timings_ms": [1.0]}', "timings_ms is not a mapping"),
        (
            '{"kind": "t", "op": "o", "key": "k", "winner": "a", "timings_ms": {"a": "1"}}',
            "timings_ms is not a mapping",
        ),
        (
            '{"kind": "t", "op": 1, "key": "k", "winner": "a", "timings_ms": {"a": 1.0}}',
            "kind, op, key or winner is not",
        ),
    ],
)
def test_a_line_that_is_no_decision_says_what_is_wrong(line, why):
    with pytest.raises(ValueError) as found:
        _ab.decision(line)
    full = {
        "not a JSON object but list",
        "no op, key, timings_ms",
        "timings_ms is not a mapping of choices to numbers",
        "kind, op, key or winner is not a string",
    }
    assert str(found.value) in full and str(found.value).startswith(why)


def test_long_names_in_the_lists_below_the_headline_are_cut():
    op, key, label = "o" * 100, "k" * 100, "w" * 100
    stock = [[decision(op, key, {label: 1.0, "b": 2.0})], [decision(op, key, {label: 2.0, "b": 1.0})]]
    clean = [[decision(op, key, {label: 2.0, "b": 1.0})], [decision(op, key, {label: 2.1, "b": 1.0})]]
    lines = _ab_report.format_report(record_of(stock, clean)).splitlines()
    [line] = [line for line in lines if line.startswith("  triton ")]
    assert line.startswith(
        f"  triton {'o' * 67}... [{'k' * 67}...]: the stock runs disagree ({'w' * 57}... in 1 of 2 runs"
    )


@pytest.mark.parametrize(("text", "runs"), [("1", 1), ("12", 12), ("0", None), ("-1", None), ("two", None)])
def test_runs_is_a_positive_integer(text, runs):
    from cleanflush.cli import ab

    if runs is not None:
        assert ab.positive(text) == runs
        return
    with pytest.raises(argparse.ArgumentTypeError, match=f"^expected a positive integer, got {text!r}$"):
        ab.positive(text)


def with_winner(timings, winner):
    return {**decision("k", "1", timings), "winner": winner}


def test_each_class_says_why_in_so_many_words():
    long = "w" * 70
    stock_ab = runs({"a": 1.0, "b": 2.0}, {"a": 2.0, "b": 1.0})
    clean_b = runs({"a": 2.0, "b": 1.0}, {"a": 2.2, "b": 1.0})
    cases = [
        (stock_ab, clean_b, "the stock runs disagree (a in 1 of 2 runs, b in 1); every write-read run picked b"),
        (clean_b, stock_ab, "the write-read runs disagree (a in 1 of 2 runs, b in 1)"),
        (
            stock_ab,
            stock_ab,
            "the write-read runs disagree (a in 1 of 2 runs, b in 1), "
            "and so do the stock runs (a in 1 of 2 runs, b in 1)",
        ),
        (runs({"b": 1.0, "a": 2.0}) * 2, clean_b, "every run picked b"),
        (runs({long: 1.0, "b": 2.0}) * 2, runs({long: 1.0, "b": 2.0}) * 2, f"every run picked {'w' * 57}..."),
        (
            runs({"a": 1.0, "b": 2.0}) * 2,
            clean_b,
            "every write-read run picked b, and the stock pick is slower in "
            "each, by more than the write-read runs' spread of 20.0%",
        ),
        (runs({"a": 1.0, "b": 2.0}) * 2, runs({"b": 1.0}) * 2, "the write-read runs did not time the stock pick"),
    ]
    for stock, clean, reason in cases:
        [d] = _ab_compare.compare(stock, clean)["decisions"]
        assert d["reason"] == reason
        assert {"class", "reason", "cost", "cost_low", "cost_high", "clean_spread"} <= set(d)
    [d] = _ab_compare.compare(runs({"b": 1.0, long: 2.0}, {long: 1.0, "b": 2.0}), runs({long: 1.0, "b": 2.0}) * 2)[
        "decisions"
    ]
    assert d["reason"].endswith(f"every write-read run picked {'w' * 57}...")
    [d] = _ab_compare.compare(runs({"a": 1.0, "b": 2.0}), runs({"a": 2.0, "b": 1.0}))["decisions"]
    assert set(d) >= {"clean_spread"} and d["clean_spread"] is None
    [d] = _ab_compare.compare(runs({long: 2.0, "a": 1.0}) * 2, runs({long: 1.0, "a": 2.0}, {long: 1.0, "a": 2.2}))[
        "changed"
    ]
    assert d["reason"].startswith(f"every write-read run picked {'w' * 57}..., and the stock pick is slower")


def test_a_stock_pick_that_ties_the_clean_winner_is_no_change_even_if_another_loses():
    clean = [[with_winner({"a": 1.0, "b": 1.5, "c": 1.0}, "c")], [with_winner({"a": 1.0, "b": 1.5, "c": 1.0}, "c")]]
    stock = [[with_winner({"a": 1.0, "b": 2.0, "c": 3.0}, "a")], [with_winner({"a": 2.0, "b": 1.0, "c": 3.0}, "b")]]
    [d] = _ab_compare.compare(stock, clean)["decisions"]
    assert d["class"] == "within noise"


def test_a_cost_equal_to_the_spread_is_within_the_noise():
    stock = runs({"a": 1.0, "b": 2.0}) * 2
    clean = runs({"a": 1.25, "b": 1.0}, {"a": 1.75, "b": 1.0})  # +25% and +75%: cost 50%, spread 50%
    [d] = _ab_compare.compare(stock, clean)["decisions"]
    assert (d["cost"], d["clean_spread"], d["class"]) == (0.5, 0.5, "within noise")


def test_a_change_names_the_stock_picks_most_frequent_first_and_says_when_the_stock_runs_disagree():
    stock = runs({"a": 1.0, "b": 2.0, "c": 3.0}, {"a": 2.0, "b": 1.0, "c": 3.0}, {"a": 2.0, "b": 1.0, "c": 3.0})
    clean = runs({"a": 2.0, "b": 2.2, "c": 1.0}, {"a": 2.1, "b": 2.3, "c": 1.0}, {"a": 2.0, "b": 2.2, "c": 1.0})
    [d] = _ab_compare.compare(stock, clean)["changed"]
    assert [(p["pick"], p["runs"]) for p in d["stock_picks"]] == [("b", 2), ("a", 1)]
    assert d["reason"].endswith("; the stock runs disagree (b in 2 of 3 runs, a in 1)")


def test_a_decisions_file_with_bytes_that_are_no_text_loses_that_line_only(tmp_path):
    path = tmp_path / ("d" * 200) / "decisions.jsonl"  # a long path: the line saying so is cut
    path.parent.mkdir()
    good = json.dumps(decision("k", "1", {"a": 1.0}))
    path.write_bytes(good.encode() + b"\n\xff\xfe torn\n\n" + good.encode() + b"\n" + b"x" * 400 + b"\n")
    found, bad = _ab.read_decisions(str(path))  # a blank line between is no decision and no problem
    assert len(found) == 2 and len(bad) == 2 and all(len(line) <= 300 for line in bad)
    # the path is cut in its middle; the line number and the reason stay, however long it is
    assert bad[0].startswith(str(path)[:100]) and ":2: skipped, " in bad[0]
    assert bad[1].endswith("decisions.jsonl:5: skipped, Expecting value: line 1 column 1 (char 0)")


def test_a_job_with_no_compiled_program_is_told_why_nothing_is_timed_end_to_end():
    same = runs({"a": 1.0, "b": 2.0}) * 2
    report = _ab_report.format_report({**record_of(same, same), "end_to_end": None})
    assert (
        "end to end: no run compiled an Inductor program (the decisions above are judged as shown)"
    ) in report.splitlines()
    cmp = record_of(same, same)["comparison"]
    cmp["decisions"][0]["priced"] = True
    report = _ab_report.format_report({**record_of(same, same), "comparison": cmp, "end_to_end": None})
    assert (
        "end to end: no run compiled an Inductor program (Triton @autotune decisions are priced above)"
    ) in report.splitlines()


def test_a_job_with_no_decision_is_not_told_of_prices_above():
    report = _ab_report.format_report({**record_of([[]], [[]]), "end_to_end": None})
    assert "priced above" not in report
    assert (
        "end to end: no run compiled an Inductor program, and no run recorded an autotuning decision"
    ) in report.splitlines()


def test_progress_says_how_long_is_left_from_the_second_run_on(capsys):
    started = time.monotonic() - 60.2
    _ab._say_progress(1, 4, "write", started)
    _ab._say_progress(2, 4, "write-read", started)
    assert capsys.readouterr().err.splitlines() == [
        "cleanflush ab: run 1 of 4: write (1m00s elapsed)",
        "cleanflush ab: run 2 of 4: write-read (1m00s elapsed, about 3m00s left)",
    ]


def test_every_run_records_its_calls_in_one_folder_beside_the_runs(tmp_path):
    a = _ab.run_env({}, _ab.Side("write", "write"), str(tmp_path / "run1-write"))
    b = _ab.run_env({}, _ab.Side("write-read", "write-read"), str(tmp_path / "run2-write-read"))
    assert a["CLEANFLUSH_AB_CALLS"] == b["CLEANFLUSH_AB_CALLS"] == str(tmp_path / "calls")
    assert (tmp_path / "calls").is_dir()


def test_a_kept_folder_starts_without_another_abs_calls(tmp_path):
    (tmp_path / "calls").mkdir()
    (tmp_path / "calls" / "old.pt").write_bytes(b"another ab's call")
    result, code = _ab.run([sys.executable, "-c", "pass"], runs=1, keep=str(tmp_path))
    assert code == 0 and result["runs_compared"] == 1
    assert not (tmp_path / "calls" / "old.pt").exists()


@pytest.mark.parametrize(
    "verdict, said",
    [
        ("faster", "faster, beyond the noise"),
        ("slower", "slower, beyond the noise"),
        ("within noise", "within the noise"),
        ("unknown", "one run a side: the noise is unknown"),
    ],
)
def test_the_end_to_end_verdict_is_said_in_words(verdict, said):
    graph = {
        "name": "graph 1",
        "ratio": {"median": 0.9, "q1": 0.89, "q3": 0.91},
        "same_side": {"write": None, "write-read": None},
        "verdict": verdict,
        "ms": {"write": 0.9, "write-read": 1.0},
    }
    lines = _ab_report._end_to_end_lines({"graphs": [graph], "problems": []}, "write-read", [])
    assert lines[1] == f"  graph 1: -10.0% (q1 -11.0%, q3 -9.0%), 0.900 ms against 1.000 ms: {said}"


def programs_of(tmp_path, at_import):
    """A compiled program in each side's run folder (tests/test_ab_programs.py's stand-in of
    Inductor's output code) that runs ``at_import`` when the timing process loads it."""
    from .test_ab_programs import program

    folders = []
    for index, side in enumerate(("write", "write-read"), 1):
        folder = tmp_path / f"run{index}-{side}"
        path = folder / "inductor" / "p.py"
        program(folder / "inductor", "p.py", 0)
        path.write_text(f"import os\n{at_import}\n{path.read_text()}")
        folders.append((side, str(folder)))
    return folders


def test_the_end_to_end_timing_keeps_what_programs_print_off_the_reports_stdout(tmp_path, capfd):
    folders = programs_of(tmp_path, "print('a program says')")
    record = _ab._time_programs(
        environ_without_cleanflush(), str(tmp_path), folders, _ab.sides_of(_ab.FLUSH, "write-read")
    )
    assert len(record["graphs"]) == 1 and record["problems"] == []
    assert "a program says" not in capfd.readouterr().out


def test_a_timing_process_that_dies_saying_bytes_that_are_no_text_is_named(tmp_path):
    folders = programs_of(tmp_path, "os.write(2, b'died \\xff here\\n'); os._exit(3)")
    record = _ab._time_programs(
        environ_without_cleanflush(), str(tmp_path), folders, _ab.sides_of(_ab.FLUSH, "write-read")
    )
    assert record == {"graphs": [], "problems": ["the timing process failed (exit 3): died \ufffd here"]}


@pytest.mark.parametrize(
    ("pick", "why"),
    [
        (None, "pick is not a mapping but NoneType"),
        ("stable", "pick is not a mapping but str"),
        ({"rule": "stable", "candidates": ["a"], "fastest": "a", "band": "1%", "floor": 0.01}, "band, floor"),
        ({"rule": "stable", "candidates": 3, "fastest": "a", "band": 0.01, "floor": 0.01}, "candidates is not a list"),
        ({"rule": "stable", "fastest": "a", "band": 0.01, "floor": 0.01}, "pick has no candidates"),
    ],
)
def test_a_decision_line_whose_pick_is_no_pick_is_skipped_with_why(tmp_path, pick, why):
    good = {"kind": "triton", "op": "k", "key": "1", "timings_ms": {"a": 1.0}, "winner": "a"}
    path = tmp_path / "decisions.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "key": "2", "pick": pick}) + "\n")
    found, bad = _ab.read_decisions(str(path))
    assert [d["key"] for d in found] == ["1"]  # the good line stays; ab goes on
    assert len(bad) == 1 and ":2: skipped, " in bad[0] and why in bad[0]
