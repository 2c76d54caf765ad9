"""On a CUDA GPU: ab's end-to-end timer knows a CUDA program for one and times it with CUDA
events (a host clock would time only the launches).  Run: pytest -m gpu"""

import pytest

torch = pytest.importorskip("torch")

from cleanflush import _ab_programs as programs  # noqa: E402

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
