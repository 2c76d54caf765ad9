"""A job that is served gemlite's shipped table, for ``cleanflush audit`` (benchmarks/audit.py):
one gemlite layer per entry of ``gemlite/configs/h100.json`` that a set names, each called with
one input row as a decoding model calls it (``GemLiteLinear(x)``: gemlite's own dispatch, its
pruner serving the entry).  The job loads h100.json itself, so that a GPU whose name is not an
H100's (an H200 loads no table of its own) is served the same entries.

    python -m benchmarks.jobs.gemlite_table SET [FIRST:LAST] [--search fast|max]
    python -m benchmarks.jobs.gemlite_table SET [FIRST:LAST] --step TABLE [TABLE ...]

SET: ``revsplitk-128`` (the 24 group-128 GEMV_REVSPLITK entries: 4-bit weights, FP16 input),
``revsplitk-64`` (the other 30), ``splitk`` (the 30 GEMV_SPLITK entries: 8-bit weights and
input, channel-wise).  ``--search max``: gemlite's 120-config search for GEMV_REVSPLITK in
place of its default (``fast``): what the audit re-tunes among.  ``--step``: no audit; the
layers' decoding step (one call of each layer) in a CUDA graph, timed with each TABLE loaded
after h100.json, in turn (us per step, JSON on stdout): what a corrected table gains served.
Needs a CUDA GPU and ``pip install gemlite``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

SETS = {
    "revsplitk-128": ("GEMV_REVSPLITK", 128),
    "revsplitk-64": ("GEMV_REVSPLITK", 64),
    "splitk": ("GEMV_SPLITK", None),
}
STEPS, ROUNDS = 20, 7


def entries(name: str, span: str | None = None) -> list[tuple[int, int, int]]:
    """(N, K, group) of each entry of h100.json the set names, in the file's order, sliced by ``span``."""
    import gemlite

    family, group = SETS[name]
    with open(os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json")) as f:
        table = json.load(f)[family]
    found = []
    for signature in table:
        _, n, k, g, _, _ = (int(v) for v in signature.strip("()").split(", "))
        if group is None or g == group:
            found.append((n, k, g))
    first, _, last = (span or ":").partition(":")
    return found[int(first or 0) : int(last) if last else None]


def layer(n: int, k: int, group: int, splitk: bool) -> Any:
    """A gemlite layer of random weights, as a model's: 4-bit (FP16 input) or 8-bit (INT8 input, channel-wise)."""
    import torch
    from gemlite import DType, GemLiteLinear

    torch.manual_seed(n * 7 + k)
    if splitk:
        from gemlite.helper import A8W8_INT8_dynamic

        linear = torch.nn.Linear(k, n, bias=False, dtype=torch.float16, device="cuda")
        return A8W8_INT8_dynamic().from_linear(linear)
    made = GemLiteLinear(
        4, group_size=group, in_features=k, out_features=n, input_dtype=DType.FP16, output_dtype=DType.FP16
    )
    made.pack(
        torch.randint(0, 16, (n, k), dtype=torch.uint8, device="cuda"),
        torch.rand(n, k // group, dtype=torch.float16, device="cuda") * 0.01,
        torch.full((n, k // group), 7.0, dtype=torch.float16, device="cuda"),
        None,
    )
    return made


def serve(name: str, span: str | None, search: str) -> None:
    """Each entry's layer, called three times with one row (the entry served from the table)."""
    import gemlite
    import torch

    if search == "max":
        gemlite.set_autotune({SETS[name][0]: "max"})
    gemlite.load_config(os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json"))
    for n, k, group in entries(name, span):
        made = layer(n, k, group, name == "splitk")
        x = torch.randn(1, k, dtype=torch.float16, device="cuda")
        for _ in range(3):
            made(x)
        torch.cuda.synchronize()
        del made


def step(name: str, span: str | None, tables: list[str]) -> dict[str, float]:
    """us per decoding step (one call of every layer, in a CUDA graph), with each table loaded in turn."""
    import gemlite
    import torch

    shipped = os.path.join(os.path.dirname(gemlite.__file__), "configs", "h100.json")
    made = [(layer(n, k, g, name == "splitk"), k) for n, k, g in entries(name, span)]
    inputs = [torch.randn(1, k, dtype=torch.float16, device="cuda") for _, k in made]
    found: dict[str, list[float]] = {table: [] for table in tables}
    graphs = {}
    for table in tables:
        gemlite.reset_config()
        gemlite.load_config(shipped)
        gemlite.load_config(table)
        for kernel in _kernels():  # each layer's kernel served anew from this table: its cache forgotten
            kernel.cache.clear()
        graphs[table] = _graph(lambda: [m(x) for (m, _), x in zip(made, inputs)])
    for _ in range(ROUNDS):
        for table in tables:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(STEPS):
                graphs[table].replay()
            end.record()
            end.synchronize()
            found[table].append(start.elapsed_time(end) * 1e3 / STEPS)
    return {table: sorted(ts)[len(ts) // 2] for table, ts in found.items()}


def _kernels() -> list[Any]:
    from gemlite.triton_kernels import gemv_revsplitK_kernels, gemv_splitK_kernels

    return [gemv_revsplitK_kernels.gemv_INT_revsplitK_kernel, gemv_splitK_kernels.gemv_INT_splitK_kernel]


def _graph(step_once: Any) -> Any:
    import torch

    for _ in range(2):  # served from the table, compiled, warm
        step_once()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step_once()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def main(argv: list[str]) -> None:
    name, rest = argv[0], argv[1:]
    span = rest.pop(0) if rest and ":" in rest[0] else None
    if rest[:1] == ["--step"]:
        print(json.dumps(step(name, span, rest[1:])))
        return
    serve(name, span, rest[1] if rest[:1] == ["--search"] else "fast")


if __name__ == "__main__":
    main(sys.argv[1:])
