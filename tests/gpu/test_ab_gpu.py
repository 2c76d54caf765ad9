"""On a CUDA GPU: ab's end-to-end timer knows a CUDA program for one and times it with CUDA
events (a host clock would time only the launches).  Run: pytest -m gpu"""

import os
import statistics

import pytest

torch = pytest.importorskip("torch")

from cleanflush._ab import programs  # noqa: E402

pytestmark = pytest.mark.gpu

# Inductor's output-code entry points (see tests/test_ab_programs.py), around a device-side sleep
PROGRAM = """
import torch

def call(args):
    x, = args
    args.clear()
    torch.cuda._sleep({cycles})
    return (x,)

def get_args():
    return [torch.zeros(4, device="cuda")]

def benchmark_compiled_module(args, times=10, repeat=10):
    pass
"""


def test_cuda_programs_are_timed_by_the_gpu(tmp_path):
    def program(name, cycles):
        path = tmp_path / name
        path.write_text(PROGRAM.format(cycles=cycles))
        return str(path)

    runs = [
        {"side": side, "paths": [program(f"{side}{i}.py", cycles)]}
        for i in range(2)
        for side, cycles in (("write", 4_000_000), ("write-read", 1_000_000))
    ]
    record = programs.time_programs(runs, reps=5)
    [graph] = record["graphs"]
    assert graph["inputs"] == "float32[4][1]@cuda #1"
    assert 3.0 < graph["ratio"]["median"] < 5.0 and graph["verdict"] == "slower"
    assert 0.1 < graph["ms"]["write-read"] < 5.0  # a million cycles at 0.2-10 GHz, as the GPU ran them


def test_a_recorded_call_is_made_again_and_priced_per_config(tmp_path, monkeypatch, capfd):
    """What an ab run records of a real @triton.autotune call, made again in this process:
    each config gives the kernel's own result, and the small block (32 elements a program, one
    warp) is priced above the large one (4096, eight warps) on a 256 MiB input: it keeps too
    little in flight to stream at full rate (tests/gpu/kernels/stream_add.py)."""
    import cleanflush
    from cleanflush import _ab, _calls
    from cleanflush._ab import prices as _ab_prices

    from .kernels import stream_add

    monkeypatch.setenv("CLEANFLUSH_DECISIONS", str(tmp_path / "decisions.jsonl"))
    (tmp_path / "calls").mkdir()  # where ab's runs record them (ab makes it)
    monkeypatch.setenv("CLEANFLUSH_AB_CALLS", str(tmp_path / "calls"))
    cleanflush.uninstall()
    cleanflush.install()  # records decisions from the autotuner now
    x = torch.randn(64 << 20, device="cuda")
    out = torch.empty_like(x)
    stream_add.launch(x, out)
    torch.cuda.synchronize()
    [decision], bad = _ab.read_decisions(str(tmp_path / "decisions.jsonl"))
    assert not bad and decision["call"]["file"]
    labels = sorted(decision["timings_ms"])
    call = _calls.Call.load(str(tmp_path / "calls" / decision["call"]["file"]), torch.device("cuda", 0))
    for label in labels:  # made again under each config: the kernel's own result
        call.args[1].fill_(-7.0)
        call.launch(label)()
        torch.cuda.synchronize()
        assert torch.equal(call.args[1], call.args[0] + 1.0), label
    read = torch.ones(64 << 20, device="cuda")
    priced = _ab_prices.price_one(str(tmp_path / "calls" / decision["call"]["file"]), labels, read, rounds=3, calls=5)
    small, large = (priced["prices"][label]["us"] for label in labels)  # "BLOCK: 32", "BLOCK: 4096"
    assert "BLOCK: 32," in labels[0] and small > 1.1 * large > 0, priced
    assert priced["kernel"] == "stream_add" and all(len(p["rounds"]) == 3 for p in priced["prices"].values())

    # the same, as ab prices it: its pricing process, every decision the runs picked differently
    gone = {**decision, "key": "gone", "call": {"file": "gone.pt"}}  # its record lost
    stock = [[{**decision, "winner": labels[0]}, {**gone, "winner": labels[0]}]] * 2
    clean = [[{**decision, "winner": labels[1]}, {**gone, "winner": labels[1]}]] * 2
    done = _ab._Runs({"write": stock, "write-read": clean})
    priced_by_key = {p["key"][-1]: p for p in _ab._price(dict(os.environ), str(tmp_path), done)}
    found, gone = priced_by_key[decision["key"]], priced_by_key["gone"]
    assert (found["rounds"], found["calls"], found["kernel"]) == (_ab_prices.ROUNDS, _ab_prices.CALLS, "stream_add")
    small, large = (found["prices"][label]["us"] for label in labels)
    assert small > 1.1 * large > 0 and all(p["low"] <= p["us"] <= p["high"] for p in found["prices"].values())
    assert gone["error"].startswith("FileNotFoundError: ") and "prices" not in gone  # said, and the other priced
    assert done.pricing_s > 0
    assert "cleanflush ab: priced 2 of 2 (" in capfd.readouterr().err


def test_a_kernel_whose_hooks_clone_its_data_is_priced_on_a_clean_l2(tmp_path, monkeypatch):
    """``restore_value``'s pre-hook clones the kernel's data just before it runs: the data is
    then in L2 and the clone dirty there.  ab's plain read runs between the hooks and the
    kernel, so the hooked kernel is priced as its twin without hooks (within 5%, 16 MiB read
    and written in place); a read before the hooks (the order ab had) leaves the price at
    least 10% off (expected lower: the kernel reads its data from L2)."""
    import cleanflush
    from cleanflush import _ab, _calls
    from cleanflush._ab import prices as _ab_prices

    from .kernels import restored_add

    monkeypatch.setenv("CLEANFLUSH_DECISIONS", str(tmp_path / "decisions.jsonl"))
    (tmp_path / "calls").mkdir()
    monkeypatch.setenv("CLEANFLUSH_AB_CALLS", str(tmp_path / "calls"))
    cleanflush.uninstall()
    cleanflush.install()
    for kernel in (restored_add.restored_add, restored_add.plain_add):
        restored_add.launch(kernel, torch.zeros(4 << 20, device="cuda"))
    torch.cuda.synchronize()
    found, bad = _ab.read_decisions(str(tmp_path / "decisions.jsonl"))
    tuned = [d for d in found if d["kind"] == "triton"]
    files = {d["op"].rsplit(".", 1)[-1]: d["call"]["file"] for d in tuned}
    assert not bad and set(files) == {"restored_add", "plain_add"}, found
    label = next(label for label in tuned[0]["timings_ms"] if "BLOCK: 4096" in label)
    read = torch.ones(_ab_prices.READ_BYTES // 4, device="cuda")
    path = {name: str(tmp_path / "calls" / file) for name, file in files.items()}
    hooked = _ab_prices.price_one(path["restored_add"], [label], read, rounds=5, calls=10)["prices"][label]["us"]
    twin = _ab_prices.price_one(path["plain_add"], [label], read, rounds=5, calls=10)["prices"][label]["us"]
    call = _calls.Call.load(path["restored_add"], read.device)
    launch = call.launch(label)

    def read_before_the_hooks() -> None:
        read.sum()
        launch()

    [before] = _ab_prices.kernel_times({label: read_before_the_hooks}, "restored_add", rounds=5, calls=10).values()
    warm = statistics.median(before)
    print(f"\nrestored_add priced: {hooked:.2f} us, its twin {twin:.2f} us, read before the hooks {warm:.2f} us")
    assert abs(hooked / twin - 1) < 0.05, (hooked, twin, warm)
    assert abs(warm / twin - 1) > 0.10, (hooked, twin, warm)
