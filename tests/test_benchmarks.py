"""The benchmark suite's logic that needs no GPU: statistics, what an autotuner concludes,
cutting Nsight Compute's kernel list into cases, the INT8 kernel's arithmetic (through
Triton's interpreter on CPU tensors), and the command line."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import autotune, common, methods, pick, plots, quoted, writeback

from .triton_layout import skip_unless_the_interpreter_runs_our_kernels

ROOT = Path(__file__).parent.parent


def test_rank_correlations():
    a = [1.0, 2.0, 3.0, 4.0]
    assert common.kendall_tau(a, a) == pytest.approx(1.0)
    assert common.kendall_tau(a, a[::-1]) == pytest.approx(-1.0)
    # one swapped pair out of six: (5 - 1) / 6
    assert common.kendall_tau(a, [1.0, 3.0, 2.0, 4.0]) == pytest.approx(4 / 6)
    assert common.spearman(a, [10.0, 20.0, 30.0, 40.0]) == pytest.approx(1.0)
    assert common.ranks([3.0, 1.0, 3.0]) == [2.5, 1.0, 2.5]


def test_central_mean_trims_the_tails():
    samples = [10.0] * 18 + [0.0, 1000.0]
    assert common.central_mean(samples) == 10.0
    assert common.quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)


def _rows(times):
    return [
        {"timer": timer, "candidate": cand, "us": us, "round": r}
        for timer, per in times.items()
        for cand, us in per.items()
        for r in range(2)
    ]


def test_decide_reports_winner_regret_and_cublas_count():
    truth = {"A": 10.0, "B": 11.0, "C": 14.0, autotune.CUBLAS: 12.0}
    # a timer that charges the kernel reading more bytes (cuBLAS) and reorders A and B
    skewed = {"A": 13.0, "B": 12.0, "C": 15.0, autotune.CUBLAS: 16.0}
    verdict = autotune.decide(_rows({"stock": skewed, autotune.TIMERS[-1]: truth}))
    assert verdict["truth_winner"] == "A"
    stock = verdict["timers"]["stock"]
    assert stock["winner"] == "B" and stock["winner_truth_us"] == 11.0
    assert stock["regret_pct"] == pytest.approx(10.0)
    assert stock["beat_cublas"] == 3  # all three, against 2 under the truth
    assert verdict["timers"][autotune.TIMERS[-1]]["beat_cublas"] == 2
    assert stock["kendall"] < verdict["timers"][autotune.TIMERS[-1]]["kendall"] == pytest.approx(1.0)


def test_methods_summary_is_relative_to_the_event_loop():
    rows = [
        {"shape": "4096x4096", "method": m, "us": us}
        for m, us in [
            ("read-flush event loop", 15.0),
            ("read-flush event loop", 15.2),
            ("do_bench stock", 18.8),
            ("do_bench stock", 19.0),
        ]
    ]
    summary = methods.summarise(rows)["4096x4096"]
    assert summary["do_bench stock"]["median"] == pytest.approx(18.9)
    assert summary["do_bench stock"]["vs_event_loop"] == pytest.approx(18.9 / 15.1)
    assert "do_bench read" not in summary  # a method with no rows is left out, not zero


def test_writeback_cuts_ncu_kernels_into_cases():
    gemm, reduce_ = "nvjet_sm90_tst_64x8_64x16_2x1_v_bz_splitK_TNT", "cublasLt::splitKreduce_kernel"
    probe = "void at::native::reduce_kernel<512, 1, ReduceOp<float>>"
    kernels = []
    for case in range(2):
        for _ in range(3):
            kernels += [(gemm, {"w": case}), (reduce_, {"w": 0.0})]
        kernels += [(probe, {"w": 10.0 * case})] * 3
    cases = writeback.split_cases(kernels, ["a", "b"], [0, 8], 3)
    assert [(label, x, len(g), len(p)) for label, x, g, p in cases] == [("a", 0, 6, 3), ("b", 8, 6, 3)]
    assert cases[1][3][0]["w"] == 10.0
    with pytest.raises(RuntimeError, match="left over"):
        writeback.split_cases(kernels + [(gemm, {})], ["a", "b"], [0, 8], 3)
    with pytest.raises(RuntimeError, match="unexpected kernel sequence"):
        writeback.split_cases(kernels[1:], ["a", "b"], [0, 8], 3)


def test_int8_gemv_matches_a_float64_reference_on_cpu():
    pytest.importorskip("triton")
    skip_unless_the_interpreter_runs_our_kernels()
    code = (
        "from benchmarks.int8_gemv import Layer, configs\n"
        "layer = Layer(40, 300, 'cpu')\n"  # ragged in both dimensions: the masks matter
        "for c in (configs()[0], configs()[-1]):\n"
        "    print(layer.error(c))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TRITON_INTERPRET": "1"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    errors = [float(x) for x in out.stdout.split()]
    assert len(errors) == 2 and all(e < 1e-2 for e in errors), errors


def test_hidden_host_time_is_the_largest_delay_within_five_percent():
    from benchmarks.synced import hidden_us

    assert hidden_us({0: 14.0, 20: 14.6, 40: 14.7, 60: 29.0, 80: 14.5}) == 40  # up to the first one past
    assert hidden_us({0: 14.0, 20: 14.71, 40: 30.0}) == 0
    assert hidden_us({0: 16.0, 20: 16.8}) == 20  # 5% exactly still counts


def test_cli_names_the_valid_studies():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "all", "--skip", "bogus"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "writeback, methods, readkernel, cost, latency, synced, autotune" in out.stderr and "bogus" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks", "methods", "--shapes", "4096by4096"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "4096x4096" in out.stderr


def test_controls_summary_counts_wrong_verdicts():
    from benchmarks.controls_summary import summary

    def record(control_result):
        return {
            "verdict": {
                "candidates": {
                    "write-read": {"result": "PASS", "margin": 0.4},
                    "control: stock write": {
                        "result": control_result,
                        "margin": -0.6 if control_result == "FAIL" else 0.1,
                    },
                }
            },
            "ncu": {"write-read": 0.02, "control: stock write": 11.0},
        }

    text = summary([record("FAIL"), record("PASS")])
    assert "1 wrong verdicts of 4" in text and "run 2: control: stock write judged PASS" in text
    row = next(line for line in text.splitlines() if line.startswith("control: stock write"))
    assert "+0.10" in row and "11.000-11.000" in row  # the tightest margin is the wrong one


def _copy_of_benchmarks(tmp_path, with_results):
    """benchmarks/ copied into ``tmp_path``, with or without its results (as in the sdist)."""
    shutil.copytree(ROOT / "benchmarks", tmp_path / "benchmarks", ignore=shutil.ignore_patterns("__pycache__"))
    if not with_results:
        shutil.rmtree(tmp_path / "benchmarks" / "results", ignore_errors=True)  # the sdist has none
    return tmp_path


def _benchmarks(cwd, *args):
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


def test_plot_with_no_folder_draws_every_results_folder(tmp_path):
    pytest.importorskip("matplotlib")
    if not (ROOT / "benchmarks" / "results" / "h200").is_dir():
        pytest.skip("no study data in this copy (the sdist leaves it out)")
    copy = _copy_of_benchmarks(tmp_path, with_results=True)
    figures = [f for f in sorted(copy.glob("benchmarks/results/*/*.png")) if f.stem in plots.FIGURES]
    for figure in figures:
        figure.unlink()
    out = _benchmarks(copy, "plot")
    assert out.returncode == 0, out.stderr
    assert figures and all(figure.is_file() for figure in figures)  # every folder's figures again


def test_plot_without_study_data_says_what_is_missing_in_one_line(tmp_path):
    out = _benchmarks(_copy_of_benchmarks(tmp_path, with_results=False), "plot")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1 and "no results folder" in out.stderr and "sdist" in out.stderr


def test_quoted_without_study_data_says_what_is_missing_in_one_line(tmp_path):
    copy = _copy_of_benchmarks(tmp_path, with_results=False)
    for page in quoted.PAGES:  # the pages it reads, as in the sdist (the results READMEs are gone)
        if not page.startswith("benchmarks/results/"):
            (copy / page).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / page, copy / page)
    for args in (("quoted", "--check"), ("quoted",)):
        out = _benchmarks(copy, *args)
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1 and "is missing" in out.stderr and "sdist" in out.stderr
        assert out.stdout == ""


def test_quoted_says_what_it_found():
    _h200_or_skip()
    out = _benchmarks(ROOT, "quoted", "--check")
    assert out.returncode == 0 and out.stderr == ""
    assert out.stdout == f"quoted numbers agree with the records in all {len(quoted.PAGES)} pages\n"


def test_plot_names_a_folder_that_is_not_there():
    missing = _benchmarks(ROOT, "plot", "--out", "no/such/folder")
    assert missing.returncode == 2 and "is not a folder" in missing.stderr


def _h200_or_skip():
    folder = ROOT / "benchmarks" / "results" / "h200"
    if not (folder / "budget.json").is_file():
        pytest.skip("no study data in this copy (the sdist leaves it out)")
    return folder


@pytest.mark.parametrize("page", quoted.PAGES)
def test_the_numbers_a_page_quotes_are_those_of_the_current_records(page):
    _h200_or_skip()
    text = (ROOT / page).read_text()
    assert "<!-- quoted:" in text
    assert quoted.render_page(text, quoted.folder_of(page)) == text, "stale numbers: run python -m benchmarks quoted"


def test_every_number_in_the_readme_table_is_in_the_budget_record():
    # read without the renderer: the table's cells against the record's do_bench means
    folder = _h200_or_skip()
    record = json.loads((folder / "budget.json").read_text())
    recorded = {f"{row['do_bench_us']:.2f}" for shape in record["summary"].values() for row in shape.values()}
    readme = (ROOT / "README.md").read_text()
    table = readme.split("<!-- quoted:headline -->")[1].split("<!-- /quoted -->")[0]
    cells = [c.strip() for line in table.splitlines() if line.startswith("| ") for c in line.split("|")[2:-1]]
    numbers = [c for c in cells if re.fullmatch(r"\d+\.\d\d", c)]
    assert len(numbers) == 20 and set(numbers) <= recorded


def test_a_record_that_changes_makes_its_quotes_stale(tmp_path):
    folder = _h200_or_skip()
    for study in ("budget", "cost"):
        shutil.copy(folder / f"{study}.json", tmp_path / f"{study}.json")
    text = (ROOT / "README.md").read_text()
    assert quoted.render_page(text, tmp_path) == text
    record = json.loads((tmp_path / "budget.json").read_text())
    record["summary"]["4096x4096"]["stock"]["do_bench_us"] += 1.0  # negative control
    (tmp_path / "budget.json").write_text(json.dumps(record))
    assert quoted.render_page(text, tmp_path) != text
    (tmp_path / "cost.json").unlink()
    with pytest.raises(FileNotFoundError, match="cost.json is missing"):
        quoted.render_page(text, tmp_path)


def test_a_pick_study_row_says_whether_it_measured_the_rule_as_documented(monkeypatch):
    from benchmarks import pick
    from cleanflush import _pick

    current = pick.rule(None)
    assert current["floor"] == _pick.FLOOR and pick.rule("2")["floor"] == pytest.approx(0.02)
    assert current["again_ms"] == _pick.AGAIN_MS and pick.rule(None, "50")["again_ms"] == 50
    assert pick.rule(None, "Full")["again_ms"] is None  # as long as the autotuner's own
    lengths = [quoted._again_length(r) for r in (current, pick.rule(None, "full"), "a note")]
    assert lengths == [f"{_pick.AGAIN_MS:g} ms", "full", "full"]
    assert quoted._rule_version(current) == "as documented"
    assert quoted._rule_version(pick.rule("2", "25")) == "as documented"  # options a run set, named in its entry
    assert quoted._rule_version("before the cap on the band") == "an earlier version"  # a note, not settings
    assert quoted._rule_version({**current, "most_timed_again": 5}) == "an earlier version"
    monkeypatch.setattr(_pick, "ROUNDS", _pick.ROUNDS + 1)  # the rule changed after the entry ran
    assert quoted._rule_version(current) == "an earlier version"


def test_a_pick_study_entry_is_named_with_each_option_its_run_set():
    from benchmarks import pick

    assert pick.entry_name("gemlite_decode", {}) == "gemlite_decode"
    assert pick.entry_name("fla_gdn", {"CLEANFLUSH_PICK_AGAIN_MS": "25"}) == "fla_gdn again 25 ms"
    assert pick.entry_name("fla_gdn", {"CLEANFLUSH_PICK_AGAIN_MS": "full"}) == "fla_gdn again full"
    both = {"CLEANFLUSH_PICK_FLOOR": "2", "CLEANFLUSH_PICK_AGAIN_MS": "25", "CLEANFLUSH_PICK": "stable"}
    assert pick.entry_name("gemlite_decode", both) == "gemlite_decode floor 2% again 25 ms"


def test_the_round_to_round_spread_is_each_configs_own_time_between_the_two_rounds_timed_again():
    from benchmarks import pick

    # whole timings 12.0 (the sweep's, left out), 12.5 and 13.0 with 2.0 shared: own 10.5 and 11.0
    hooked = {**_pick_line(["a"], {}), "shared_ms": 2.0, "rounds_ms": {"a": [12.0, 12.5, 13.0], "b": [12.0] * 3}}
    plain = {**_pick_line(["c"], {}), "rounds_ms": {"c": [5.0, 4.0, 6.0]}}  # no shared time: 4 and 6, 2 over 5
    unsettled = _pick_line(["a"], {}, noise=None)  # nothing timed again: no rounds
    found = pick.rounds_spread([{"stable_picks": [hooked]}, {"stable_picks": [plain, unsettled, None]}])
    assert found["configs"] == 3 and found["median"] == pytest.approx(0.5 / 10.75) and found["max"] == 0.4
    assert pick.rounds_spread([{"fastest_winners": ["a"]}]) == {"configs": 0}  # an entry from before rounds_ms


def test_the_pick_studys_p90_is_the_nearest_rank_and_never_under_the_median():
    assert pick._quantiles([0.3, 0.1]) == {"configs": 2, "median": 0.2, "p90": 0.3, "max": 0.3}
    ten = pick._quantiles([i / 100 for i in range(1, 11)])
    assert (ten["median"], ten["p90"], ten["max"]) == (0.055, 0.09, 0.1)
    assert pick._quantiles([]) == {"configs": 0}


def test_a_pick_studys_sweep_keeps_the_configs_near_its_fastest_as_ratios_in_the_autotuners_order():
    timings = {"c": 2.3, "a": 2.0, "b": float("inf"), "d": 2.1, "e": 0.0}
    assert list(pick.sweep(timings).items()) == [("a", 1.0), ("d", 1.05)]  # c is 15% over, b and e never ran
    assert pick.sweep({"a": float("inf")}) == {}


def test_each_replayed_pick_rule_picks_as_its_name_says():
    swept = {"a": 1.015, "b": 1.0, "c": 1.025, "d": 1.06}
    picks = {name: rule(swept) for name, rule in pick.REPLAYS.items()}
    assert picks == {
        "fastest": "b",
        "first within 1%": "b",  # a, first in order, is 1.5% over
        "first within 2%": "a",
        "first within 3%": "a",
        "largest gap": "a",  # 1.025 -> 1.06 is the widest gap: a, b and c are one group
    }
    # the widest gap just over the fastest two: the first in order of those
    assert pick.REPLAYS["largest gap"]({"a": 1.04, "b": 1.0, "c": 1.002, "d": 1.045, "e": 1.06}) == "b"
    # nothing beyond 5%: the sweep's edge closes the last gap
    assert pick.REPLAYS["largest gap"]({"a": 1.03, "b": 1.0, "c": 1.04}) == "a"
    assert pick.REPLAYS["fastest"]({"a": 1.0, "b": 1.0}) == "a"  # the first of equal times, as min()


def test_replays_count_the_decisions_a_rule_picks_alike_and_check_the_fastest_against_the_record():
    near_edge = [{"a": 1.008, "b": 1.0}, {"a": 1.012, "b": 1.0}, {"a": 1.002, "b": 1.0}]
    clear = [{"a": 1.0, "b": 1.04}] * 3
    decisions = [
        {"kind": "triton", "sweeps": near_edge, "fastest_winners": ["b", "b", "b"]},
        {"kind": "triton", "sweeps": clear, "fastest_winners": ["a", "a", "a"]},
        {"kind": "inductor-coordesc", "fastest_winners": ["x", "y", "x"]},  # no sweeps: not replayed
    ]
    found = pick.replays(decisions)
    assert found["decisions"] == 2 and found["fastest_as_recorded"] == 2
    assert found["fastest"]["alike"] == 2 and found["first within 1%"]["alike"] == 1  # a flips at the edge
    assert found["first within 2%"]["alike"] == 2
    # b's mean ratio is 1.0 and a's 1.0073: the 1% rule's picks a, b, a cost 2/3 of that on one decision
    assert found["first within 1%"]["cost_mean"] == pytest.approx((2 / 3 * 0.007333) / 2, rel=1e-3)
    assert found["fastest"]["cost_max"] == 0.0
    decisions[0]["fastest_winners"] = ["b", "a", "b"]  # a recorded pick slower than its sweep's fastest
    assert pick.replays(decisions)["fastest_as_recorded"] == 1
    decisions[0]["sweeps"][1] = {"a": 1.0, "b": 1.0}  # an exact tie the autotuner broke its own way: a match
    assert pick.replays(decisions)["fastest_as_recorded"] == 2


def _pick_line(candidates, timed_again, band=0.01, noise=0.001, too_noisy=False):
    return {
        "rule": "stable",
        "fastest": candidates[0],
        "band": band,
        "floor": 0.01,
        "noise": noise,
        "candidates": candidates,
        "timed_again": timed_again,
        "too_noisy": too_noisy,
    }


def picked(lines):
    """Pick lines as the study reads them back."""
    from cleanflush._pick import Picked

    return [None if line is None else Picked.from_line(line) for line in lines]


def test_why_stable_picks_moved_names_the_config_at_the_bands_edge_and_the_runs_the_noise_decided():
    edge = {"w4": 1.009, "w8": 1.0}
    picks = [
        _pick_line(["w4", "w8"], edge),
        _pick_line(["w8"], {"w4": 1.013, "w8": 1.0}),
        _pick_line(["w8"], {"w8": 1.0}, band=0.12, noise=0.12, too_noisy=True),
        _pick_line(["w4", "w8"], edge, band=0.015, noise=0.015),
    ]
    why = pick.moved(["w4", "w8", "w8", "w4"], picked(picks))
    assert why == [
        "run 3: the rounds' noise was 12.0%, over twice the 1% floor, so the autotuner's own pick stood",
        "run 4: the rounds' noise widened the band to 1.5%",
        "w4: within the band in run 1, 4, outside it in run 2 (by run: +0.9%, +1.3%, +0.9%)",
    ]
    # a run whose window held only its fastest timed nothing again: the others were over twice the floor
    alone = [_pick_line(["w4"], {}), _pick_line(["w8"], {}), _pick_line(["w8", "w4"], {"w8": 1.0, "w4": 1.004})]
    assert pick.moved(["w4", "w8", "w8"], picked(alone)) == [
        "w4: within the band in run 1, 3, outside it in run 2 (by run: alone within the window, over 2% in the sweep, "
        "+0.4%)",
        "w8: within the band in run 2, 3, outside it in run 1 (by run: over 2% in the sweep, alone within the window, "
        "+0.0%)",
    ]
    # a run whose config was timed again under what the hooks alone took: the autotuner's own pick
    under = {**_pick_line(["w8"], {}, noise=None, too_noisy=True), "shared_ms": 0.0125}
    assert pick.moved(["w4", "w8"], picked([picks[0], under])) == [
        "run 2: a config was timed again in less than the autotuner's hooks alone took (12.5 us), so the "
        "autotuner's own pick stood"
    ]
    # w8, in every ruled run's band, is no cause; a run without a pick line says the rule never reached it
    assert pick.moved(["w4", "w8"], picked([picks[0], None])) == [
        "some stable runs made no stable pick here (the rule did not reach the decision)"
    ]


def test_why_stable_picks_moved_names_the_timers_resolution_where_it_set_the_band():
    tick = 0.018  # 2.5 ticks of a 4.4 us kernel's own time: over the 1% floor
    picks = [
        {**_pick_line(["w4", "w8"], {"w4": 1.016, "w8": 1.0}, band=tick), "resolution": tick},
        {**_pick_line(["w8"], {}, band=tick), "resolution": tick},
        {**_pick_line(["w8"], {"w8": 1.0}, band=0.05, noise=0.05, too_noisy=True), "resolution": tick},
    ]
    assert pick.moved(["w4", "w8", "w8"], picked(picks)) == [
        "run 3: the rounds' noise was 5.0%, over twice the 1.8% timer's resolution, so the autotuner's own pick stood",
        "w4: within the band in run 1, outside it in run 2 (by run: +1.6%, over 3.6% in the sweep)",
    ]  # a band of the resolution alone is not the noise's widening


def test_why_coordinate_descent_walks_moved_tells_a_different_start_from_different_steps():
    assert pick.moved(["x", "y", "x", "x"], [None] * 4, start=["k1", "k1", "k2", "k2"]) == [
        "the walks started from 2 different configs (the kernel's stable pick moved)",
        "runs 1, 2 started alike and ended at 2 configs: a step needs more than the floor (or the timer's "
        "resolution) in one timing of each neighbour, and some steps were within the runs' noise",
    ]
    assert pick.moved(["x", "x"], [None] * 2, start=["k1", "k2"]) == [
        "the walks started from 2 different configs (the kernel's stable pick moved)"
    ]


def test_the_pick_study_reads_each_rules_runs_in_the_order_they_ran(tmp_path):
    def lines(*decisions):
        return "".join(json.dumps(d) + "\n" for d in decisions)

    one = {"kind": "triton", "op": "k", "key": "1", "winner": "a", "timings_ms": {"a": 1.0, "b": 1.01}}
    again = {**one, "winner": "b"}  # a second line for the key in one run: ab counts the first
    for name, text in {
        "run1-fastest": lines({"kind": "calls", "op": "k", "counts": {"1": 3}}, one, again),
        "run2-stable": lines({**one, "pick": _pick_line(["a"], {})}),
        "run3-fastest": "",
        "run11-fastest": lines(again),
        "ab.json": "",
    }.items():
        folder = tmp_path / name
        if name.startswith("run"):
            folder.mkdir()
            (folder / "decisions.jsonl").write_text(text)
        else:
            folder.write_text(text)
    runs = pick._runs(str(tmp_path), 6)  # run1 to run12; run5, 7 and 9 never wrote a file
    assert [run[("triton", "k", "1")]["winner"] for run in runs["fastest"] if run] == ["a", "b"]
    assert len(runs["fastest"]) == 3 and runs["stable"][0][("triton", "k", "1")]["pick"]["candidates"] == ["a"]
    decisions = pick._with_runs(
        [{"kind": "triton", "op": "k", "key": "1", "fastest_winners": ["a", "b"], "stable_winners": ["a"]}], runs
    )
    assert decisions[0]["sweeps"] == [{"a": 1.0, "b": 1.01}, {"a": 1.0, "b": 1.01}]
    assert pick.why(decisions) == {}  # one stable run: nothing moved
    decisions[0]["stable_winners"], decisions[0]["stable_picks"] = ["a", "b"], [_pick_line(["a"], {}), None]
    assert list(pick.why(decisions)) == [("triton", "k", "1")]
    walk = {"kind": "inductor-coordesc", "op": "k", "key": "1", "stable_winners": ["x", "y"], "stable_picks": []}
    kernel = {**walk, "kind": "inductor-kernel", "stable_winners": ["k1", "k2"], "stable_picks": [None, None]}
    assert pick.why([kernel, walk])[("inductor-coordesc", "k", "1")][0].startswith("the walks started from 2")


def test_the_pick_study_keeps_ab_end_to_end_total_and_quotes_it_stable_over_fastest():
    total = {
        "ms": {"fastest": 2.0, "stable": 1.9},
        "ratio": {"q1": 1.04, "median": 1.05, "q3": 1.06},
        "program_ms": {"fastest": [2.0, 2.1], "stable": [1.9, 1.9]},
        "same_side": {"fastest": 0.05, "stable": 0.0},
        "verdict": "slower",
        "program_samples": {"fastest": [[1.0]], "stable": [[1.0]]},
    }
    kept = pick._end_to_end({"graphs": [{}, {}], "problems": ["p"], "total": total})
    assert kept is not None and "program_samples" not in kept["total"]
    assert (kept["graphs"], kept["problems"]) == (2, ["p"])
    assert quoted._end_to_end_cell(kept) == "0.9500 (stable faster, same rule up to 5.0%)"
    kept["total"]["verdict"] = "within noise"
    assert quoted._end_to_end_cell(kept) == "0.9500 (within noise, same rule up to 5.0%)"
    assert pick._end_to_end(None) is None and quoted._end_to_end_cell(None) == "-"
    assert pick._end_to_end({"graphs": [], "problems": ["the timing process failed"]})["total"] is None
    assert quoted._end_to_end_cell({"graphs": 0, "problems": [], "total": None}) == "-"


def test_the_ab_libs_study_keeps_the_jobs_an_earlier_call_ran_and_dates_each(tmp_path, monkeypatch):
    from benchmarks import ab_libs

    calls = iter(["2026-12-03 14:05 UTC", "2026-12-05 03:40 UTC"])
    monkeypatch.setattr(common, "machine", lambda: {"date": next(calls), "cleanflush": "9.9"})
    monkeypatch.setattr(ab_libs, "run_job", lambda job, work: {"job": job, "report": [job]})
    assert ab_libs.main([str(tmp_path), "liger_swiglu", "gemlite_decode"]) == 0
    assert ab_libs.main([str(tmp_path), "gemlite_decode"]) == 0
    record = json.loads((tmp_path / "ab-libs.json").read_text())
    assert list(record["jobs"]) == ["liger_swiglu", "gemlite_decode"]
    assert record["jobs"]["liger_swiglu"]["date"] == "2026-12-03 14:05 UTC"
    assert record["jobs"]["gemlite_decode"]["date"] == record["machine"]["date"] == "2026-12-05 03:40 UTC"
    assert record["jobs"]["gemlite_decode"]["summary"]["changed_real"] == 0


def test_hosttime_quotes_what_no_part_timed_alone_accounts_for(tmp_path):
    parts = {
        "policy lookup": 1.0,
        "capture check": 2.0,
        "stream query": 50.0,  # inside the hold decision, not counted again
        "event record": 70.0,  # do_bench's, not the flush's
        "write launch (stock clear_cache on the head)": 5.0,
        "read launch": 7.0,
    }
    rows = {f"write-read part: {name}": us for name, us in parts.items()}
    for flush in ("stock", "write", "read", "write-read"):
        rows[f"clear_cache, {flush}"] = 20.0 if flush == "write-read" else 4.0
        rows[f"iteration, {flush}, GPU caught up"] = 30.0
    record = {
        "machine": {"date": "2026-12-06 04:04 UTC", "gpu": "GPU"},
        "cpu": "CPU",
        "batches": 2,
        "calls": 3,
        "summary": {row: {"median_us": us, "p10_us": us, "p90_us": us} for row, us in rows.items()},
        "do_bench_samples": {"stock": 1000, "write": 1000, "read": 800, "write-read": 500},
    }
    (tmp_path / "hosttime.json").write_text(json.dumps(record))
    table = " ".join(quoted.hosttime_table(tmp_path).split())  # as read, not as wrapped
    assert "the two launches 12.0 us, the checks around them 3.0" in table
    assert "5.0 us in none of them" in table  # 20 - 12 - 3
    assert "| 200.0 |" in table  # write-read's 500 samples in 100 ms: 200 us a call
    assert "in place" not in table  # a record before those rows
    record["summary"]["write-read in place: flush, no launch"] = {"median_us": 9.0, "p10_us": 8.0, "p90_us": 10.0}
    (tmp_path / "hosttime.json").write_text(json.dumps(record))
    assert "no launch 9.0 (p10 8.0)" in " ".join(quoted.hosttime_table(tmp_path).split())
    assert "kineto" not in table  # a record before do_bench's reads were profiled
    loop = {"median_us": 150.0, "p10_us": 140.0, "p90_us": 190.0}
    found = {"samples_profiled": 400, "estimate_reads_us": [220.0, 128.0, 114.0, 136.0, 218.0], "loop_reads_us": loop}
    record["do_bench_reads"] = {"read": {"error": "RuntimeError: no CUPTI"}, "write-read": found}
    (tmp_path / "hosttime.json").write_text(json.dumps(record))
    table = " ".join(quoted.hosttime_table(tmp_path).split())
    assert "under read" not in table  # a flush whose profile failed says nothing
    said = "under write-read, its estimate's 220, 128, 114, 136, 218 us and its loop's a median of 150 (p90 190)"
    assert said in table
    record["do_bench_reads"]["write-read"]["loop_reads_us"] = None  # no loop's reads: no line
    (tmp_path / "hosttime.json").write_text(json.dumps(record))
    assert "kineto" not in quoted.hosttime_table(tmp_path)


def test_the_ranks_study_counts_decisions_every_rank_picked_alike_and_prices_the_agreed_pick():
    from benchmarks import ranks

    def line(key, winner, rank, **more):
        return {"kind": "triton", "op": "k", "key": key, "winner": winner, "rank": rank, **more}

    off = [line("1", "a", 0, call={"file": "f1"}), line("1", "b", 1), line("2", "c", 0), line("2", "c", 1)]
    on = [line("1", "a", 0), line("1", "a", 1, agreed="rank 0"), line("2", "c", 0), line("2", "c", 1)]
    assert ranks.agreement(ranks.by_decision(off), 2) == {"decisions": 2, "alike": 1}
    assert ranks.agreement(ranks.by_decision(on), 2) == {"decisions": 2, "alike": 2}
    assert ranks.agreement(ranks.by_decision(on[:3]), 2) == {"decisions": 1, "alike": 1}  # made on every rank only
    sides = {"off": {"lines": off}, "on": {"lines": on}}
    assert ranks.to_price(sides) == [
        {"key": ["triton", "k", "1"], "file": "f1", "error": None, "candidates": ["a", "b"]}
    ]
    priced = [{"key": ["triton", "k", "1"], "prices": {"a": {"us": 10.0}, "b": {"us": 10.2}}}]
    (found,) = ranks.agreed_over_own(sides, priced)
    assert found["ratio"] == pytest.approx(10.0 / 10.1)  # the agreed pick over the ranks' own, each rank counted


def test_the_ranks_study_saves_the_sides_before_the_runs_and_runs_again_alone(tmp_path, monkeypatch):
    from benchmarks import common, ranks

    monkeypatch.setattr(common, "machine", lambda: {"date": "today"})
    sides = {s: {"agreement": {"decisions": 1, "alike": 1}, "rank_s": {0: 1.0}} for s in ("off", "on")}
    saved = []

    def run_job(job, n_ranks, runs, work, save):  # the sides, then runs that are cut off
        save({"ranks": n_ranks, "sides": sides, "agreed_over_own": [], "runs": {"agreement": {}}})
        saved.append(json.loads((tmp_path / "ranks.json").read_text()))
        raise KeyboardInterrupt

    monkeypatch.setattr(ranks, "run_job", run_job)
    with pytest.raises(KeyboardInterrupt):
        ranks.main(["--ranks", "2", str(tmp_path), "job"])
    assert saved[0]["jobs"]["job"]["sides"]["on"]["agreement"] == {"decisions": 1, "alike": 1}
    assert saved[0]["jobs"]["job"]["date"] == "today"
    monkeypatch.setattr(ranks, "runs_side", lambda job, runs, work: {"runs": runs, "agreement": {"alike": 3}})
    assert ranks.main(["--only-runs", "--runs", "3", str(tmp_path), "job"]) == 0
    assert ranks.main(["--only-runs", str(tmp_path), "other"]) == 2  # no sides to keep: refused, nothing run
    kept = json.loads((tmp_path / "ranks.json").read_text())["jobs"]["job"]
    assert kept["runs"] == {"runs": 3, "agreement": {"alike": 3}}  # the runs anew
    assert kept["sides"]["on"]["rank_s"] == {"0": 1.0} and kept["ranks"] == 2  # the sides kept


def test_the_persist_table_has_a_column_a_case_and_reads_a_record_from_before_the_cases(tmp_path, monkeypatch):
    monkeypatch.setattr(quoted, "H100", tmp_path)
    rows = {"no window": 8.0, "window, stock flush": 4.5}
    limits = {"limit_after_write_read": 0, "limit_without_the_reset": 7}
    cases = [
        {"kernel": k, "share": 0.25, "weight_bytes": 4 << 20, "us": {r: v * n for r, v in rows.items()}, **limits}
        for n, k in ((1, "sum"), (2, "gemv"))
    ]
    header = {"machine": {"date": "2026-12-07 16:46 UTC"}, "window": 32 << 20, "host": {"check per flush, ns": 580}}
    (tmp_path / "persist.json").write_text(json.dumps({**header, "cases": cases}))
    table = quoted.persist_table(tmp_path)
    assert "| us, median of rounds | sum, 4.0 MiB | gemv, 4.0 MiB |" in table
    assert "| window, stock flush | 4.5 | 9.0 |" in table and "`sum` is torch's float32" in " ".join(table.split())
    old = {**header, **limits, "weight_bytes": 16 << 20, "us": rows}  # the GEMV alone, its rows at the top
    (tmp_path / "persist.json").write_text(json.dumps(old))
    table = quoted.persist_table(tmp_path)
    assert "| us, median of rounds | gemv, 16.0 MiB |" in table and "| window, stock flush | 4.5 |" in table


def test_the_launch_studys_baseline_process_refuses_to_run_with_cleanflush_installed(tmp_path):
    from benchmarks.jobs import served_launch

    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANFLUSH") and k != "LAUNCH_CLEANFLUSH"}
    command = [sys.executable, "-m", served_launch.__name__]
    alone = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert alone.returncode == 0 and float(alone.stdout.split()[-1]) > 0, alone.stderr[-1500:]
    # the control: cleanflush installed at start-up, so the baseline would time its wrapper
    control = subprocess.run(
        command, env={**env, "CLEANFLUSH": "1"}, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert control.returncode != 0 and "not the variant asked" in control.stderr
    ours = subprocess.run(
        command, env={**env, "LAUNCH_CLEANFLUSH": "1"}, capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert ours.returncode == 0, ours.stderr[-1500:]


def test_the_launch_table_gives_each_variant_against_triton_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(quoted, "RESULTS", tmp_path)
    (tmp_path / "cpu").mkdir()
    record = {
        "machine": {"date": "2026-12-07 23:00 UTC"}, "cpus": 2, "triton": "3.7.1", "processes": 12, "rounds": 9,
        "calls": 20000, "ns_a_call": {"triton alone": 2000.0, "cleanflush, fastest": 3000.0},
        "added_ns": {"cleanflush, fastest": 1000.0}, "baseline_noise_ns": 50.0,
    }  # fmt: skip
    (tmp_path / "cpu" / "launch.json").write_text(json.dumps(record))
    table = quoted.launch_table(tmp_path)
    assert "| Triton alone | 2000 | |" in table and "| cleanflush, fastest | 3000 | +1000 ns (+50%) |" in table
    assert "differ by 50 ns" in " ".join(table.split())
