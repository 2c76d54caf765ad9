"""On a CUDA GPU: the stable pick rule on a real @triton.autotune kernel, in fresh processes.
Run: pytest -m gpu -s"""

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

from ..conftest import environ_without_cleanflush  # noqa: E402

pytestmark = pytest.mark.gpu

# A memory-bound copy whose configs differ only in tile and warps: near-ties on any GPU, so
# the autotuner's own pick is decided by timing noise.
JOB = """
import json, sys, torch, triton, triton.language as tl
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
print(json.dumps({"pick": str(scale.best_config), "rule": cleanflush.current_pick()}))
"""


def _picks(rule, decisions, runs=4):
    found = []
    job = decisions.parent / "job.py"  # Triton compiles a kernel from its source file
    job.write_text(JOB)
    for _ in range(runs):
        env = {**environ_without_cleanflush(), "CLEANFLUSH": "1", "CLEANFLUSH_PICK": rule}
        env["CLEANFLUSH_DECISIONS"] = str(decisions)
        child = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, env=env, timeout=300)
        assert child.returncode == 0, child.stderr[-3000:]
        found.append(json.loads(child.stdout.strip().splitlines()[-1]))
    assert {f["rule"] for f in found} == {rule}
    return [f["pick"] for f in found]


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
        print(f"band {rule['band']:.2%} noise {rule['noise']} candidates {len(rule['candidates'])}")
    fastest_lines = [json.loads(line) for line in (tmp_path / "fastest.jsonl").read_text().splitlines()]
    assert all("pick" not in d for d in fastest_lines)  # the autotuner's own rule records no band
