"""On a CUDA GPU: ``cleanflush audit``'s two timers and its pricing process.  Run:
pytest -m gpu -s tests/gpu/test_audit_gpu.py (about a minute; gemlite's test needs
``pip install gemlite``)."""

import importlib.util
import json
import os
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from cleanflush._audit import graph, run  # noqa: E402
from cleanflush._audit.report import format_report  # noqa: E402

pytestmark = pytest.mark.gpu
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The job: stream_add's table preloaded with its slow config (32 elements a program, one warp:
# too little in flight to stream, tests/gpu/kernels/stream_add.py) for one size, its fast one
# (4096, eight warps) for another.
JOB = """
import sys
sys.path.insert(0, {root!r})
import torch
from tests.gpu.kernels import stream_add as k

slow, fast = k.stream_add.configs
for n in (16 << 20, 8 << 20):
    key = (n, "torch.float32", "torch.float32")
    k.stream_add.cache[key] = slow if n == 16 << 20 else fast
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    for _ in range(3):
        k.launch(x, out)
torch.cuda.synchronize()
"""


def test_the_graph_timer_prices_a_config_that_cannot_stream_above_one_that_can(tmp_path):
    """The second timer on its own: the recorded call of a real @triton.autotune kernel, its
    slow config (32 elements a program) priced above its fast one (4096), each launch reading
    its own copy of the inputs (the copies together at least 4 x L2)."""
    import cleanflush
    from cleanflush import _ab, _calls

    from .kernels import stream_add

    os.environ["CLEANFLUSH_DECISIONS"] = str(tmp_path / "decisions.jsonl")
    (tmp_path / "calls").mkdir()
    os.environ["CLEANFLUSH_AB_CALLS"] = str(tmp_path / "calls")
    try:
        cleanflush.uninstall()
        cleanflush.install()
        x = torch.randn(4 << 20, device="cuda")
        stream_add.launch(x, torch.empty_like(x))
        torch.cuda.synchronize()
    finally:
        del os.environ["CLEANFLUSH_DECISIONS"], os.environ["CLEANFLUSH_AB_CALLS"]
    [decision], _ = _ab.read_decisions(str(tmp_path / "decisions.jsonl"))
    labels = sorted(decision["timings_ms"])  # "BLOCK: 32, ...", "BLOCK: 4096, ..."
    call = _calls.Call.load(str(tmp_path / "calls" / decision["call"]["file"]), torch.device("cuda", 0))
    prices, copies = graph.graph_prices(call, labels, rounds=5)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    small, large = prices[labels[0]]["us"], prices[labels[1]]["us"]
    print(f"\ngraph timer: BLOCK 32 {small:.2f} us, BLOCK 4096 {large:.2f} us a launch, {copies} copies")
    assert copies * graph.call_bytes(call) >= graph.STREAM_FACTOR * l2 and copies >= 2
    assert small > 1.1 * large > 0 and all(p["low"] <= p["us"] <= p["high"] for p in prices.values())
    # 32 MiB a launch (x and out) at 2-5 TB/s: 6-20 us
    assert 5 < large < 30, large


def test_the_audit_finds_the_entry_planted_wrong_and_keeps_the_right_one(tmp_path, capfd):
    """The whole audit on a GPU: the job, its preloaded table recorded, the pricing process
    (the clean re-tune of each entry, both timers), the judging."""
    (tmp_path / "job.py").write_text(textwrap.dedent(JOB.format(root=ROOT)))
    result, code = run.run([sys.executable, str(tmp_path / "job.py")], keep=str(tmp_path / "work"))
    print("\n" + format_report(result))
    assert code == 0 and result["problems"] == [] and result["headline"]["entries"] == 2
    by_size = {int(e["key"].strip("(").split(",")[0]): e for e in result["entries"]}
    slow, fast = by_size[16 << 20], by_size[8 << 20]
    assert (slow["class"], fast["class"]) == ("wrong", "right"), (slow["reason"], fast["reason"])
    assert slow["clean"].startswith("BLOCK: 4096") and fast["reason"] == "the clean re-tune kept the shipped config"
    assert all(slow["ratio"][timer] > 1.1 for timer in ("cupti", "graph")) and slow["calls"] == 3
    assert set(slow["seconds"]) == {"load", "compile", "sweep", "settle", "cupti", "graph"}
    assert "cleanflush audit: priced entry 2 of 2 (" in capfd.readouterr().err


GEMLITE_JOB = """
import os, sys
import torch, gemlite
from gemlite import DType, GemLiteLinear

gemlite.load_config(os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json"))  # on an H200 too
layer = GemLiteLinear(4, group_size=128, in_features=4096, out_features=4096, input_dtype=DType.FP16,
                      output_dtype=DType.FP16)
layer.pack(torch.randint(0, 16, (4096, 4096), dtype=torch.uint8, device="cuda"),
           torch.rand(4096, 32, dtype=torch.float16, device="cuda") * 0.01,
           torch.full((4096, 32), 7.0, dtype=torch.float16, device="cuda"), None)
x = torch.randn(1, 4096, dtype=torch.float16, device="cuda")
for _ in range(3):
    layer(x)
torch.cuda.synchronize()
"""  # fmt: skip


@pytest.mark.skipif(importlib.util.find_spec("gemlite") is None, reason="gemlite is not installed")
def test_a_gemlite_entry_from_its_h100_table_is_audited(tmp_path):
    """gemlite's shipped h100.json entry (1, 4096, 4096, 128, 8, ...) served through its pruner,
    re-tuned against gemlite's own search for the call, and judged; on a GPU other than an H100
    the audit says the table was tuned on another GPU."""
    (tmp_path / "job.py").write_text(textwrap.dedent(GEMLITE_JOB))
    result, code = run.run(
        [sys.executable, str(tmp_path / "job.py")], keep=str(tmp_path / "work"), write=str(tmp_path / "out")
    )
    print("\n" + format_report(result))
    [entry] = result["entries"]
    assert code == 0 and entry["source"] == "gemlite" and entry["class"] in ("right", "wrong", "undecided"), entry
    on_h100 = "h100" in torch.cuda.get_device_name().lower().replace(" ", "_")
    assert entry["other_gpu"] is (not on_h100) and "h100.json" in entry["provenance"]
    assert entry["offered"] > 1 and entry["leaders"] >= 1
    if entry["class"] == "wrong":
        [written] = result["written"]
        with open(written["path"]) as f:
            table = json.load(f)
        assert table["GEMV_REVSPLITK"]["(1, 4096, 4096, 128, 8, 104)"]["BLOCK_SIZE_N"] is not None
    else:
        assert result["written"] == [] and not os.path.exists(tmp_path / "out")
