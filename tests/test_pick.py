"""The pick rule (#43): the stable rule itself, selecting it (the variable, pick() blocks,
threads, children, `cleanflush run --pick`, the pytest option), and the real Triton
Autotuner through Triton's interpreter in fresh processes, where the autotuner's own pick
differs between processes on jittered near-ties and the stable pick does not."""

import inspect
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import types

import pytest

import cleanflush
from cleanflush import _autotuner, _pick, _tunercache

from .conftest import environ_without_cleanflush, run_python
from .triton_layout import needs_autotune_do_bench

# ---- the rule, on plain numbers ---------------------------------------------------------


def never(config):
    raise AssertionError(f"{config} was timed again")


def test_a_clear_winner_beyond_twice_the_floor_is_kept_and_nothing_is_timed_again():
    order = ["a", "b", "c"]
    found = _pick.stable(order, {"a": 1.05, "b": 1.0, "c": 1.3}, never, floor=0.01)
    assert found.winner == "b" == found.fastest and found.noise is None and found.candidates == ["b"]


def jittered(base, seed, jitter=0.004):
    """A timer of ``base`` (config -> ms) with a relative jitter drawn from ``seed``."""
    rng = random.Random(seed)
    return lambda config: base[config] * (1 + rng.uniform(-jitter, jitter))


BASE = {"a": 1.000, "b": 1.003, "c": 1.006, "d": 1.5}  # three near-ties in the autotuner's order, one slow


@pytest.mark.parametrize("seeds", [range(0, 20)])
def test_near_ties_give_one_stable_pick_where_the_fastest_differs(seeds):
    stable, fastest = set(), set()
    for seed in seeds:
        timer = jittered(BASE, seed)
        sweep = {c: timer(c) for c in BASE}
        fastest.add(min(sweep, key=sweep.get))  # the autotuner's own rule: the negative control
        stable.add(_pick.stable(list(BASE), sweep, timer, floor=0.01).winner)
    assert len(fastest) > 1  # the jitter decides the autotuner's pick
    assert stable == {"a"}  # the first in order within the band, every time


def test_the_band_edge_is_inside_and_just_beyond_it_is_not():
    floor = 0.01
    at_edge = {"a": 1.0 * (1 + floor), "b": 1.0}  # a, first in order, exactly at the band's edge
    found = _pick.stable(["a", "b"], at_edge, at_edge.get, floor)
    assert found.winner == "a" and found.band == floor and found.candidates == ["a", "b"]
    beyond = {"a": 1.0 * (1 + floor) * 1.0001, "b": 1.0}
    found = _pick.stable(["a", "b"], beyond, beyond.get, floor)
    assert found.winner == "b" and found.candidates == ["b"]


def read_by_the_timer(base, seed, jitter=0.5):
    """A timer of ``base`` (config -> ms) as CUDA events read it: the time plus up to ``jitter``
    ticks either way, on the timer's step (a single reading, as Inductor's minimum is)."""
    rng = random.Random(seed)
    tick = _pick.TICK_MS
    return lambda config: round(base[config] / tick + rng.uniform(-jitter, jitter)) * tick


# the Llama decode's first RMSNorm kernel on an H100 (the pick study): two configs about a tick
# apart at 4 us, the first in Inductor's order the slower; a tick is 0.8% of it
TICK_APART = {"r2048_w16": 0.004010, "r512_w4": 0.003975}


def stable_over_readings(seeds, base=TICK_APART, read=read_by_the_timer):
    picks = [_pick.stable(list(base), {c: read(base, s)(c) for c in base}, read(base, 1000 + s), 0.01) for s in seeds]
    return {p.winner for p in picks}, picks


def test_single_readings_a_tick_or_two_apart_are_one_choice(monkeypatch):
    winners, picks = stable_over_readings(range(30))
    assert winners == {"r2048_w16"}
    assert all(p.band == p.resolution == pytest.approx(2.5 * 32e-6 / 0.003968, rel=0.02) for p in picks)
    # the control: a band of the floor alone keeps the faster one whenever it read two ticks ahead
    monkeypatch.setattr(_pick, "TICKS_ALIKE", 0.0)
    winners, picks = stable_over_readings(range(30))
    assert winners == {"r2048_w16", "r512_w4"} and {p.band for p in picks} == {0.01}


def test_averaged_timings_resolve_finer_than_a_tick_and_keep_the_floor():
    def averaged(base, seed):  # the mean of many readings: off the timer's step
        rng = random.Random(seed)
        return lambda config: base[config] * (1 + rng.uniform(-0.002, 0.002))

    _, picks = stable_over_readings(range(10), read=averaged)
    assert all(p.resolution == 0.0 and p.band >= 0.01 for p in picks)
    assert _pick.resolution([0.004, 0.003968], 0.003968) > 0.02  # readings
    assert _pick.resolution([0.004, 0.003968], 0.0) == 0.0
    assert _pick.resolution([0.004, 0.0039681], 0.003968) == 0.0  # one not a reading
    assert _pick.resolution([0.004, math.inf], 0.003968) == 0.0
    assert _pick.resolution([0.004016, 0.003968], 0.003968) > 0  # on the half step: a median of two


def test_the_measured_noise_widens_the_band_up_to_twice_the_floor():
    # a is 1.2% slower than b in the sweep; timed again, each moves against its round's
    # fastest, a by 1.5% and b by 1.8%: the noise is 1.5%, and a is inside that band
    rounds = iter([1.018, 1.0, 1.015, 1.0])  # b, a (reversed); then a, b
    found = _pick.stable(["a", "b"], {"a": 1.012, "b": 1.0}, lambda c: next(rounds), floor=0.01)
    assert found.noise == pytest.approx(0.015) and found.band == found.noise
    assert found.winner == "a" and not found.too_noisy


def stalled_once():
    """fla's layer norm row kernel on an H100 (the pick study), two configs tied in the sweep,
    one timing of one of them at 6x in the last round."""
    rounds = iter([5.02, 5.06, 5.09, 29.7])  # w16, w8 (reversed); then w8, w16
    return _pick.stable(["w8", "w16"], {"w8": 5.02, "w16": 5.02}, lambda c: next(rounds), floor=0.01)


def test_one_config_that_stalled_once_does_not_widen_the_band_of_two(monkeypatch):
    found = stalled_once()
    assert found.band == 0.01 and not found.too_noisy and found.winner == "w8" and found.candidates == ["w8", "w16"]
    # the control: the mean of the two configs' spreads (the median of two) is the stall's
    monkeypatch.setattr(_pick, "NOISE_OVER_CONFIGS", statistics.median)
    found = stalled_once()
    assert found.too_noisy and found.band > 2


def test_each_configs_time_in_each_round_is_kept_the_sweeps_first_as_measured():
    rounds = iter([1.0, 1.033, 1.015, 1.018])  # b, a (reversed); then a, b
    found = _pick.stable(["a", "b"], {"a": 1.015, "b": 1.0}, lambda c: next(rounds), floor=0.01)
    assert found.rounds_ms == {"a": [1.015, 1.033, 1.015], "b": [1.0, 1.0, 1.018]}
    # kept where the noise decides too, and empty where nothing was timed again
    rounds = iter([1.5, 1.0, 1.0, 1.0, 1.5, 1.0])
    found = _pick.stable(["a", "b", "c"], {"a": 1.005, "b": 1.0, "c": 1.002}, lambda c: next(rounds), 0.01)
    assert found.too_noisy and found.rounds_ms == {"a": [1.005, 1.0, 1.0], "b": [1.0, 1.0, 1.5], "c": [1.002, 1.5, 1.0]}
    assert _pick.stable(["a", "b"], {"a": 1.5, "b": 1.0}, never, floor=0.01).rounds_ms == {}


def test_noise_beyond_twice_the_floor_keeps_the_autotuners_own_pick():
    # timed again c, b, a; then a, b, c: two of the three configs stall in one round each
    rounds = iter([1.5, 1.0, 1.0, 1.0, 1.5, 1.0])
    found = _pick.stable(["a", "b", "c"], {"a": 1.005, "b": 1.0, "c": 1.002}, lambda c: next(rounds), 0.01)
    assert found.too_noisy and found.winner == "b" == found.fastest and found.band > 0.02


def test_at_most_four_are_timed_again_the_first_in_order_and_the_fastest_after_the_sweep():
    order = list("abcdefgh")
    sweep = {c: 1.0 + 0.001 * i for i, c in enumerate(order)}
    sweep["g"] = 0.999
    timed = []
    found = _pick.stable(order, sweep, lambda c: timed.append(c) or sweep[c], 0.01)
    assert sorted(set(timed)) == ["a", "b", "c", "g"] and len(timed) == 4 * (_pick.ROUNDS - 1)
    assert found.winner == "a"


def test_the_pick_carries_the_wall_time_of_its_own_timing_the_hooks_alone_included():
    now = [0.0]  # a clock each timing moves: 1 s a config timed again, 0.5 s the hooks alone

    def again(config):
        now[0] += 1.0
        return HELD[config]

    def hooks():
        now[0] += 0.5
        return SHARED

    found = _pick.stable(["a", "b"], HELD, again, 0.01, shared=hooks, clock=lambda: now[0])
    assert found.again_s == 2 * (_pick.ROUNDS - 1) * 1.0 + 0.5
    # a clear winner: nothing timed, nothing taken
    assert _pick.stable(["a", "b"], {"a": 1.5, "b": 1.0}, never, 0.01, clock=lambda: now[0]).again_s == 0.0


def test_a_config_that_fails_when_timed_again_raises_to_the_caller():
    def fails(config):
        raise RuntimeError("launch failed")

    with pytest.raises(RuntimeError, match="launch failed"):
        _pick.stable(["a", "b"], {"a": 1.0, "b": 1.001}, fails, 0.01)


# what every timing shares (an autotuner's hooks), 0.75 ms of each: the configs' own times
# differ by 1.6% (beyond a 1% band, inside the window), their whole timings by 0.4%
SHARED, OWN = 0.75, {"a": 0.254, "b": 0.250}
HELD = {c: SHARED + t for c, t in OWN.items()}


def test_the_shared_time_is_taken_off_so_the_band_is_a_share_of_the_configs_own_time():
    asked = []
    found = _pick.stable(["a", "b"], HELD, HELD.get, 0.01, shared=lambda: asked.append(1) or SHARED)
    assert found.winner == "b" == found.fastest and found.candidates == ["b"]
    assert asked == [1] and found.shared_ms == SHARED
    assert found.timed_again["a"] == pytest.approx(OWN["a"] / OWN["b"])  # a ratio of the own times
    assert found.rounds_ms == {"a": [HELD["a"]] * 3, "b": [HELD["b"]] * 3}  # as measured
    # the negative control: the same timings with nothing shared keep a, first in the band
    assert _pick.stable(["a", "b"], HELD, HELD.get, 0.01).winner == "a"


def test_the_shared_time_is_asked_only_where_configs_are_near_and_narrows_the_window():
    def unasked():
        raise AssertionError("asked with a clear winner")

    assert _pick.stable(["a", "b"], {"a": 1.5, "b": 1.0}, never, 0.01, shared=unasked).winner == "b"
    # within the window by the whole timings (1% < 2%), beyond it by the own times (4%): nothing timed again
    far = {"a": 0.75 + 0.26, "b": 0.75 + 0.25}
    found = _pick.stable(["a", "b"], far, never, 0.01, shared=lambda: 0.75)
    assert found.winner == "b" and found.rounds_ms == {} and found.shared_ms == 0.75


def test_a_shared_time_not_under_every_timing_is_not_taken_off():
    for shared in (1.0, 2.0, -0.1):  # the whole fastest timing or more, or below nothing
        found = _pick.stable(["a", "b"], HELD, HELD.get, 0.01, shared=lambda shared=shared: shared)
        assert found.shared_ms == 0.0 and found.winner == "a"  # as with nothing shared


def test_a_timing_again_under_the_shared_time_keeps_the_autotuners_own_pick():
    # a 0.8% over b by their own times, both inside the band; in one round both were timed
    # under what the hooks alone took, which no ratio of own times survives
    near = {"a": SHARED + 0.252, "b": SHARED + 0.250}
    again = iter([0.70, 0.70, near["a"], near["b"]])  # b, a (reversed); then a, b
    found = _pick.stable(["a", "b"], near, lambda c: next(again), 0.01, shared=lambda: SHARED)
    assert found.too_noisy and found.winner == "b" == found.fastest and found.candidates == ["b"]
    assert found.rounds_ms["a"] == [near["a"], 0.70, near["a"]]


def test_a_shared_time_that_fails_raises_to_the_caller():
    def fails():
        raise RuntimeError("hooks failed")

    with pytest.raises(RuntimeError, match="hooks failed"):
        _pick.stable(["a", "b"], HELD, HELD.get, 0.01, shared=fails)


# ---- choosing the rule --------------------------------------------------------------------


def test_an_unknown_rule_names_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown cleanflush pick rule 'fast'; valid pick rules: fastest, stable"):
        cleanflush.pick("fast")


def test_pick_blocks_nest_are_per_thread_and_reach_children(monkeypatch):
    monkeypatch.delenv("CLEANFLUSH_PICK", raising=False)
    cleanflush.install()
    seen = {}

    def other():
        seen["other"] = cleanflush.current_pick()

    with cleanflush.pick("stable"):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        seen["here"] = cleanflush.current_pick()
        child = run_python("import os; print(os.environ.get('CLEANFLUSH_PICK'))", {"CLEANFLUSH_PICK": None})
        with cleanflush.pick("fastest"):
            seen["nested"] = cleanflush.current_pick()
        seen["after nested"] = cleanflush.current_pick()
    assert seen == {"other": "fastest", "here": "stable", "nested": "fastest", "after nested": "stable"}
    # run_python starts from this process's environment less the user's variables: the block's
    # value reaches the child only through what the block wrote, so read it from os.environ
    assert child.returncode == 0
    assert cleanflush.current_pick() == "fastest" and "CLEANFLUSH_PICK" not in os.environ


def test_a_child_started_in_a_block_runs_the_blocks_rule(monkeypatch):
    monkeypatch.delenv("CLEANFLUSH_PICK", raising=False)
    cleanflush.install()
    code = "import cleanflush; print(cleanflush.current_pick())"
    with cleanflush.pick("stable"):
        env = dict(os.environ)
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert child.returncode == 0 and child.stdout.strip() == "stable", child.stderr


def test_the_variable_alone_turns_cleanflush_on_and_a_bad_value_is_one_line():
    code = (
        "import triton, sys; import cleanflush; print('cleanflush._targets' in sys.modules, cleanflush.current_pick())"
    )
    woke = run_python("import triton, sys; print('cleanflush' in sys.modules)", {"CLEANFLUSH_PICK": "stable"})
    assert woke.stdout.strip() == "True", woke.stderr
    bad = run_python(code, {"CLEANFLUSH_PICK": "fast"})
    assert bad.returncode == 0 and bad.stdout.split() == ["True", "fastest"]
    said = [line for line in bad.stderr.splitlines() if "CLEANFLUSH_PICK" in line]
    assert len(said) == 1 and "use one of: fastest, stable" in said[0] and "their own pick" in said[0]
    off = run_python(
        "import triton, sys; print('cleanflush' in sys.modules)", {"CLEANFLUSH": "0", "CLEANFLUSH_PICK": "stable"}
    )
    assert off.stdout.strip() == "False"  # off is off, whatever the rule


def test_a_bad_floor_is_one_line_and_the_default_floor():
    code = "from cleanflush import _pick; print(_pick.floor())"
    bad = run_python(code, {"CLEANFLUSH_PICK_FLOOR": "two"})
    assert bad.stdout.strip() == str(_pick.FLOOR)
    assert "CLEANFLUSH_PICK_FLOOR='two' is not a percentage from 0 to 100" in bad.stderr
    assert run_python(code, {"CLEANFLUSH_PICK_FLOOR": "2%"}).stdout.strip() == "0.02"


def test_cleanflush_run_pick_sets_the_rule_for_the_command():
    env = environ_without_cleanflush()
    code = "import os; print(os.environ['CLEANFLUSH_PICK'])"
    out = subprocess.run(
        [sys.executable, "-m", "cleanflush", "run", "--pick", "Stable", "--", sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0 and out.stdout.strip() == "stable", out.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "cleanflush", "run", "--pick", "fast", "--", "true"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "valid pick rules: fastest, stable" in bad.stderr


def test_the_pytest_option_sets_the_rule_and_leaves_no_trace(tmp_path, monkeypatch):
    monkeypatch.delenv("CLEANFLUSH_PICK", raising=False)
    (tmp_path / "test_x.py").write_text(
        "import os, cleanflush\n"
        "def test_rule():\n"
        "    assert cleanflush.current_pick() == 'stable' and os.environ['CLEANFLUSH_PICK'] == 'stable'\n"
    )
    args = ["-p", "cleanflush.pytest_plugin", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    assert pytest.main([*args, "--cleanflush-pick=stable"]) == 0
    assert cleanflush.current_pick() == "fastest" and "CLEANFLUSH_PICK" not in os.environ
    assert pytest.main([*args, "--cleanflush-pick=fast"]) == pytest.ExitCode.USAGE_ERROR


# ---- the real Triton Autotuner, through the interpreter, in fresh processes ---------------

pytest.importorskip("numpy")  # Triton's interpreter needs it

# Four configs of a real @triton.autotune kernel: three near-ties in the autotuner's order
# and a slow one, timed by a do_bench of the job's own that jitters by +-0.4% (a seed per
# process); the kernel really runs in each timing.  FAIL_AGAIN names a config whose timing
# raises once the sweep is over.
TIE_JOB = """
import json, os, random, sys
import torch, triton, triton.language as tl

rng = random.Random(int(os.environ["SEED"]))
BASE = {16: 1.000, 32: 1.003, 64: 1.006, 128: 1.5}
FAIL_AGAIN = int(os.environ.get("FAIL_AGAIN", "0"))
timed = []

def jitter_bench(kernel_call, quantiles=None, **kw):
    kernel_call()
    block = timed[-1]
    if FAIL_AGAIN == block and timed.count(block) > 1:
        raise RuntimeError("fails when timed again")
    t = BASE[block] * (1 + rng.uniform(-0.004, 0.004))
    return [t, t, t]

def pre(nargs):
    timed.append(nargs["BLOCK"])

@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=pre) for b in BASE], key=["n"], do_bench=jitter_bench,
                 restore_value=["x_ptr"])
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=m) + 1, mask=m)

mine = add_one.cache  # a reference the job takes before tuning
x = torch.zeros(256)
add_one[lambda meta: (triton.cdiv(256, meta["BLOCK"]),)](x, 256)
assert float(x.sum()) == 256
timings = {str(c): t for c, t in add_one.configs_timings.items()}
print(json.dumps({"pick": add_one.best_config.kwargs["BLOCK"], "timings": timings, "timed": timed,
                  "cache_kept": len(mine) == 1, "wrapped": type(add_one.cache).__name__}))
"""


def interpreted(tmp_path, name, source, **env):
    """``source`` run as ``name`` in a fresh process under Triton's interpreter (Triton
    compiles a kernel from its file): what it printed last, as JSON, and its stderr."""
    job = tmp_path / name
    job.write_text(source)
    full = {**environ_without_cleanflush(), "TRITON_INTERPRET": "1", **env}
    child = subprocess.run([sys.executable, str(job)], env=full, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.strip().splitlines()[-1]), child.stderr


def tuned(tmp_path, seed, **env):
    return interpreted(tmp_path, "tie_job.py", TIE_JOB, SEED=str(seed), **env)


SEEDS = range(6)  # seeds under which the autotuner's own pick differs between processes (checked below)


@needs_autotune_do_bench
def test_fresh_processes_pick_alike_under_stable_and_not_under_fastest(tmp_path):
    decisions = tmp_path / "d.jsonl"
    on = {"CLEANFLUSH": "1", "CLEANFLUSH_DECISIONS": str(decisions)}
    fastest = [tuned(tmp_path, s, **on, CLEANFLUSH_PICK="fastest")[0] for s in SEEDS]
    stable = [tuned(tmp_path, s, **on, CLEANFLUSH_PICK="stable")[0] for s in SEEDS]
    assert len({r["pick"] for r in fastest}) > 1  # the negative control: noise decides
    assert {r["pick"] for r in stable} == {16}  # the first in order within the band
    assert all(r["cache_kept"] and r["wrapped"] == "TunerCache" for r in stable)
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    lines = [d for d in lines if d["kind"] == "triton"]
    assert [d["rule"] for d in lines] == ["fastest"] * len(SEEDS) + ["stable"] * len(SEEDS)
    for d in lines[len(SEEDS) :]:
        rule = d["pick"]
        assert d["winner"] == "BLOCK: 16, " + d["winner"].split(", ", 1)[1] and rule["floor"] == _pick.FLOOR
        assert rule["candidates"][0] == d["winner"] and "BLOCK: 128" not in " ".join(rule["timed_again"])
        # each config timed again with its time in every round, the sweep's as the line has it
        assert set(rule["rounds_ms"]) == set(rule["timed_again"])
        assert all(len(ts) == _pick.ROUNDS and ts[0] == d["timings_ms"][c] for c, ts in rule["rounds_ms"].items())
    assert all("pick" not in d for d in lines[: len(SEEDS)])


@needs_autotune_do_bench
def test_with_the_rule_off_picks_and_timings_are_the_autotuners_own(tmp_path):
    for seed in SEEDS[:2]:
        stock, _ = tuned(tmp_path, seed, CLEANFLUSH="0")
        fastest, _ = tuned(tmp_path, seed, CLEANFLUSH="1", CLEANFLUSH_PICK="fastest")
        assert fastest["wrapped"] == stock["wrapped"] == "dict"
        assert fastest == stock  # the pick, the timings and every timing made


@needs_autotune_do_bench
def test_a_config_that_raises_when_timed_again_keeps_the_autotuners_pick_said_once(tmp_path):
    for seed in SEEDS[:2]:
        stock, _ = tuned(tmp_path, seed, CLEANFLUSH="0")
        found, stderr = tuned(tmp_path, seed, CLEANFLUSH="1", CLEANFLUSH_PICK="stable", FAIL_AGAIN="32")
        assert found["pick"] == stock["pick"] and found["timings"] == stock["timings"]
        said = [line for line in stderr.splitlines() if "kept the autotuner's own pick" in line]
        assert len(said) == 1 and "fails when timed again" in said[0]


@needs_autotune_do_bench
def test_a_clear_winner_is_kept_under_stable(tmp_path):
    job = TIE_JOB.replace(
        "BASE = {16: 1.000, 32: 1.003, 64: 1.006, 128: 1.5}", "BASE = {16: 1.2, 32: 1.0, 64: 1.3, 128: 1.5}"
    )
    found, _ = interpreted(tmp_path, "tie_job.py", job, SEED="0", CLEANFLUSH="1", CLEANFLUSH_PICK="stable")
    assert found["pick"] == 32 and len(found["timed"]) == 4 + 1  # the sweep and the call: nothing timed again


# The tie job timed by a function with the signature and defaults of Triton's own do_bench
# (triton/testing.py at triton-lang/triton 0094017; it needs a GPU, so a stand-in here) that
# notes the length each timing asked for.  STOCK=1 makes it triton.testing.do_bench, as the
# tuner's default is; STOCK=0 leaves it the job's own (the negative control).
LENGTH_JOB = (
    TIE_JOB.replace(
        "def jitter_bench(kernel_call, quantiles=None, **kw):",
        """lengths = []

def jitter_bench(kernel_call, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    lengths.append([warmup, rep])""",
    )
    .replace(
        "@triton.autotune(",
        """import triton.testing
if os.environ["STOCK"] == "1":
    triton.testing.do_bench = jitter_bench

@triton.autotune(""",
    )
    .replace(
        '"wrapped": type(add_one.cache).__name__}',
        '"wrapped": type(add_one.cache).__name__, "lengths": lengths, "bench_back": add_one.do_bench is jitter_bench}',
    )
)


@needs_autotune_do_bench
def test_timings_again_are_as_long_as_asked_with_tritons_do_bench_and_the_sweeps_with_full(tmp_path):
    assert LENGTH_JOB.count("lengths.append") == 1 and "STOCK" in LENGTH_JOB  # every replace took
    on = {"SEED": "0", "CLEANFLUSH": "1", "CLEANFLUSH_PICK": "stable"}
    default = [_pick.AGAIN_MS / 5, _pick.AGAIN_MS]  # a fifth of it warm-up

    def lengths(stock, again=None):
        asked = {"CLEANFLUSH_PICK_AGAIN_MS": again} if again is not None else {}
        found, stderr = interpreted(tmp_path, "length_job.py", LENGTH_JOB, STOCK=stock, **on, **asked)
        assert found["timed"][4:-1] and found["pick"] == 16  # some timed again; the pick as before
        assert found["bench_back"]  # the tuner's own do_bench after the rule
        return found["lengths"][:4], found["lengths"][4:], stderr

    for asked, length in ((None, default), ("50", [10, 50]), (" 40ms ", [8, 40])):
        sweep, again, _ = lengths("1", asked)
        assert sweep == [[25, 100]] * 4 and again and all(a == length for a in again), asked
    # the negative controls: full, and a job's own benchmark function, keep the sweep's length
    for stock, asked in (("1", "FULL"), ("0", None), ("0", "25")):
        sweep, again, _ = lengths(stock, asked)
        assert sweep == [[25, 100]] * 4 and again and all(a == [25, 100] for a in again)
    sweep, again, stderr = lengths("1", "soon")  # not a time: said once, the default length
    said = [line for line in stderr.splitlines() if "CLEANFLUSH_PICK_AGAIN_MS" in line]
    assert len(said) == 1 and "is not a time in ms over 0 (e.g. 25) or full" in said[0]
    assert all(a == default for a in again)


def test_timings_again_are_as_long_as_asked_for_a_tuner_that_took_do_bench_before_install():
    """A tuner that resolved its benchmarker before cleanflush was installed holds Triton's
    own ``do_bench``, which ``triton.testing`` now holds wrapped: timings again are as short as
    asked there too; a job's own benchmark function keeps its length (#70's sample, seed 20261208)."""
    testing = pytest.importorskip("triton.testing")
    stock = testing.do_bench
    original = getattr(stock, "__wrapped__", None)
    if original is None:
        pytest.skip("this triton's do_bench is not wrapped by cleanflush")
    for bench in (original, stock):
        shorter = _autotuner.shorter_bench(bench, 40.0)
        assert shorter.func is bench and shorter.keywords == {"warmup": 8.0, "rep": 40.0}
    assert _autotuner.shorter_bench(lambda kernel_call, quantiles=None: [1.0], 40.0) is None  # the control
    assert _autotuner.shorter_bench(original, None) is None  # full: the sweep's length


# A kernel whose autotuner restores its argument around each timing (``restore_value``), timed
# by a clock that charges HOOK_MS to every timing and the config's own time to a launch: the
# kernel stores its BLOCK, so the clock sees which config ran, or that none did (and whether
# a config's own pre-hook ran then: 64, first in order, has one).  HOOKS picks the tuner's
# hooks: "restore", "none" (the same clock, no hooks: the negative control), or "raising" (a
# pre- and post-hook of the job's that fail when no kernel ran).
HOOK_JOB = """
import json, os
import torch, triton, triton.language as tl

HOOK_MS, BASE = 0.75, {64: 0.4, 16: 0.254, 32: 0.250}
HOOKS = os.environ["HOOKS"]
which, timed, copies, config_hooks = torch.zeros(1, dtype=torch.int32), [], [], []

def bench(kernel_call, quantiles=None, **kw):
    which.zero_()
    before = len(config_hooks)
    kernel_call()
    timed.append(int(which[0]) or ("alone, a config's hook ran" if len(config_hooks) > before else 0))
    t = HOOK_MS + BASE.get(timed[-1], 0.0)
    return [t, t, t]

def config_hook(nargs):  # 64's own: not every config's, so not in what the hooks alone take
    config_hooks.append(nargs["BLOCK"])

def pre(nargs, reset_only=False):
    copies.append(nargs["x_ptr"].clone())

def post(nargs, exception):
    nargs["x_ptr"].copy_(copies.pop())
    if not int(which[0]):
        raise ValueError("no kernel ran")

hooks = {"restore": {"restore_value": ["x_ptr"]}, "none": {}, "raising": {"pre_hook": pre, "post_hook": post}}[HOOKS]

configs = [triton.Config({"BLOCK": b}, pre_hook=config_hook if b == 64 else None) for b in BASE]

@triton.autotune(configs=configs, key=["n"], do_bench=bench, **hooks)
@triton.jit
def add_one(x_ptr, which_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=m) + 1, mask=m)
    tl.store(which_ptr, BLOCK)

kernel = add_one.fn
x = torch.zeros(256)
add_one[lambda meta: (triton.cdiv(256, meta["BLOCK"]),)](x, which, 256)
print(json.dumps({"pick": add_one.best_config.kwargs["BLOCK"], "timed": timed, "sum": float(x.sum()),
                  "fn_back": add_one.fn is kernel}))
"""


def hooked(tmp_path, hooks, rule="stable"):
    """The hook job in a fresh process under ``rule``: what it printed, its decision line, stderr."""
    decisions = tmp_path / f"{hooks}-{rule}.jsonl"
    env = {"HOOKS": hooks, "CLEANFLUSH": "1", "CLEANFLUSH_PICK": rule, "CLEANFLUSH_DECISIONS": str(decisions)}
    found, stderr = interpreted(tmp_path, "hook_job.py", HOOK_JOB, **env)
    (line,) = [d for d in map(json.loads, decisions.read_text().splitlines()) if d["kind"] == "triton"]
    return found, line, stderr


@needs_autotune_do_bench
def test_a_tuners_restore_hooks_are_timed_alone_and_taken_off_each_timing(tmp_path):
    found, line, _ = hooked(tmp_path, "restore")
    # the own times differ by 1.6%, beyond the band: the faster is kept, though the whole
    # timings (0.4% apart) put both in it
    assert found["pick"] == 32 and line["pick"]["candidates"] == [line["winner"]]
    assert found["timed"].count(0) == 1 and line["pick"]["shared_ms"] == 0.75  # the hooks, timed once
    assert line["pick"]["again_s"] > 0  # what the rule took, on the process's own clock
    assert found["fn_back"] and found["sum"] == 256  # the kernel back in place, its argument restored
    # the negative control: the same clock, no hooks, so nothing shared; the first in the band
    found, line, _ = hooked(tmp_path, "none")
    assert found["pick"] == 16 and 0 not in found["timed"] and line["pick"]["shared_ms"] == 0.0
    # with the rule off nothing is timed alone: the autotuner's own timings, its own pick
    found, line, _ = hooked(tmp_path, "restore", rule="fastest")
    assert found["pick"] == 32 and 0 not in found["timed"] and "pick" not in line


@needs_autotune_do_bench
def test_hooks_that_fail_when_timed_alone_keep_the_autotuners_pick_said_once(tmp_path):
    found, line, stderr = hooked(tmp_path, "raising")
    assert found["pick"] == 32 and found["fn_back"] and found["sum"] == 256 and "pick" not in line
    said = [text for text in stderr.splitlines() if "kept the autotuner's own pick" in text]
    assert len(said) == 1 and "timing again raised ValueError('no kernel ran')" in said[0]


def test_hooks_are_found_in_each_autotuner_layout():
    # triton 3.0-3.1 keep the restored and zeroed arguments by position (restore_idx,
    # reset_idx: autotuner.py of the 3.0.0 wheel); 3.2 on by name, and flag a job's own hooks
    tuner = types.SimpleNamespace
    assert _autotuner.has_hooks(tuner(restore_idx=[0], reset_idx=[]))
    assert _autotuner.has_hooks(tuner(reset_idx=[2]))
    assert _autotuner.has_hooks(tuner(restore_value=["c_ptr"], reset_to_zero=[]))
    assert _autotuner.has_hooks(tuner(reset_to_zero=["c_ptr"]))
    assert _autotuner.has_hooks(tuner(restore_value=[], user_defined_pre_hook=True, user_defined_post_hook=False))
    assert _autotuner.has_hooks(tuner(user_defined_post_hook=True))
    assert not _autotuner.has_hooks(tuner(restore_value=[], reset_to_zero=[], user_defined_pre_hook=False))
    assert not _autotuner.has_hooks(tuner(restore_idx=[], reset_idx=[]))


def test_uninstall_gives_the_autotuner_its_own_cache_dict_back():
    mine = {}
    tuner = types.SimpleNamespace(cache=mine, base_fn=types.SimpleNamespace(__module__="lib", __name__="k"))
    wrapped = _autotuner.cache_of(tuner)
    assert tuner.cache is wrapped and wrapped.data is mine
    cleanflush.uninstall()
    assert tuner.cache is mine


AB_PICK = [sys.executable, "-m", "cleanflush", "ab", "--compare", "pick"]


@needs_autotune_do_bench
def test_ab_compare_pick_runs_both_rules_under_the_clean_flush_and_reports_them(tmp_path):
    job = tmp_path / "tie_job.py"
    job.write_text(TIE_JOB)
    env = {**environ_without_cleanflush(), "TRITON_INTERPRET": "1", "SEED": "3"}
    command = [*AB_PICK, "--runs", "2", "--keep", str(tmp_path / "k")]
    out = subprocess.run(
        [*command, "--json", "-", "--", sys.executable, str(job)], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(out.stdout)
    assert record["compare"] == "pick" and "comparison" not in record and record["end_to_end"] is None
    assert [(r["side"], r["policy"]) for r in record["run_codes"]] == [
        ("fastest", "write-read"),
        ("stable", "write-read"),
    ] * 2
    runs = sorted(name for name in os.listdir(tmp_path / "k") if name.startswith("run"))
    assert runs == ["run1-fastest", "run2-stable", "run3-fastest", "run4-stable"]
    [decision] = record["picks"]["decisions"]
    stable = decision["winners"]["stable"]
    assert stable == ["BLOCK: 16, " + stable[0].split(", ", 1)[1]] * 2
    assert len(decision["bands"]["stable"]) == 2 and decision["candidates"]["stable"]  # each stable run's
    assert decision["bands"]["fastest"] == [] and record["picks"]["rules"] == ["fastest", "stable"]
    agreement = record["picks"]["agreement"]
    assert set(agreement) == {"fastest", "stable"} and agreement["stable"]["agree"] == 1
    assert all(len(v) == 2 for v in record["picks"]["wall_s"].values())
    text = subprocess.run(
        [*command[:-2], "--", sys.executable, str(job)], env=env, capture_output=True, text=True, timeout=300
    ).stdout
    assert "the pick rules fastest and stable, both under write-read" in text
    assert "stable: 1 of 1 decisions picked alike in all 2 runs" in text and "wall time a run, median" in text


def test_ab_compare_pick_draws_no_figure(tmp_path):
    out = subprocess.run(
        [*AB_PICK, "--figure", str(tmp_path / "f.png"), "--", "true"],
        env=environ_without_cleanflush(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "--figure draws the flush comparison; --compare pick has none" in out.stderr


def test_compare_picks_prices_each_rules_picks_and_weights_the_job_by_calls():
    from cleanflush._ab import compare

    def line(winner, key="1", rule=None):
        found = {"kind": "triton", "op": "lib.k", "key": key, "timings_ms": {"A": 1.0, "B": 1.0}, "winner": winner}
        if rule:
            found["pick"] = {"rule": "stable", "band": 0.012, "candidates": ["A", "B"], "fastest": "A", "floor": 0.01}
        return found

    calls = {"kind": "calls", "op": "lib.k", "counts": {"1": 10, "2": 4}}
    fastest = [[line("B"), line("A", "2"), calls], [line("A"), line("A", "2"), calls]]
    stable = [[line("A", rule=1), line("A", "2", rule=1), calls], [line("A", rule=1), line("A", "2", rule=1), calls]]
    prices = {"A": {"us": 10.0, "low": 9.9, "high": 10.1}, "B": {"us": 10.4, "low": 10.3, "high": 10.5}}
    found = compare.compare_picks(fastest, stable, [{"key": ["triton", "lib.k", "1"], "prices": prices}], [])
    first, second = found["decisions"]
    assert first["priced"] and first["bands"] == {"fastest": [], "stable": [0.012, 0.012]}
    assert first["candidates"] == {"fastest": [], "stable": ["A", "B"]}
    fastest_mean, stable_mean = (10.4 + 10.0) / 2, 10.0  # each run's pick counted
    assert first["ratio"] == pytest.approx(stable_mean / fastest_mean)
    assert first["us"] == pytest.approx({"fastest": fastest_mean, "stable": stable_mean})
    assert first["noise"] == pytest.approx(max(0.2 / 10.0, 0.2 / 10.4))
    assert not second["priced"]  # every run picked alike: nothing to price
    assert found["total"]["ratio"] == pytest.approx(stable_mean / fastest_mean) and found["total"]["counted"] == 1
    assert found["agreement"]["fastest"]["agree"] == 1 and found["agreement"]["stable"]["agree"] == 2
    assert found["agreement"]["fastest"]["agree_by_price"] == 1  # B is 4% slower: beyond the noise


def test_the_pick_report_says_each_rules_picks_its_price_and_the_wall_time():
    from cleanflush._ab import compare, report

    def line(winner, key, rule=False):
        found = {"kind": "triton", "op": "lib.k", "key": key, "timings_ms": {"A": 1.0}, "winner": winner}
        if rule:
            found["pick"] = {"rule": "stable", "band": 0.01 if key == "1" else 0.025, "candidates": ["A", "B"]}
            found["pick"].update(fastest="A", floor=0.01)
            found["pick"]["shared_ms"] = 0.0 if key == "1" else 0.0125  # the hooks timed alone, in 2
            found["pick"]["again_s"] = 0.5 if key == "1" else 0.25  # 1.0 s a run
        return found

    calls = {"kind": "calls", "op": "lib.k", "counts": {"1": 3, "2": 1, "3": 5}}
    fastest = [
        [line("B", "1"), line("C", "2"), line("A", "3"), calls],  # 1: B then A; 2: C twice
        [line("A", "1"), line("C", "2"), line("A", "3")],
    ]
    stable = [[line("A", k, True) for k in "123"], [line("A", k, True) for k in "123"]]
    prices = {"A": {"us": 10.0, "low": 9.99, "high": 10.01}, "B": {"us": 11.0, "low": 10.99, "high": 11.01}}
    slow_a = {"A": {"us": 12.0, "low": 11.99, "high": 12.01}, "C": {"us": 10.0, "low": 9.99, "high": 10.01}}
    priced = [{"key": ["triton", "lib.k", "1"], "prices": prices}, {"key": ["triton", "lib.k", "2"], "prices": slow_a}]
    codes = [
        {"index": i, "policy": "write-read", "side": s, "code": 0, "wall_s": w}
        for i, (s, w) in enumerate([("fastest", 10.0), ("stable", 11.0), ("fastest", 12.0), ("stable", 13.0)], 1)
    ]
    picks = compare.compare_picks(fastest, stable, priced, codes)
    result = {
        "command": ["python", "job.py"],
        "policy": "write-read",
        "runs": 2,
        "run_codes": codes,
        "skipped_lines": [],
        "picks": picks,
    }
    lines = report.format_report(result).splitlines()
    assert lines[1] == (
        "  the pick rules fastest and stable, both under write-read, 2 run(s) each, interleaved, fresh caches per run"
    )
    assert lines[3] == (
        "autotuning decisions matched in both: 3 (Triton @autotune, Inductor's algorithm selection and kernel "
        "configs, their coordinate descent)"
    )
    assert lines[4] == "  fastest: 2 of 3 decisions picked alike in all 2 runs (2 within the noise by price)"
    assert lines[5] == "  stable: 3 of 3 decisions picked alike in all 2 runs (3 within the noise by price)"
    one, two = lines.index("  lib.k 1"), lines.index("  lib.k 2")
    assert lines[one + 1 : one + 5] == [
        "    fastest: B x1, A x1",
        "    stable:  A x2",
        "    stable bands 1.0%-1.0%, 2 config(s) in them",
        f"    stable / fastest {10.0 / 10.5:.4f} by price (noise 0.2%): faster",
    ]
    assert lines[two + 3 : two + 6] == [
        "    stable bands 2.5%-2.5%, 2 config(s) in them",
        "    stable: the autotuner's hooks, timed alone: 12.5-12.5 us, taken off",
        f"    stable / fastest {12.0 / 10.0:.4f} by price (noise 0.2%): slower",
    ]
    assert "  lib.k 3" not in lines  # every run of both rules picked A
    total = (3 * 10.0 + 1 * 12.0) / (3 * 10.5 + 1 * 10.0)
    assert f"job, over the 2 priced decision(s) whose calls were counted: stable / fastest {total:.4f}" in lines[-3]
    assert lines[-2:] == [
        "wall time a run, median: fastest 11.0 s, stable 12.0 s (+9.1%, within the runs of one rule's spread of 20.0%)",
        "  of a stable run, the rule's own timing (configs again, hooks alone), median: 1.0 s",
    ]
    # lines from before the rule's time was recorded: no such line
    for run in stable:
        for d in run:
            del d["pick"]["again_s"]
    assert "the rule's own timing" not in report.format_report(
        {**result, "picks": compare.compare_picks(fastest, stable, priced, codes)}
    )


# ---- Inductor's algorithm selection, for real, on CPU -------------------------------------

# A frozen Linear under max-autotune on CPU: Inductor chooses between its C++ GEMM template
# and the MKL call.  The timer is the job's own (AlgorithmSelectorCache.benchmark: every
# choice priced at a fixed time, MKL 0.4% faster), so which choice is kept is decided by
# the rule alone: Inductor's own min() keeps MKL, the stable rule the first in Inductor's order.
INDUCTOR_JOB = """
import json, os, torch, cleanflush
import torch._inductor.config as config
import torch._inductor.select_algorithm as select
config.freezing = True
config.max_autotune_gemm_backends = "CPP,ATEN"
calls = []

def benchmark(self, choices, *args, **kwargs):
    calls.append(len(choices))
    if os.environ.get("FAIL_AGAIN") and len(calls) > 1:
        raise RuntimeError("fails when timed again")
    return {c: 0.1 if type(c).__name__ == "ExternKernelCaller" else 0.1004 for c in choices}

select.AlgorithmSelectorCache.benchmark = benchmark
layer = torch.nn.Linear(256, 128).eval()
x = torch.randn(32, 256)
for rule in os.environ.get("RULES", "fastest stable").split():
    torch._dynamo.reset()
    with torch.no_grad(), cleanflush.pick(rule):
        out = torch.compile(layer, mode="max-autotune-no-cudagraphs")(x)
    torch.testing.assert_close(out, layer(x))
    print(json.dumps({"rule": rule, "benchmark_calls": calls}))
    calls.clear()
"""


def test_inductors_algorithm_selection_keeps_the_first_choice_in_its_order_within_the_band(tmp_path):
    pytest.importorskip("torch._inductor")
    decisions = tmp_path / "decisions.jsonl"
    env = {"CLEANFLUSH": "1", "CLEANFLUSH_DECISIONS": str(decisions), "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    child = run_python(INDUCTOR_JOB, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    calls = [json.loads(line) for line in child.stdout.splitlines() if line.startswith("{")]
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    fastest, stable = [d for d in lines if d["kind"] == "inductor"]
    if len(fastest["timings_ms"]) < 2:
        pytest.skip("Inductor offered one choice on this CPU (no C++ GEMM template for its ISA)")
    first = next(iter(stable["timings_ms"]))  # Inductor's own order
    assert fastest["rule"] == "fastest" and "pick" not in fastest  # the negative control: MKL, the fastest
    assert fastest["winner"].startswith("_mkl_linear") and first != fastest["winner"]
    assert stable["rule"] == "stable" and stable["winner"] == first
    assert stable["pick"]["fastest"] == fastest["winner"] and stable["pick"]["candidates"] == [first, fastest["winner"]]
    assert stable["pick"]["band"] == 0.01 and set(stable["pick"]["timed_again"]) == {first, fastest["winner"]}
    # the sweep, then each choice alone in two rounds; under fastest, the sweep alone
    assert [c["benchmark_calls"] for c in calls] == [[2], [2, 1, 1, 1, 1]]


def test_a_choice_that_fails_when_timed_again_keeps_inductors_pick_said_once(tmp_path):
    pytest.importorskip("torch._inductor")
    decisions = tmp_path / "decisions.jsonl"
    env = {"CLEANFLUSH": "1", "CLEANFLUSH_DECISIONS": str(decisions), "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
    env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), RULES="stable", FAIL_AGAIN="1")
    child = run_python(INDUCTOR_JOB, env=env)
    assert child.returncode == 0, child.stderr[-3000:]
    [d] = [json.loads(line) for line in decisions.read_text().splitlines() if '"inductor"' in line]
    if len(d["timings_ms"]) < 2:
        pytest.skip("Inductor offered one choice on this CPU (no C++ GEMM template for its ISA)")
    assert d["winner"].startswith("_mkl_linear") and "pick" not in d  # Inductor's own pick
    said = [line for line in child.stderr.splitlines() if "kept the autotuner's own pick" in line]
    assert len(said) == 1 and "fails when timed again" in said[0]


def test_uninstall_gives_inductors_autotune_back_and_fastest_returns_its_timings_as_they_are():
    select = pytest.importorskip("torch._inductor.select_algorithm")
    from cleanflush import _inductor_pick

    cleanflush.uninstall()
    own = vars(select.AlgorithmSelectorCache)["autotune"]
    cleanflush.install()
    assert vars(select.AlgorithmSelectorCache)["autotune"] is not own  # wrapped
    timings = {"a": 1.0, "b": 1.001}
    returned = _inductor_pick._autotune(lambda *a, **k: timings, None, (), {})
    assert returned is timings  # fastest: nothing timed again, nothing changed
    cleanflush.uninstall()
    assert vars(select.AlgorithmSelectorCache)["autotune"] is own


def test_inductors_window_is_timed_again_with_the_sweeps_own_inputs_and_hint():
    select = pytest.importorskip("torch._inductor.select_algorithm")
    from cleanflush import _inductor_pick

    def autotune(self, name, input_nodes, layout, input_gen_fns, choices, hint_override=None, is_collective=False,
                 precompile_key=None):  # fmt: skip
        return {"a": 1.004, "b": 1.0, "c": 1.5}  # Inductor's sweep: b fastest, a first within the band

    # the stand-in takes what the installed Inductor's autotune takes, by name
    real = list(inspect.signature(select.AlgorithmSelectorCache.autotune).parameters)
    assert list(inspect.signature(autotune).parameters) == real

    class Selector:
        calls = []

        def benchmark(self, choices, input_nodes, layout, input_gen_fns, hint_override=None):
            self.calls.append((choices, input_nodes, layout, input_gen_fns, hint_override))
            return {c: {"a": 1.004, "b": 1.0}[c] for c in choices}

    me = Selector()
    nodes, layout, gens = object(), object(), object()
    wrapped = autotune.__get__(me)
    kwargs = {"input_gen_fns": gens, "choices": ["a", "b", "c"], "hint_override": 7}
    with cleanflush.pick("stable"):
        kept = _inductor_pick._autotune(wrapped, me, ("mm", nodes, layout), kwargs)
        assert kept["a"] < kept["b"] == 1.0 and kept["c"] == 1.5  # a kept: the first in order within the band
        assert _inductor_pick.picked_in(kept).winner == "a" and _inductor_pick.picked_in(dict(kept)) is None
        assert me.calls == [([c], nodes, layout, gens, 7) for c in ("b", "a", "a", "b")]
        me.calls.clear()
        together = _inductor_pick._autotune(wrapped, me, ("mm", nodes, layout), {**kwargs, "is_collective": True})
        assert together == {"a": 1.004, "b": 1.0, "c": 1.5} and me.calls == []  # every rank times together: Inductor's
        Selector.benchmark = lambda self, choices, *rest, **kw: {}  # a choice with no time again: Inductor's, said once
        with pytest.warns(RuntimeWarning, match="kept the autotuner's own pick: .*failed when timed again"):
            assert _inductor_pick._autotune(wrapped, me, ("mm2", nodes, layout), kwargs)["a"] == 1.004


# ---- Inductor's generated kernels' configs: the real CachingAutotuner's own loop --------


class StaticKernel:
    """What a static launcher's runner is bound to: ``_close_static_launcher`` closes it."""

    def __init__(self):
        self.closed = 0

    def run(self, *args):
        pass

    def close(self):
        self.closed += 1


class StaticLauncher:
    """A launcher as torch 2.13's ``_close_static_launcher`` and ``autotune_to_one_config``
    read one (triton_heuristics.py: ``_is_static``, ``__globals__["runner"].__self__``)."""

    def __init__(self, xblock):
        triton = pytest.importorskip("triton")
        self.xblock, self.config = xblock, triton.Config({"XBLOCK": xblock}, num_warps=4, num_stages=1)
        self._is_static, self.cache_hash = True, None
        self.kernel = StaticKernel()
        self.__globals__ = {"runner": self.kernel.run}
        self.n_regs = self.n_spills = self.shared = 0


def kernel_tuner(sweep, again):
    """A real ``CachingAutotuner``, made without compiling anything: its own
    ``benchmark_all_configs`` and ``autotune_to_one_config`` run, and ``bench`` (the GPU timer)
    times each launcher from ``sweep`` (XBLOCK -> ms) once, then from ``again``.  A closed
    launcher cannot be timed."""
    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner

    tuner = object.__new__(heuristics.CachingAutotuner)
    launchers = {x: StaticLauncher(x) for x in sweep}
    tuner.__dict__.update(
        launchers=list(launchers.values()),
        inductor_meta={"kernel_name": "triton_red_fused_mv_0"},
        size_hints={"x": 4096, "r0_": 4096},
        compile_id=None,
        is_backward=False,
        coordesc_tuner=CoordescTuner(),
        reset_to_zero_arg_names=[],
        benchmark_failure_reasons={},
        compile_results=[],
        precompile_time_taken_ns=0,
        save_cache_hook=None,
        fn=types.SimpleNamespace(__name__="triton_red_fused_mv_0"),
    )
    timed = []

    def bench(launcher, *args, **kwargs):
        if launcher.kernel.closed:
            raise RuntimeError(f"XBLOCK {launcher.xblock} was closed")
        times = again if launcher.xblock in {x for x, _ in timed} else sweep
        timed.append((launcher.xblock, args))
        return times[launcher.xblock]

    tuner.bench = bench
    return tuner, launchers, timed


@pytest.mark.parametrize("rule", ["fastest", "stable"])
def test_inductors_kernel_configs_keep_the_first_in_order_within_the_band_and_close_the_rest(rule):
    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    assert type(vars(heuristics.CachingAutotuner)["benchmark_all_configs"]).__name__ == "FunctionWrapper"
    sweep = {1: 1.004, 8: 1.0, 64: 1.5}  # XBLOCK 8 fastest, 1 first within the band
    tuner, launchers, timed = kernel_tuner(sweep, {1: 1.003, 8: 1.0})
    with cleanflush.pick(rule):
        tuner.autotune_to_one_config("in", "out")
    kept = 1 if rule == "stable" else 8  # fastest: the negative control
    assert tuner.launchers == [launchers[kept]]
    assert launchers[kept].kernel.closed == 0 and all(one.kernel.closed for x, one in launchers.items() if x != kept)
    assert [x for x, _ in timed[3:]] == ([] if rule == "fastest" else [8, 1, 1, 8])  # the rule's rounds
    assert {args for _, args in timed} == {("in", "out")}  # timed again with the call's own arguments


def test_a_clear_winner_among_inductors_kernel_configs_is_kept_and_nothing_is_timed_again():
    tuner, launchers, timed = kernel_tuner({1: 1.05, 8: 1.0}, {})
    with cleanflush.pick("stable"):
        tuner.autotune_to_one_config()
    assert tuner.launchers == [launchers[8]] and len(timed) == 2


def test_a_kernel_config_that_fails_when_timed_again_keeps_inductors_pick_said_once():
    tuner, launchers, _ = kernel_tuner({1: 1.004, 8: 1.0}, {1: math.inf, 8: 1.0})
    with cleanflush.pick("stable"), pytest.warns(RuntimeWarning, match="triton_red_fused_mv_0 kept the autotuner's"):
        tuner.autotune_to_one_config()
    assert tuner.launchers == [launchers[8]] and launchers[1].kernel.closed


def test_a_kernel_decision_line_carries_what_the_stable_rule_kept(tmp_path, monkeypatch):
    from cleanflush import _decisions

    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    monkeypatch.setenv("CLEANFLUSH_DECISIONS", str(tmp_path / "decisions.jsonl"))
    cleanflush.uninstall()
    cleanflush.install()  # both go on afresh, Inductor loaded: the recorder outside the rule's wrapper
    tuner, launchers, _ = kernel_tuner({1: 1.004, 8: 1.0}, {1: 1.003, 8: 1.0})
    with cleanflush.pick("stable"):
        tuner.autotune_to_one_config()
    [line] = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    first, fastest = str(launchers[1].config), str(launchers[8].config)
    assert line["winner"] == first and line["timings_ms"][fastest] == 1.0
    assert line["pick"]["fastest"] == fastest and line["pick"]["candidates"] == [first, fastest]
    cleanflush.uninstall()
    assert not list(_decisions._patching.patch_set(_decisions.NAME))
    for name in ("benchmark_all_configs", "_close_static_launcher", "coordinate_descent_tuning"):
        stock = vars(heuristics.CachingAutotuner).get(name)  # torch 2.11 has no _close_static_launcher
        assert stock is None or type(stock).__name__ in ("function", "staticmethod"), name


def descent(timings, rule):
    """Inductor's own coordinate descent (``CoordescTuner.autotune``) from XBLOCK 64, 4 warps,
    over ``timings`` (XBLOCK -> ms; every other config 2 ms): the XBLOCK it keeps."""
    tuner_module = pytest.importorskip("torch._inductor.runtime.coordinate_descent_tuner")
    triton = pytest.importorskip("triton")
    tuner = tuner_module.CoordescTuner(name="triton_poi_0", size_hints={"x": 4096}, inductor_meta={})

    def time(config):
        return timings.get(config.kwargs["XBLOCK"], 2.0) if config.num_warps == 4 else 2.0

    with cleanflush.pick(rule):
        return tuner.autotune(time, triton.Config({"XBLOCK": 64}, num_warps=4, num_stages=1)).kwargs["XBLOCK"]


def test_coordinate_descent_steps_only_beyond_the_floor_under_stable():
    near = {64: 1.0, 128: 0.995}  # 0.5% faster: a step under fastest (its own 0.1%), none under stable
    assert descent(near, "fastest") == 128 and descent(near, "stable") == 64
    far = {64: 1.0, 128: 0.98}  # 2% faster: a step under either
    assert descent(far, "fastest") == 128 == descent(far, "stable")


def test_coordinate_descent_steps_only_beyond_the_timers_resolution_under_stable(monkeypatch):
    tick = _pick.TICK_MS
    two = {64: 111 * tick, 128: 109 * tick}  # single readings of 3.5 us, two ticks (1.8%) faster
    assert descent(two, "fastest") == 128 and descent(two, "stable") == 64
    four = {64: 111 * tick, 128: 107 * tick}  # four ticks faster (3.6%): a step under either
    assert descent(four, "fastest") == 128 == descent(four, "stable")
    averaged = {64: 111.3 * tick, 128: 109.3 * tick}  # off the step (means of readings): the floor alone
    assert descent(averaged, "stable") == 128
    monkeypatch.setattr(_pick, "TICKS_ALIKE", 0.0)  # the control: the floor alone steps two ticks
    assert descent(two, "stable") == 128


def test_coordinate_descent_in_a_layout_the_rule_does_not_know_keeps_its_tuners_answer():
    """``has_improvement(baseline, test)`` (torch 2.13's, a staticmethod) is the layout the floor
    is applied to; a call of any other layout (an argument more, by position or by name, as a
    later torch could add) keeps the tuner's own answer (#70's sample, seed 20261208)."""
    from cleanflush import _inductor_pick

    def stock(baseline, test, threshold=0.001):  # a layout with a threshold of its own
        return test < baseline * (1 - threshold)

    with cleanflush.pick("stable"):
        assert _inductor_pick._has_improvement(stock, None, (1.0, 0.995), {}) is False  # the control: the floor
        assert _inductor_pick._has_improvement(stock, None, (1.0, 0.995, 0.001), {}) is True
        assert _inductor_pick._has_improvement(stock, None, (1.0, 0.995), {"threshold": 0.001}) is True


def test_coordinate_descents_own_pick_is_recorded_named_as_its_tuner_names_configs(tmp_path, monkeypatch):
    from cleanflush import _decisions

    monkeypatch.setenv("CLEANFLUSH_DECISIONS", str(tmp_path / "decisions.jsonl"))
    tuner, launchers, _ = kernel_tuner({1: 1.0, 8: 1.0}, {})
    tuner.coordesc_tuner.cache_benchmark_result(launchers[1].config, 1.0)
    tuner.coordesc_tuner.cache_benchmark_result(launchers[8].config, 0.9)
    launchers[8].config.found_by_coordesc = True
    for walked_to in (launchers[1], launchers[8]):  # not tuned (nothing found by it): no line
        walk = lambda launcher, to=walked_to: to  # noqa: E731
        assert _decisions._coordinate_descent(walk, tuner, (launchers[1],), {}) is walked_to
    [line] = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    eight = "XBLOCK: 8, num_warps: 4, num_stages: 1"
    assert {k: v for k, v in line.items() if k not in ("pid", "policy", "rule")} == {
        "kind": "inductor-coordesc",
        "op": "triton_red_fused_mv_0",
        "key": "{'x': 4096, 'r0_': 4096}",
        "timings_ms": {"XBLOCK: 1, num_warps: 4, num_stages: 1": 1.0, eight: 0.9},
        "winner": eight,
    }


def test_a_sweep_that_fails_under_stable_still_closes_what_inductor_closed_on_the_way():
    tuner, launchers, _ = kernel_tuner({1: 1.0, 8: 1.5, 64: math.nan}, {})
    stock_bench = tuner.bench

    def bench(launcher, *args, **kwargs):  # the last launcher's launch fails: Inductor raises
        if launcher.xblock == 64:
            raise RuntimeError("launch failed")
        return stock_bench(launcher, *args, **kwargs)

    tuner.bench = bench
    with cleanflush.pick("stable"), pytest.raises(RuntimeError, match="launch failed"):
        tuner.autotune_to_one_config()
    assert launchers[8].kernel.closed == 1 and launchers[1].kernel.closed == 0  # as Inductor's own loop leaves them


def test_a_launcher_closed_by_keyword_outside_a_sweep_is_closed_as_inductor_closes_it():
    """Outside ``benchmark_all_configs`` the wrapped ``_close_static_launcher`` is Inductor's own,
    its launcher passed by position or by name."""
    heuristics = pytest.importorskip("torch._inductor.runtime.triton_heuristics")
    assert type(vars(heuristics.CachingAutotuner)["_close_static_launcher"]).__name__ == "FunctionWrapper"
    close = heuristics.CachingAutotuner._close_static_launcher
    [name] = inspect.signature(close).parameters  # the launcher's parameter, as the installed torch names it
    by_place, by_name = StaticLauncher(1), StaticLauncher(8)
    close(by_place)
    close(**{name: by_name})
    assert by_place.kernel.closed == by_name.kernel.closed == 1


# ---- the rule's edges (#70): keys after a failed sweep, a second key, one config, a third rule ----

KEYS_JOB = """
import json, os, random
import torch, triton, triton.language as tl

rng = random.Random(0)
# per key, each BLOCK's time: under 256, 64 the fastest; under 512 and 1024, 32 the fastest and 16
# first in order within the band (the stable pick); the pruner keeps 64 from 512 and all but 16 from 1024
BASE = {256: {64: 0.9, 16: 1.004, 32: 1.0}, 512: {64: 0.9, 16: 1.004, 32: 1.0}, 1024: {64: 0.9, 16: 1.004, 32: 1.0}}
timed, block, now = [], [], {}

def bench(kernel_call, quantiles=None, **kw):
    kernel_call()
    timed.append((now["n"], block[-1]))
    if os.environ.get("RAISE") == str(now["n"]) and len([t for t in timed if t[0] == now["n"]]) == 2:
        raise RuntimeError("the sweep fails")
    t = BASE[now["n"]][block[-1]] * (1 + rng.uniform(-0.0001, 0.0001))
    return [t, t, t]

def pre(nargs):
    block.append(nargs["BLOCK"])

def prune(configs, named_args, **kwargs):
    n = named_args["n"]
    keep = {512: (16, 32), 1024: (16,)}.get(n, (64, 16, 32))
    return [c for c in configs if c.kwargs["BLOCK"] in keep]

@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=pre) for b in (64, 16, 32)], key=["n"], do_bench=bench,
                 restore_value=["x_ptr"], prune_configs_by={"early_config_prune": prune})
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=m) + 1, mask=m)

picks = {}
for n in (256, 512, 1024):
    now["n"] = n
    x = torch.zeros(n)
    try:
        add_one[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
        picks[n] = add_one.best_config.kwargs["BLOCK"]
    except RuntimeError:  # the job catches a failed sweep and goes on
        picks[n] = "raised"
copied = add_one.cache.copy()
print(json.dumps({"picks": picks, "timed": timed, "copy": type(copied).__name__, "copied": len(copied),
                  "merged": len(add_one.cache | {}), "repr": repr(add_one.cache).startswith("{")}))
"""


@needs_autotune_do_bench
def test_a_second_key_after_a_stable_re_timing_is_under_the_rule_too(tmp_path):
    found, _ = interpreted(tmp_path, "keys_job.py", KEYS_JOB, CLEANFLUSH="1", CLEANFLUSH_PICK="stable")
    assert found["picks"] == {"256": 64, "512": 16, "1024": 16}  # 512: the stable pick, not its fastest (32)
    fastest, _ = interpreted(tmp_path, "keys_job.py", KEYS_JOB, CLEANFLUSH="1", CLEANFLUSH_PICK="fastest")
    assert fastest["picks"]["512"] == 32  # the negative control


@needs_autotune_do_bench
def test_a_stable_re_timing_leaves_no_sweep_holding_its_calls_tensors(tmp_path):
    job = KEYS_JOB.replace("for n in (256, 512, 1024):", "from cleanflush import _autotuner\nfor n in (256, 512):")
    job = job.replace('"repr":', '"left": [len(s.timed) for s in _autotuner.SWEEPS.values()], "repr":')
    assert "_autotuner.SWEEPS" in job and "(256, 512)" in job  # every replace took
    found, _ = interpreted(tmp_path, "keys_job.py", job, CLEANFLUSH="1", CLEANFLUSH_PICK="stable")
    assert found["picks"] == {"256": 64, "512": 16}  # 512 timed 16 and 32 again
    assert found["left"] == []


@needs_autotune_do_bench
def test_a_sweep_that_raised_leaves_nothing_for_the_next_keys_decision(tmp_path):
    found, _ = interpreted(tmp_path, "keys_job.py", KEYS_JOB, CLEANFLUSH="1", CLEANFLUSH_PICK="stable", RAISE="256")
    assert found["picks"] == {"256": "raised", "512": 16, "1024": 16}
    assert [b for n, b in found["timed"] if n == 512 and b == 64] == []  # the pruner's exclusion holds
    assert [b for n, b in found["timed"] if n == 256] == [64, 16]  # the failed sweep timed 64, then raised


@needs_autotune_do_bench
def test_a_one_config_decision_gets_no_stable_record_and_the_cache_keeps_dict_methods(tmp_path):
    decisions = tmp_path / "d.jsonl"
    found, _ = interpreted(
        tmp_path, "keys_job.py", KEYS_JOB, CLEANFLUSH="1", CLEANFLUSH_PICK="stable", CLEANFLUSH_DECISIONS=str(decisions)
    )
    lines = {
        json.loads(line)["key"]: json.loads(line) for line in decisions.read_text().splitlines() if '"key"' in line
    }
    one = next((d for key, d in lines.items() if key.startswith("(1024")), None)
    # one config: nothing to choose among (triton 3.9 on does not even time it: no decision)
    assert one is None or (len(one["timings_ms"]) == 1 and "pick" not in one)
    assert found["picks"]["1024"] == 16
    assert "pick" in next(d for key, d in lines.items() if key.startswith("(512"))
    assert found["copy"] == "dict" and found["copied"] == found["merged"] == 3 and found["repr"]


def test_an_autotuner_whose_cache_is_no_dict_keeps_its_pick_said_once():
    class Own(dict):
        pass

    tuner = types.SimpleNamespace(cache=Own(), base_fn=types.SimpleNamespace(__module__="lib", __name__="k"))
    with pytest.warns(RuntimeWarning, match="lib.k keeps its picks in a Own, not a dict: the stable pick rule"):
        assert _tunercache.cache_of(tuner, needed_by="the stable pick rule") is None
    assert _tunercache.cache_of(tuner, needed_by="the stable pick rule") is None  # said once
    assert _tunercache.cache_of(tuner) is None and type(tuner.cache) is Own  # left alone


def test_current_pick_is_the_autotuners_own_while_cleanflush_is_not_installed():
    with cleanflush.pick("stable"):
        assert cleanflush.current_pick() == "stable"
        cleanflush.uninstall()
        assert cleanflush.current_pick() == "fastest" and cleanflush.current_policy() == "write"
    out = run_python(
        "import cleanflush; print(cleanflush.current_pick(), cleanflush.is_installed())",
        env={"CLEANFLUSH": "0", "CLEANFLUSH_PICK": "stable"},
    )
    assert out.stdout.split() == ["fastest", "False"], out.stderr


def test_inductors_rule_keeps_inductors_timings_where_its_call_does_not_bind():
    from cleanflush import _inductor_pick

    def autotune(*args, **kwargs):  # takes the call, but says it takes another: no arguments to read
        return {"a": 1.004, "b": 1.0}

    autotune.__signature__ = inspect.Signature([inspect.Parameter("name", inspect.Parameter.POSITIONAL_ONLY)])
    with cleanflush.pick("stable"):
        found = _inductor_pick._autotune(autotune, object(), ("mm",), {"choices": ["a", "b"]})
    assert found == {"a": 1.004, "b": 1.0}


def test_inductors_algorithm_selection_is_wrapped_only_where_its_autotune_takes_what_the_rule_needs(monkeypatch):
    from cleanflush import _inductor_pick, _patching

    class Selector:
        def autotune(self, name, input_nodes, layout):  # no input_gen_fns, no choices
            return {}

        def benchmark(self, choices, input_nodes, layout, input_gen_fns):
            return {}

    module = types.ModuleType("select")
    module.AlgorithmSelectorCache = Selector
    monkeypatch.setitem(sys.modules, _inductor_pick.SELECT, module)
    own = vars(Selector)["autotune"]
    _inductor_pick.apply()
    assert vars(Selector)["autotune"] is own  # left alone: its own pick
    Selector.benchmark = lambda self, layout: {}  # and where benchmark takes no choices, likewise
    Selector.autotune = lambda self, name, input_nodes, layout, input_gen_fns, choices: {}
    own = vars(Selector)["autotune"]
    _inductor_pick.apply()
    assert vars(Selector)["autotune"] is own
    _patching.patch_set(_inductor_pick.NAME).revert()


def test_inductors_kernel_configs_are_zeroed_again_after_the_stable_re_timing():
    tuner, launchers, timed = kernel_tuner({1: 1.004, 8: 1.0}, {1: 1.003, 8: 1.0})
    zeroed = []
    tuner.reset_to_zero_args = lambda *args, **kwargs: zeroed.append(len(timed))
    with cleanflush.pick("stable"):
        tuner.autotune_to_one_config("in", "out")
    assert tuner.launchers == [launchers[1]] and len(timed) == 6
    assert zeroed and zeroed[-1] == 6  # after the last timing again: the call that follows sees zeros


def test_a_triton_error_when_a_kernel_config_is_timed_again_keeps_inductors_pick_said_once():
    errors = pytest.importorskip("triton.runtime.errors")
    tuner, launchers, _ = kernel_tuner({1: 1.004, 8: 1.0}, {8: 1.0})
    real = tuner.bench

    def bench(launcher, *args, **kwargs):
        if launcher.xblock == 1 and launcher.kernel.closed == 0 and getattr(bench, "swept", False):
            raise errors.OutOfResources(1 << 20, 1 << 16, "shared memory")
        bench.swept = launcher.xblock == 8 or getattr(bench, "swept", False)
        return real(launcher, *args, **kwargs)

    tuner.bench = bench
    with cleanflush.pick("stable"), pytest.warns(RuntimeWarning, match="OutOfResources"):
        tuner.autotune_to_one_config()
    assert tuner.launchers == [launchers[8]]


def first_within(order, timings, time_again, floor, shared=None):
    """A third rule, for the test: the first config in order within twice the floor of the
    sweep's fastest, with nothing timed again."""
    swept = _pick.ran_only(timings)
    fastest = min(swept, key=swept.__getitem__)
    near = [c for c in order if c in swept and swept[c] <= swept[fastest] * (1 + 2 * floor)]
    return _pick.Picked("first-within", near, fastest, 2 * floor, floor)


@pytest.fixture
def third_rule(monkeypatch):
    rule = _pick.Rule("first-within", first_within, times_again=False, descends_beyond_floor=False,
                      summary="autotuners keep the first config in order within twice the floor")  # fmt: skip
    monkeypatch.setitem(_pick.RULES, rule.name, rule)
    monkeypatch.setattr(_pick.PICK, "names", tuple(_pick.RULES))
    return rule


def test_a_third_rule_is_one_record_the_hooks_apply_without_naming_it(third_rule):
    tuner, launchers, timed = kernel_tuner({1: 1.015, 8: 1.0, 64: 1.5}, {})
    with cleanflush.pick("first-within"):
        assert cleanflush.current_pick() == "first-within" and _pick.current_rule() is third_rule
        tuner.autotune_to_one_config()
    assert tuner.launchers == [launchers[1]] and len(timed) == 3  # 1.5% inside 2%: kept, nothing timed again


def test_a_third_rule_reaches_status_and_ab(third_rule, monkeypatch):
    from cleanflush.cli import ab as ab_cli

    assert ab_cli.rules_pair("stable, first-within") == ("stable", "first-within")
    for bad, said in [
        ("stable", "expected two pick rules, comma-separated (valid: fastest, stable, first-within)"),
        ("stable,stable", "stable twice: ab compares two different pick rules"),
        ("stable,fast", "unknown cleanflush pick rule 'fast'; valid pick rules: fastest, stable, first-within"),
    ]:
        with pytest.raises(Exception, match=re.escape(said)):
            ab_cli.rules_pair(bad)
    from cleanflush._ab import compare, report

    def line(winner, rule):
        found = {"kind": "triton", "op": "lib.k", "key": "1", "timings_ms": {"A": 1.0}, "winner": winner}
        found["pick"] = {"rule": rule, "candidates": [winner], "fastest": "A", "band": 0.02, "floor": 0.01}
        return found

    picks = compare.compare_picks(
        [[line("A", "stable")]], [[line("B", "first-within")]], [], [], ("stable", "first-within")
    )
    assert picks["decisions"][0]["winners"] == {"stable": ["A"], "first-within": ["B"]}
    text = report.format_report(
        {"command": ["job"], "policy": "write-read", "runs": 1, "run_codes": [], "skipped_lines": [], "picks": picks}
    )
    assert "the pick rules stable and first-within" in text and "    first-within: B x1" in text


def test_ab_compare_pick_refuses_an_invalid_floor_before_the_first_run(tmp_path):
    env = {**environ_without_cleanflush(), "CLEANFLUSH_PICK_FLOOR": "150"}
    out = subprocess.run([*AB_PICK, "--", "true"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "CLEANFLUSH_PICK_FLOOR='150' is not a percentage from 0 to 100" in out.stderr
    assert "run 1 of" not in out.stderr  # refused before the first run
    out = subprocess.run([*AB_PICK[:-2], "--rules", "fastest,stable", "--", "true"], env=env, capture_output=True,
                         text=True, timeout=60)  # fmt: skip
    assert out.returncode == 2 and "--rules names the pick rules --compare pick sets against each other" in out.stderr


def test_inductors_kernel_configs_take_a_pick_agreed_elsewhere_and_tune_nothing(monkeypatch):
    from cleanflush import _agree, _inductor_pick

    torch_distributed = pytest.importorskip("torch.distributed")
    tuner, launchers, timed = kernel_tuner({1: 1.004, 8: 1.0, 64: 1.5}, {})
    cleanflush.pick_store(torch_distributed.HashStore())
    monkeypatch.setenv("CLEANFLUSH_PICK_STORE", "on")
    decision = _inductor_pick.kernel_decision(tuner, list(launchers.values()))
    assert _agree.publish(decision, str(launchers[64].config), 0.5, chooses=False) is None  # another rank's, first
    tuner.autotune_to_one_config("in", "out")
    assert tuner.launchers == [launchers[64]] and timed == []  # taken: nothing tuned here
    assert launchers[64].kernel.closed == 0 and launchers[1].kernel.closed and launchers[8].kernel.closed
    # the negative control: nothing published for another kernel's configs, which this rank tunes and publishes
    other, others, timed = kernel_tuner({2: 1.0, 4: 1.2}, {})
    other.autotune_to_one_config("in", "out")
    assert other.launchers == [others[2]] and len(timed) == 2
    again = _inductor_pick.kernel_decision(other, list(others.values()))
    assert _agree.published(again, chooses=False).pick == str(others[2].config)


def test_inductors_algorithm_selection_takes_the_choice_another_rank_published(monkeypatch):
    from cleanflush import _agree, _inductor_pick, _labels

    torch_distributed = pytest.importorskip("torch.distributed")
    cleanflush.pick_store(torch_distributed.HashStore())
    monkeypatch.setenv("CLEANFLUSH_PICK_STORE", "on")

    class Choice:
        def __init__(self, name):
            self.name, self.description = name, ""

    a, b = Choice("triton_mm_1"), Choice("extern_mm")

    def autotune(self, name, input_nodes, layout, input_gen_fns, choices, hint_override=None, is_collective=False,
                 precompile_key=None):  # fmt: skip
        return {a: 1.0, b: 1.1}  # this rank's own: a

    decision = _agree.Decision("inductor", "mm", _labels.shapes_key([]), ("triton_mm", "extern_mm"))
    _agree.publish(decision, "extern_mm", 1.05, chooses=False)  # another rank published b first
    kept = _inductor_pick._autotune(autotune.__get__(object()), object(), ("mm", [], None, None, [a, b]), {})
    assert min(kept, key=kept.get) is b and _inductor_pick.agreed_in(kept) == "another rank"


# ---- what the mutation sample of 2026-12-07 found no test pinned (#70, seed 20261207) ----


def test_a_config_alone_in_the_window_carries_the_timers_resolution():
    tick = _pick.TICK_MS
    alone = _pick.stable(["a", "b"], {"a": 100 * tick, "b": 200 * tick}, never, 0.01)  # single readings, a alone
    assert alone.candidates == ["a"] and alone.noise is None and alone.timed_again == {}
    assert alone.resolution == pytest.approx(0.025) == alone.band  # 2.5 ticks of 100: wider than the 1% floor
    assert alone.line()["resolution"] == pytest.approx(0.025)
    averaged = _pick.stable(["a", "b"], {"a": 100.3 * tick, "b": 200 * tick}, never, 0.01)  # off the step
    assert averaged.resolution == 0.0 and averaged.band == 0.01  # the control: the floor alone


VALID_PICK = {"rule": "stable", "candidates": ["A"], "fastest": "B", "band": 0.02, "floor": 0.01}


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"rule": 1}, "pick: rule or fastest is not a string"),
        ({"candidates": []}, "pick: candidates is not a list of config names"),
        ({"candidates": "A"}, "pick: candidates is not a list of config names"),
        ({"band": "0.02"}, "pick: band, floor, shared_ms, again_s or resolution is not a number"),
        ({"resolution": math.inf}, "pick: band, floor, shared_ms, again_s or resolution is not a number"),
        ({"noise": "high"}, "pick: noise is not a number"),
        ({"too_noisy": 1}, "pick: too_noisy is not true or false"),
        ({"timed_again": {"A": "1.0"}}, "pick: timed_again is not a mapping of config names to numbers"),
        ({"timed_again": [1.0]}, "pick: timed_again is not a mapping of config names to numbers"),
        ({"rounds_ms": {"A": [1.0, None]}}, "pick: rounds_ms is not a mapping of config names to lists of numbers"),
        ({"floor": None}, "pick: band, floor, shared_ms, again_s or resolution is not a number"),
    ],
)
def test_a_pick_read_from_a_decision_line_says_in_one_line_what_is_wrong(changes, said):
    with pytest.raises(ValueError, match=f"^{re.escape(said)}$"):
        _pick.Picked.from_line({**VALID_PICK, **changes})
    read = _pick.Picked.from_line({**VALID_PICK, "unknown": 1})  # the control: the valid line is read
    assert read.winner == "A" and read.fastest == "B" and read.band == 0.02


@pytest.mark.parametrize(("line", "said"), [(None, "pick is not a mapping but NoneType"), ({}, "pick has no rule")])
def test_a_pick_that_is_no_record_says_so_in_one_line(line, said):
    with pytest.raises(ValueError, match=f"^{re.escape(said)}$"):
        _pick.Picked.from_line(line)


def test_inductors_kernel_configs_are_timed_with_the_calls_keyword_arguments_too():
    tuner, launchers, timed = kernel_tuner({1: 1.004, 8: 1.0}, {1: 1.003, 8: 1.0})
    seen = []
    real = tuner.bench

    def bench(launcher, *args, **kwargs):
        seen.append(kwargs)
        return real(launcher, *args, **kwargs)

    tuner.bench = bench
    with cleanflush.pick("stable"):
        tuner.autotune_to_one_config("in", out="out")
    assert tuner.launchers == [launchers[1]] and len(timed) == 6  # the sweep's two, then the rule's four
    assert seen == [{"out": "out"}] * 6  # the sweep and every timing again saw the call's keyword arguments
