"""`cleanflush ab`'s independent prices: what is priced, how near-ties, the floor and unstable
sides are judged by price, what the report says, and the record of a real Triton autotuning
call made again (through Triton's interpreter, on CPU tensors)."""

import json
import os

import pytest

from cleanflush import _ab
from cleanflush._ab import compare as _ab_compare
from cleanflush._ab import report as _ab_report

from .conftest import environ_without_cleanflush, run_python
from .triton_layout import needs_autotune_do_bench


def decision(winner, timings, key="1", op="lib.gemv", call=None):
    d = {"kind": "triton", "op": op, "key": key, "timings_ms": timings, "winner": winner}
    return {**d, "call": call or {"file": "k.pt"}}


def price(us, spread=0.004):
    """A pick's price: ``us`` with its rounds within ``spread`` of it."""
    return {"us": us, "low": us * (1 - spread / 2), "high": us * (1 + spread / 2), "rounds": [us] * 5}


def priced(prices, key="1", op="lib.gemv"):
    return [{"key": ["triton", op, key], "prices": prices, "rounds": 5}]


TIMED = {"a": 0.010, "b": 0.011, "c": 0.037}  # the runs' own timings: what they say is not what is judged


def compare(stock_picks, clean_picks, prices, min_effect=_ab_compare.MIN_EFFECT):
    stock = [[decision(p, TIMED)] for p in stock_picks]
    clean = [[decision(p, TIMED)] for p in clean_picks]
    [d] = _ab_compare.compare(stock, clean, "write-read", prices, min_effect)["decisions"]
    return d


def test_near_tie_clean_picks_and_a_stock_pick_twice_as_slow_are_a_change():
    # the clean runs pick two configs within the noise of each other: one choice
    d = compare(["c", "c", "c"], ["a", "b", "a"], priced({"a": price(9.40), "b": price(9.43), "c": price(18.9)}))
    assert (d["class"], d["priced"]) == ("changed", True)
    assert d["ratio"] == pytest.approx(18.9 / 9.40) and d["cost_us"] == pytest.approx(18.9 - 9.40)
    assert d["noise"] == pytest.approx(0.004)  # the rounds' spread: 9.40 and 9.43 lie within it
    # the negative control: the clean picks 2% apart, beyond the noise, are not one choice
    d = compare(["c", "c", "c"], ["a", "b", "a"], priced({"a": price(9.40), "b": price(9.60), "c": price(18.9)}))
    assert (d["class"], d["unstable_side"]) == ("unstable", "write-read")


def test_a_consistent_but_small_loss_is_negligible_not_a_change():
    d = compare(["c"] * 3, ["a"] * 3, priced({"a": price(10.0, 0.001), "c": price(10.03, 0.001)}), min_effect=0.002)
    assert d["class"] == "changed"  # +0.3%, beyond its noise and a 0.2% floor
    d = compare(["c"] * 3, ["a"] * 3, priced({"a": price(10.0, 0.001), "c": price(10.03, 0.001)}))
    assert d["class"] == "negligible" and "under the floor" in d["reason"]  # under the default 2%
    d = compare(["c"] * 3, ["a"] * 3, priced({"a": price(10.0, 0.005), "c": price(10.03, 0.005)}))
    assert d["class"] == "within noise"  # inside rounds that spread 0.5%: near-ties


@pytest.mark.parametrize(
    "stock_us, min_effect, expected",
    [(10.21, 0.02, "changed"), (10.19, 0.02, "negligible"), (10.19, 0.0, "changed"), (13.0, 0.5, "negligible")],
)
def test_the_floor_is_a_strict_bound(stock_us, min_effect, expected):
    d = compare(["c"] * 2, ["a"] * 2, priced({"a": price(10.0, 0.001), "c": price(stock_us, 0.001)}), min_effect)
    assert d["class"] == expected


def test_a_side_whose_own_picks_differ_by_price_is_unstable():
    prices = priced({"a": price(10.0), "b": price(12.0), "c": price(11.0)})
    d = compare(["b", "a", "b"], ["a"] * 3, prices)
    assert (d["class"], d["unstable_side"]) == ("unstable", "write")  # one stock pick is the clean one
    d = compare(["c", "b"], ["a"] * 2, prices)
    assert d["class"] == "changed"  # the stock picks differ, but every one loses beyond the noise
    d = compare(["a"] * 2, ["b", "c"], prices)
    assert (d["class"], d["unstable_side"]) == ("unstable", "write-read")


def test_an_unstable_decision_shows_each_sides_prices_and_a_stock_runs_cost_on_average():
    # one stock run in three picks a config 3.9x slower: not a change (the others picked the
    # clean pick), but its cost is said with the decision, not hidden behind "unstable"
    stock = [[decision(p, TIMED)] for p in "aca"]
    clean = [[decision("a", TIMED)] for _ in range(3)]
    cmp = _ab_compare.compare(stock, clean, "write-read", priced({"a": price(9.40), "c": price(36.9)}))
    [d] = cmp["decisions"]
    assert d["class"] == "unstable" and d["mean_ratio"] == pytest.approx((9.40 * 2 + 36.9) / 3 / 9.40)
    lines = _ab_report.format_report(record(cmp)).splitlines()
    assert "    stock picks 9.40-36.90 us, write-read picks 9.40 us; a stock run's pick +97.5% on average" in lines
    # picks that print alike are one price, not a range; an average that rounds to zero has no
    # sign, and one under the floor says so
    cmp = _ab_compare.compare(stock, clean, "write-read", priced({"a": price(9.401), "c": price(9.399)}))
    said = "    stock picks 9.40 us, write-read picks 9.40 us; a stock run's pick +0.0% on average (under the 2% floor)"
    assert said in _ab_report.format_report(record(cmp)).splitlines()
    # the floor's edge: an average of 2% is not under a 2% floor
    cmp = _ab_compare.compare(stock, clean, "write-read", priced({"a": price(10.0), "c": price(10.6)}))
    assert cmp["decisions"][0]["mean_ratio"] == pytest.approx(1.02)
    [line] = [x for x in _ab_report.format_report(record(cmp)).splitlines() if "on average" in x]
    assert line.endswith("a stock run's pick +2.0% on average")


def test_clean_picks_slower_than_the_stock_ones_are_said_so():
    d = compare(["a"] * 2, ["c"] * 2, priced({"a": price(10.0), "c": price(12.0)}))
    assert d["class"] == "clean slower" and not d["changed"]
    assert d["reason"] == "every write-read pick is +20.0% or more slower than every stock pick by its price"
    assert d["gap"] == pytest.approx(-0.2)


def test_a_change_says_its_gap_and_that_it_is_beyond_the_floor():
    d = compare(["c"] * 2, ["a"] * 2, priced({"a": price(10.0), "c": price(12.5)}))
    assert d["gap"] == pytest.approx(0.25)
    assert d["reason"] == (
        "every stock pick is +25.0% or more slower than every write-read pick by its price, "
        "beyond the noise of 0.4%, beyond the floor"
    )


def test_a_gap_exactly_at_the_floor_is_not_beyond_it():
    d = compare(["c"] * 2, ["a"] * 2, priced({"a": price(10.0), "c": price(12.5)}), min_effect=0.25)
    assert d["class"] == "negligible"  # 12.5 / 10 - 1 is 0.25 exactly


def test_both_sides_apart_by_price_are_named_both():
    prices = priced({"a": price(10.0), "b": price(12.0), "c": price(11.0), "d": price(13.0)})
    d = compare(["a", "b"], ["c", "d"], prices)
    assert (d["class"], d["unstable_side"]) == ("unstable", "both")
    assert d["reason"] == "the write and the write-read runs' own picks differ by their price beyond the noise of 0.4%"


def test_a_clean_timing_of_zero_is_no_choice_to_compare():
    zero = {"a": 0.0, "b": 0.011}  # a choice a run timed at 0 ms: no ratio to take
    stock = [[decision("b", zero)] for _ in range(2)]
    clean = [[decision("b", zero)] for _ in range(2)]
    [d] = _ab_compare.compare(stock, clean, "write-read")["decisions"]
    assert list(d["timings_ms"]) == ["b"] and d["choices"] == 1


def test_the_report_says_which_classes_are_under_the_floor_and_the_kinds_of_decision():
    stock = [[decision("c", TIMED, key="small"), decision("b", TIMED, key="wander")] for _ in "ab"]
    stock[1][1] = decision("a", TIMED, key="wander")
    clean = [[decision("a", TIMED, key="small"), decision("a", TIMED, key="wander")] for _ in "ab"]
    prices = [
        *priced({"a": price(10.0, 0.001), "c": price(10.3, 0.001)}, key="small"),
        *priced({"a": price(10.0), "b": price(12.0)}, key="wander"),
    ]
    cmp = _ab_compare.compare(stock, clean, "write-read", prices, 0.05)
    lines = _ab_report.format_report(record(cmp)).splitlines()
    assert "negligible (under the 5% floor): 1" in lines
    assert "unstable: 1" in lines
    assert lines[3] == (
        "autotuning decisions matched in both: 2 (Triton autotuner 2, Inductor max-autotune 0, "
        "Inductor kernel configs 0, their coordinate descent 0); priced independently: 2"
    )


def test_a_decision_without_a_price_is_judged_by_the_clean_timing_and_says_why():
    stock = [[decision("c", TIMED)] for _ in range(2)]
    clean = [[decision("a", TIMED)] for _ in range(2)]
    why = "ModuleNotFoundError: No module named 'lib'"
    cmp = _ab_compare.compare(stock, clean, "write-read", [{"key": ["triton", "lib.gemv", "1"], "error": why}])
    [d] = cmp["decisions"]
    assert (d["class"], d["priced"], d["not_priced"]) == ("changed", False, why)
    report = _ab_report.format_report(record(cmp))
    assert f"    not priced: {why}" in report.splitlines()
    assert "priced independently: 0" in report


def record(cmp, policy="write-read"):
    return {
        "command": ["python", "tune.py"],
        "policy": policy,
        "runs": 3,
        "runs_compared": 3,
        "run_codes": [],
        "skipped_lines": [],
        "interrupted": False,
        "comparison": cmp,
    }


def test_a_job_total_under_a_tenth_of_a_millisecond_is_said_in_microseconds():
    stock = [[decision("c", TIMED), {"kind": "calls", "op": "lib.gemv", "counts": {"1": 1}}] for _ in range(3)]
    clean = [[decision("a", TIMED), {"kind": "calls", "op": "lib.gemv", "counts": {"1": 1}}] for _ in range(3)]
    cmp = _ab_compare.compare(stock, clean, "write-read", priced({"a": price(19.0), "c": price(20.1)}))
    lines = _ab_report.format_report(record(cmp)).splitlines()
    assert (
        "in total: the stock picks cost 1.1 us per call of the 1 changed kernels (summed), "
        "1.1 us over the 1 calls the runs counted"
    ) in lines


def test_the_report_prices_each_change_and_totals_the_job_by_its_calls():
    stock = [[decision("c", TIMED), {"kind": "calls", "op": "lib.gemv", "counts": {"1": 30}}] for _ in range(3)]
    clean = [[decision(p, TIMED), {"kind": "calls", "op": "lib.gemv", "counts": {"1": 30}}] for p in "aba"]
    cmp = _ab_compare.compare(
        stock, clean, "write-read", priced({"a": price(9.40), "b": price(9.43), "c": price(36.9)})
    )
    lines = _ab_report.format_report(record(cmp)).splitlines()
    assert "    stock picked c (3 of 3 runs): 36.90 us (36.83-36.97)" in lines
    assert "    write-read picked a (2 of 3 runs): 9.40 us (9.38-9.42)" in lines
    assert "    stock / write-read 3.93x; sure: 5 rounds, noise 0.4%" in lines
    assert (
        "in total: the stock picks cost 27.5 us per call of the 1 changed kernels (summed), "
        "0.82 ms over the 30 calls the runs counted"
    ) in lines
    assert (
        "reproducible: stock runs agree on 1 of 1 decisions (1 by price), write-read runs on 0 of 1 (1 by price)"
        in lines
    )
    assert cmp["total"] == {
        "changed_priced": 1,
        "us_per_call_sum": pytest.approx(27.5),
        "counted": 1,
        "us_over_calls": pytest.approx(825.0),
        "calls": 30,
    }


def test_only_decisions_picked_differently_are_priced_each_with_its_record_or_why_not():
    same = [[decision("a", TIMED, key="same")] for _ in range(2)]
    stock = [[*run, decision("c", TIMED)] for run in same]
    clean = [[*run, decision("a", TIMED)] for run in same]
    clean[1].append({**decision("b", TIMED, key="inductor"), "kind": "inductor", "call": None})
    stock[1].append({**decision("a", TIMED, key="inductor"), "kind": "inductor", "call": None})
    unpriced = decision("b", TIMED, key="main", call={"error": "its kernel is defined in __main__"})
    stock[0].append(decision("a", TIMED, key="main", call={"error": "its kernel is defined in __main__"}))
    clean[0].append(unpriced)
    wanted = _ab_compare.to_price(stock, clean)
    assert wanted == [
        {"key": ["triton", "lib.gemv", "1"], "file": "k.pt", "error": None, "candidates": ["a", "c"]},
        {
            "key": ["triton", "lib.gemv", "main"],
            "file": None,
            "error": "its kernel is defined in __main__",
            "candidates": ["a", "b"],
        },
        {
            "key": ["inductor", "lib.gemv", "inductor"],
            "file": None,
            "error": "its runs recorded no call to make again (only Triton @autotune calls are recorded)",
            "candidates": ["a", "b"],
        },
    ]  # "same" is picked alike everywhere: nothing to price there


def test_a_decisions_file_line_that_counts_calls_is_read_and_checked():
    assert _ab.decision('{"kind": "calls", "op": "k", "counts": {"(1,)": 3}}') == {
        "kind": "calls",
        "op": "k",
        "counts": {"(1,)": 3},
    }
    out_of_range = "a calls line whose counts are not whole numbers in range"
    for bad, why in (
        ('{"kind": "calls", "op": "k", "counts": {"(1,)": -1}}', out_of_range),
        ('{"kind": "calls", "counts": {}}', "a calls line without its op or counts"),
        ('{"kind": "calls", "op": "k", "counts": {"(1,)": true}}', out_of_range),
    ):
        with pytest.raises(ValueError, match=f"^{why}$"):
            _ab.decision(bad)


def test_compiled_kernels_are_carried_to_the_next_run_but_never_tuning_results(tmp_path):
    run1 = tmp_path / "run1" / "triton" / "abc123"
    run1.mkdir(parents=True)
    (run1 / "kernel.cubin").write_bytes(b"\x7fELF")
    (run1 / "kernel.autotune.json").write_text("{}")
    _ab.folders.carry(str(tmp_path / "run1" / "triton"), str(tmp_path / "compiled"))
    _ab.folders.carry(str(tmp_path / "compiled"), str(tmp_path / "run2" / "triton"))
    carried = sorted(p.name for p in (tmp_path / "run2" / "triton").rglob("*") if p.is_file())
    assert carried == ["kernel.cubin"]
    # the next run's kernels join those already carried
    (tmp_path / "run2" / "triton" / "def456").mkdir()
    (tmp_path / "run2" / "triton" / "def456" / "other.cubin").write_bytes(b"\x7fELF")
    _ab.folders.carry(str(tmp_path / "run2" / "triton"), str(tmp_path / "compiled"))
    assert sorted(p.name for p in (tmp_path / "compiled").rglob("*.cubin")) == ["kernel.cubin", "other.cubin"]


# A real @triton.autotune call, recorded as an ab run records it, and made again in another
# process under each config: through Triton's interpreter, on CPU tensors.
TUNED = """
import torch, triton, triton.language as tl, sys
sys.path.insert(0, {here!r})
from tunedkernel import run
print(run().tolist())  # what the job's own call computed
"""

KERNEL = """
import torch, triton, triton.language as tl

def bench(kernel_call, quantiles=None, **kw):
    kernel_call()
    return [1.0, 1.0, 1.0]

def zero_out(nargs):
    nargs["out"].zero_()

@triton.autotune(configs=[triton.Config({"BLOCK": 16}, pre_hook=zero_out), triton.Config({"BLOCK": 64})],
                 key=["n"], do_bench=bench, restore_value=["x"])
@triton.jit
def add_two(x, out, n, scale, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) * scale + 2, mask=m)

def run():
    x = torch.arange(200, dtype=torch.float32)[::2]  # a strided view: its storage and stride recorded
    out = torch.empty(100)
    add_two[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, out, 100, 3.0)
    return out
"""

MADE_AGAIN = """
import json, sys, torch
sys.path.insert(0, {here!r})
from cleanflush._calls import Call
call = Call.load({path!r}, torch.device("cpu"))
x, out = call.args[0], call.args[1]
results = {{}}
for label in {labels!r}:
    out.fill_(-1.0)
    call.launch(label)()
    results[label] = [x.stride(), out.tolist() == {expected!r}]
print(json.dumps(results))
"""


def recorded_call(tmp_path):
    """KERNEL's call as an ab run records it: the record's path, the configs it was timed
    under, and what the job's own call computed."""
    (tmp_path / "tunedkernel.py").write_text(KERNEL)
    env = {
        "CLEANFLUSH": "1",
        "CLEANFLUSH_DECISIONS": str(tmp_path / "d.jsonl"),
        "CLEANFLUSH_AB_CALLS": str(tmp_path),
        "TRITON_INTERPRET": "1",
    }
    child = run_python(TUNED.format(here=str(tmp_path)), env)
    assert child.returncode == 0, child.stderr[-3000:]
    found, bad = _ab.read_decisions(str(tmp_path / "d.jsonl"))
    [made] = [d for d in found if d["kind"] != "calls"]
    assert not bad and made["call"]["file"] and os.path.exists(tmp_path / made["call"]["file"])
    return str(tmp_path / made["call"]["file"]), sorted(made["timings_ms"]), json.loads(child.stdout.splitlines()[-1])


@needs_autotune_do_bench
def test_a_real_autotuning_call_is_recorded_and_made_again_under_each_config(tmp_path):
    path, labels, expected = recorded_call(tmp_path)
    again = run_python(
        MADE_AGAIN.format(here=str(tmp_path), path=path, labels=labels, expected=expected), {"TRITON_INTERPRET": "1"}
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout) == {label: [[2], True] for label in labels}


# What runs just before the kernel (ab's plain read) sees both pre-hooks' work done: the
# config's (``out`` zeroed) and the autotuner's (``x`` cloned, so what it does to ``x`` is undone
# by the post-hook's restore); the kernel sees what it did.  Without the autotuner's hooks,
# nothing restores ``x``.
BETWEEN = """
import json, sys, torch
sys.path.insert(0, {here!r})
from cleanflush._calls import Call
call = Call.load({path!r}, torch.device("cpu"))
x, out = call.args[0], call.args[1]
original, seen = x.clone(), {{}}

def between():
    seen["out zeroed"] = bool((out == 0).all())
    x.add_(1000.0)
    read = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage())[: out.numel()]  # as the kernel reads x
    seen["kernel's result"] = (read * 3.0 + 2.0).tolist()

results = {{}}
for hooks in (True, False):
    x.copy_(original)
    out.fill_(-1.0)
    call.launch({label!r}, before_kernel=between, tuning_hooks=hooks)()
    kernel_saw_it = out.tolist() == seen.pop("kernel's result")
    results[str(hooks)] = [seen.pop("out zeroed"), kernel_saw_it, torch.equal(x, original)]
print(json.dumps(results))
"""


@needs_autotune_do_bench
def test_what_runs_before_the_kernel_runs_after_both_pre_hooks_and_the_restore_undoes_it(tmp_path):
    path, labels, _ = recorded_call(tmp_path)
    [hooked] = [label for label in labels if "BLOCK: 16" in label]  # the config with the pre-hook
    child = run_python(BETWEEN.format(here=str(tmp_path), path=path, label=hooked), {"TRITON_INTERPRET": "1"})
    assert child.returncode == 0, child.stderr[-3000:]
    assert json.loads(child.stdout) == {"True": [True, True, True], "False": [True, True, False]}


@needs_autotune_do_bench
def test_a_kernel_defined_in_main_is_not_recorded_and_says_why(tmp_path):
    env = {
        "CLEANFLUSH": "1",
        "CLEANFLUSH_DECISIONS": str(tmp_path / "d.jsonl"),
        "CLEANFLUSH_AB_CALLS": str(tmp_path),
        "TRITON_INTERPRET": "1",
    }
    child = run_python(KERNEL + "\nrun()\n", env)
    assert child.returncode == 0, child.stderr[-3000:]
    [made] = [d for d in _ab.read_decisions(str(tmp_path / "d.jsonl"))[0] if d["kind"] != "calls"]
    assert made["call"] == {
        "error": "its kernel is defined in __main__ (or nowhere importable): it cannot be made again elsewhere"
    }


def test_the_prices_are_made_in_a_process_of_their_own_in_the_work_folder(tmp_path, monkeypatch, capsys):
    # the real pricing process, on a machine without CUDA: it fails, and every decision says so
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    work = tmp_path / "work"
    done = _ab._Runs({"write": [[decision("c", TIMED)]] * 2, "write-read": [[decision("a", TIMED)]] * 2})
    priced_now = _ab._price(environ_without_cleanflush(), str(work), done)
    assert priced_now == [{"key": ["triton", "lib.gemv", "1"], "error": "the pricing process failed (exit 1)"}]
    said = capsys.readouterr()
    assert "cleanflush ab: pricing the picks of 1 decision(s), side by side\n" in said.err
    assert "pricing" not in said.out  # stdout is the report's and the job's
    spec = json.loads((work / "prices" / "spec.json").read_text())
    assert spec["calls_folder"] == str(work / "calls") and spec["decisions"][0]["candidates"] == ["a", "c"]
    assert not (tmp_path / "elsewhere" / "prices").exists()
    assert done.pricing_s > 0
    assert (
        _ab._record(["x"], "flush", _ab.sides_of("flush", "write-read"), 2, None, done, priced_now, 0.02)["pricing_s"]
        == done.pricing_s
    )


@pytest.mark.parametrize("text, fraction", [("2", 0.02), ("0.5", 0.005), (" 2% ", 0.02), ("0", 0.0), ("100", 1.0)])
def test_the_floor_option_takes_a_percentage(text, fraction):
    from cleanflush.cli import ab

    assert ab.percent(text) == pytest.approx(fraction)


@pytest.mark.parametrize("text", ["-1", "100.5", "nan", "inf", "1e1", "¹", "2 %%", "", "0x10", "1_0"])
def test_the_floor_option_refuses_what_is_no_percentage_and_names_the_form(text):
    import argparse

    from cleanflush.cli import ab

    named = r"^expected a percentage from 0 to 100, e\.g\. 2 or 0\.5; got "
    with pytest.raises(argparse.ArgumentTypeError, match=named):
        ab.percent(text)


@pytest.mark.parametrize(
    "gap, noise, expected",
    [
        (0.010, 0.010, None),  # at the noise: within it
        (0.0101, 0.010, "negligible"),  # beyond the noise, under the floor
        (0.020, 0.010, "negligible"),  # at the floor: not beyond it
        (0.0201, 0.010, "changed"),
        (0.030, 0.040, None),  # beyond the floor but within the noise
    ],
)
def test_the_one_rule_for_a_gap_between_the_sides(gap, noise, expected):
    assert _ab_compare.effect(gap, noise, 0.02) == expected


def test_a_priced_change_carries_its_cost_and_the_range_the_prices_rounds_allow():
    d = compare(["c"] * 2, ["a"] * 2, priced({"a": price(10.0, 0.01), "c": price(12.0, 0.02)}))
    assert d["class"] == "changed" and d["cost"] == pytest.approx(0.2)
    # the stock pick at its fastest round against the clean pick at its slowest, and back
    assert d["cost_low"] == pytest.approx(11.88 / 10.05 - 1) and d["cost_high"] == pytest.approx(12.12 / 9.95 - 1)
    assert d["stock_winner_slower_by"] == pytest.approx(0.2)


def test_picks_with_no_price_asked_for_are_judged_by_the_clean_timing_and_say_so():
    stock = [[decision("c", TIMED)] for _ in range(2)]
    clean = [[decision("a", TIMED)] for _ in range(2)]
    [d] = _ab_compare.compare(stock, clean, "write-read", None)["decisions"]
    assert d["priced"] is False and d["not_priced"] == "no price was asked for"
    assert "not priced" not in d["reason"]  # nothing failed: no price was wanted
    assert d["cost"] is not None and d["stock_winner_slower_by"] == d["cost"]  # by the clean runs' timing


def test_a_pick_shown_with_its_count_is_cut_at_fifty_characters():
    long, cut = "B" * 51, "B" * 47 + "..."
    assert _ab_report._counted([long, "a", long]) == f"{cut} x2, a x1"
    assert _ab_report._counted(["B" * 50]) == "B" * 50 + " x1"  # the edge: shown whole


def test_a_failed_run_is_named_by_its_side_and_an_unpatched_clean_side_says_stock_against_stock():
    codes = [
        {"index": 1, "policy": "write-read", "side": "fastest", "code": 0},
        {"index": 2, "policy": "write-read", "side": "stable", "code": 3},  # --compare pick: one flush
        {"index": 3, "policy": "write", "code": -9},  # a record without sides names the policy
    ]
    lines = _ab_report._ending_lines({"run_codes": codes, "skipped_lines": []})
    assert lines == ["run 2 (stable) exited with code 3", "run 3 (write) killed by SIGKILL"]
    assert _ab_report._not_patched_lines(["inductor", "triton"], "write-read") == [
        "  CLEANFLUSH_DISABLE=inductor,triton: the clean side is not patched: stock against stock"
    ]
    assert _ab_report._not_patched_lines(["triton"], "read") == [
        "  CLEANFLUSH_DISABLE=triton: triton runs stock in the read runs too: its decisions compare stock against stock"
    ]
    assert _ab_report._not_patched_lines([], "read") == []
