"""On a CUDA GPU: the stable pick rule on a real @triton.autotune kernel, in fresh processes.
Run: pytest -m gpu -s"""

import json
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from ..conftest import environ_without_cleanflush  # noqa: E402
from .bounds import run_child  # noqa: E402

pytestmark = pytest.mark.gpu

# A memory-bound copy whose configs differ only in tile and warps: near-ties on any GPU, so
# the autotuner's own pick is decided by timing noise.
JOB = """
import json, sys, torch, triton, triton.language as tl, triton.testing
import cleanflush

@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (1024, 2048, 4096) for w in (4, 8)],
                 key=["n"])
@triton.jit
def scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.load(x_ptr + i, mask=m) * 2, mask=m)

n = 1 << 26
x = torch.randn(n, device="cuda")
y = torch.empty_like(x)
scale[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
torch.testing.assert_close(y, x * 2)
# the tuner times with Triton's own do_bench, the same object once the rule has timed again
back = scale.do_bench is triton.testing.do_bench
print(json.dumps({"pick": str(scale.best_config), "rule": cleanflush.current_pick(), "bench_back": back}))
"""


# A fresh process that imports torch and compiles and tunes one small Triton kernel: tens of
# seconds on an H100; past this, it is stuck, and its test says so with its output.
JOB_TIMEOUT_S = 120
# One that compiles under max-autotune: Inductor's templates compiled and timed, Triton's
# compile cache shared between the runs of a test (below).
COMPILE_TIMEOUT_S = 300


def _picks(rule, decisions, runs=4):
    found = []
    job = decisions.parent / "job.py"  # Triton compiles a kernel from its source file
    job.write_text(JOB)
    for _ in range(runs):
        env = {**environ_without_cleanflush(), "CLEANFLUSH": "1", "CLEANFLUSH_PICK": rule}
        env["CLEANFLUSH_DECISIONS"] = str(decisions)
        child = run_child([sys.executable, str(job)], env, timeout=JOB_TIMEOUT_S)
        found.append(json.loads(child.stdout.strip().splitlines()[-1]))
    assert {f["rule"] for f in found} == {rule} and all(f["bench_back"] for f in found)
    return [f["pick"] for f in found]


@pytest.mark.limit_s(8 * JOB_TIMEOUT_S + 60)
def test_stable_picks_one_config_in_fresh_processes_and_keeps_it_within_its_band(tmp_path):
    fastest = _picks("fastest", tmp_path / "fastest.jsonl")
    stable = _picks("stable", tmp_path / "stable.jsonl")
    print(f"\nfastest picks: {fastest}\nstable picks:  {stable}")
    assert len(set(stable)) == 1, stable
    lines = [json.loads(line) for line in (tmp_path / "stable.jsonl").read_text().splitlines()]
    lines = [d for d in lines if d["kind"] == "triton"]
    assert len(lines) == 4 and all(d["rule"] == "stable" and "pick" in d for d in lines)
    for d in lines:
        rule = d["pick"]
        again = rule["timed_again"]
        assert d["winner"] in rule["candidates"] and rule["band"] >= rule["floor"]
        if rule["too_noisy"]:  # the autotuner's own pick, kept
            assert d["winner"] == rule["fastest"]
        elif again:  # the pick lies within the band of the fastest config timed again
            assert again[d["winner"]] <= min(again.values()) * (1 + rule["band"]) + 1e-12
        print(f"band {rule['band']:.2%} noise {rule['noise']} candidates {len(rule['candidates'])}", end=" ")
        print(f"the rule's own timing {rule['again_s']:.3f} s")
    fastest_lines = [json.loads(line) for line in (tmp_path / "fastest.jsonl").read_text().splitlines()]
    assert all("pick" not in d for d in fastest_lines)  # the autotuner's own rule records no band


# A decode step's one-row linear and its activation under max-autotune: on torch 2.11 the
# one-row GEMM lowers to a generated reduction, whose configs CachingAutotuner times and
# coordinate descent walks on from.
INDUCTOR_JOB = """
import json, torch, torch.nn.functional as F
import cleanflush

torch.manual_seed(0)
x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(14336, 4096, device="cuda", dtype=torch.bfloat16) / 64
step = torch.compile(lambda x, w: F.silu(F.linear(x, w)), mode="max-autotune-no-cudagraphs")
torch.testing.assert_close(step(x, w), F.silu(F.linear(x, w)), rtol=2e-2, atol=2e-2)
print(json.dumps({"rule": cleanflush.current_pick()}))
"""


def _inductor_runs(tmp_path, job_text):
    """Each run's decision lines: one `fastest` run and two `stable` runs of the job, each a
    fresh process with Inductor caches of its own, so that each tunes (its autotuning results,
    compiled graphs and kernels' best configs live there; a run that tuned nothing recorded no
    decision, which the tests check).  Triton's compile cache is shared: the later runs find
    the binaries of the templates the first compiled, the costliest part of a run, and time
    them afresh.  (TORCHINDUCTOR_FORCE_DISABLE_CACHES would point Triton at a fresh cache in
    every compile: torch/_inductor/utils.py fresh_cache.)"""
    job = tmp_path / "job.py"
    job.write_text(job_text)
    lines = {}
    for run, rule in enumerate(("fastest", "stable", "stable")):
        decisions = tmp_path / f"{run}.jsonl"
        env = {**environ_without_cleanflush(), "CLEANFLUSH": "1", "CLEANFLUSH_PICK": rule}
        env.update(CLEANFLUSH_DECISIONS=str(decisions), TRITON_CACHE_DIR=str(tmp_path / "triton"))
        env.update(TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"inductor{run}"))
        child = run_child([sys.executable, str(job)], env, timeout=COMPILE_TIMEOUT_S)
        assert json.loads(child.stdout.strip().splitlines()[-1])["rule"] == rule
        lines[run] = [json.loads(line) for line in decisions.read_text().splitlines()]
    return lines


@pytest.mark.limit_s(3 * COMPILE_TIMEOUT_S + 60)
def test_inductors_kernel_configs_and_their_descent_are_under_the_rule_in_fresh_processes(tmp_path):
    lines = _inductor_runs(tmp_path, INDUCTOR_JOB)
    kernels = [d for d in lines[1] + lines[2] if d["kind"] == "inductor-kernel"]
    assert kernels and all(d["rule"] == "stable" for d in kernels)
    assert all("pick" not in d for d in lines[0])  # fastest: Inductor's own rule, no band
    for d in kernels:
        if len(d["timings_ms"]) > 1 and "pick" in d:
            rule = d["pick"]
            assert d["winner"] in rule["candidates"] and rule["band"] >= rule["floor"]
            print(f"\n{d['op']} {d['key']}: kept {d['winner']!r}, fastest {rule['fastest']!r}, band {rule['band']:.2%}")
    assert any("pick" in d for d in kernels), "no kernel decision reached the rule"
    descents = {
        r: {(d["op"], d["key"]): d["winner"] for d in found if d["kind"] == "inductor-coordesc"}
        for r, found in lines.items()
    }
    assert descents[1] and descents[1].keys() == descents[2].keys()
    alike = sum(descents[1][k] == descents[2][k] for k in descents[1])
    print(f"coordinate descent: the two stable runs kept the same config in {alike} of {len(descents[1])}")


# A prefill-sized GEMM under max-autotune: Inductor's algorithm selection times its Triton
# GEMM templates against the library call (aten.mm) and keeps one choice.
SELECT_JOB = """
import json, torch
import cleanflush

torch.manual_seed(0)
x = torch.randn(512, 4096, device="cuda", dtype=torch.bfloat16)
w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
mm = torch.compile(lambda x, w: x @ w, mode="max-autotune-no-cudagraphs")
torch.testing.assert_close(mm(x, w), x @ w, rtol=2e-2, atol=2e-2)
print(json.dumps({"rule": cleanflush.current_pick()}))
"""


@pytest.mark.limit_s(3 * COMPILE_TIMEOUT_S + 60)
def test_inductors_algorithm_selection_is_under_the_rule_in_fresh_processes(tmp_path):
    lines = _inductor_runs(tmp_path, SELECT_JOB)
    selections = {r: [d for d in found if d["kind"] == "inductor"] for r, found in lines.items()}
    assert all(selections.values()), "a run recorded no algorithm selection"
    assert all("pick" not in d for d in selections[0])  # fastest: Inductor's own min(), no band
    stable = selections[1] + selections[2]
    assert all(d["rule"] == "stable" for d in stable)
    assert any("pick" in d for d in stable), "no algorithm selection reached the rule"
    for d in (d for d in stable if "pick" in d):
        rule = d["pick"]
        assert d["winner"] in rule["candidates"] and rule["band"] >= rule["floor"]
        if d["winner"] != rule["fastest"]:  # handed to Inductor at the fastest's time, less a billionth
            assert d["timings_ms"][d["winner"]] < d["timings_ms"][rule["fastest"]]
        print(
            f"\n{d['key']}: kept {d['winner']!r}, fastest {rule['fastest']!r}, band {rule['band']:.2%}, "
            f"{len(rule['candidates'])} within it of {len(d['timings_ms'])} choices"
        )
    picks = [{d["key"]: d["winner"] for d in selections[r]} for r in (1, 2)]
    print(
        f"the two stable runs kept the same choice in {sum(picks[0].get(k) == w for k, w in picks[1].items())} "
        f"of {len(picks[1])}"
    )


# A memory-bound in-place kernel whose autotuner restores its output around each timing
# (``restore_value``): every timing holds a copy of y and a copy back, the same for every
# config, which the stable rule times alone and takes off.
RESTORE_JOB = """
import json, os, torch, triton, triton.language as tl
import cleanflush

@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (1024, 2048, 4096) for w in (4, 8)],
                 key=["n"], restore_value=["y_ptr"])
@triton.jit
def axpy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y_ptr + i, tl.load(y_ptr + i, mask=m) + 2 * tl.load(x_ptr + i, mask=m), mask=m)

n = 1 << 24
x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
want = y + 2 * x
axpy[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, n)
torch.testing.assert_close(y, want)  # one call's update: every timing's was undone

# the hooks' own GPU time, by the profiler after a plain read of 256 MiB (no flush of ours):
# Triton's restore hook is a clone and a copy back
plain = torch.empty(1 << 26, device="cuda")
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
    for _ in range(20):
        plain.sum()
        copy = y.clone()
        y.copy_(copy)
    torch.cuda.synchronize()
reads = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and "reduce" in e.name]
copies = sum(e.device_time for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) - sum(
    e.device_time for e in reads)
print(json.dumps({"hooks_us": copies / 20}), flush=True)
# a process whose last CUDA work is a profiler session under TEARDOWN_CUPTI=1 can hang at
# exit, with neither Triton nor cleanflush in it (Kineto's CUPTI teardown, pytorch/kineto#1554)
os._exit(0)
"""


@pytest.mark.limit_s(3 * JOB_TIMEOUT_S + 60)
def test_a_tuners_restore_copies_are_timed_alone_and_taken_off_on_a_real_kernel(tmp_path):
    job = tmp_path / "restore_job.py"
    job.write_text(RESTORE_JOB)
    for attempt in range(3):  # near-ties among six configs of a copy-bound kernel: nearly every run
        decisions = tmp_path / f"{attempt}.jsonl"
        env = {**environ_without_cleanflush(), "CLEANFLUSH": "1", "CLEANFLUSH_PICK": "stable"}
        env.update(CLEANFLUSH_DECISIONS=str(decisions), TEARDOWN_CUPTI="1")
        child = run_child([sys.executable, str(job)], env, timeout=JOB_TIMEOUT_S)
        hooks_us = json.loads(child.stdout.strip().splitlines()[-1])["hooks_us"]
        (d,) = [d for d in map(json.loads, decisions.read_text().splitlines()) if d["kind"] == "triton"]
        if d["pick"]["rounds_ms"]:
            break
    rule = d["pick"]
    shared_us, fastest_us = rule["shared_ms"] * 1e3, min(d["timings_ms"].values()) * 1e3
    print(
        f"\nhooks timed alone {shared_us:.1f} us, their copies by the profiler {hooks_us:.1f} us, "
        f"fastest timing {fastest_us:.1f} us; band {rule['band']:.2%}, noise {rule['noise']}, "
        f"{len(rule['candidates'])} within it of {len(rule['timed_again'])} timed again"
    )
    assert rule["rounds_ms"], "no run had configs near enough to time again"
    assert 0 < shared_us < fastest_us
    # the same copies as the profiler sees them, give or take their launches and a cold start
    assert 0.7 < shared_us / hooks_us < 1.6
    again = rule["timed_again"]
    assert d["winner"] in rule["candidates"] and again[d["winner"]] <= min(again.values()) * (1 + rule["band"]) + 1e-12
