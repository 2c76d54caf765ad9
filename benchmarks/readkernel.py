"""How fast the flush's read can be: the read kernel's launch configurations against the best
plain read this GPU reaches.

Two tables, measured in one process, interleaved over rounds:

- ``reference``: plain reads (torch's float32 ``sum``, and a one-tile-per-program Triton read
  at several tile sizes) of 64 MiB to 2 GiB; the fastest of them at each size is the read
  bandwidth a plain kernel reaches here.
- ``sweep``: the product's read kernel (``cleanflush._sweep.cleanflush_l2_sweep``) at 2 x L2
  over a grid of tile size, warps, programs per SM and loads in flight per step.

Every read is of a region the previous reads did not touch (a rotation over a buffer many
times the L2), so no line is an L2 hit, as in a flush, where the timed kernel ran in between.
Times are per call: ``CALLS`` launches back to back between two CUDA events, as a flush loop
queues them, launch gaps included.
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path
from typing import Any

from .common import Results, progress

MiB = 1 << 20
CALLS = 40
ROUNDS = 5
REFERENCE_SIZES = [64 * MiB, 120 * MiB, 256 * MiB, 512 * MiB, 2048 * MiB]
BLOCKS = [2048, 4096, 8192]
WARPS = [4, 8, 16]
PROGRAMS_PER_SM = [2, 4, 8, 16]
UNROLLS = [1, 2, 4]


def _kernels() -> tuple[Any, Any]:
    import triton
    import triton.language as tl

    @triton.jit
    def one_tile_read(src, sink, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        index = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        tl.atomic_add(sink, tl.sum(tl.load(src + index, mask=index < n, other=0.0), axis=0))

    return one_tile_read, None


def _per_call_us(launch: Any, regions: list[Any], calls: int = CALLS) -> float:
    import torch

    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    launch(regions[0])  # warm
    torch.cuda.synchronize()
    start.record()
    for i in range(calls):
        launch(regions[i % len(regions)])
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls


def _regions(pool: Any, nbytes: int) -> list[Any]:
    """Disjoint float32 regions of ``nbytes`` in ``pool``, at least 4 x L2 apart in a rotation."""
    count = pool.numel() * 4 // nbytes
    numel = nbytes // 4
    return [pool[i * numel : (i + 1) * numel] for i in range(count)]


def run(out: Path, rounds: int = ROUNDS) -> Path:
    import torch

    from cleanflush import _sweep

    results = Results(out, "readkernel")
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    l2, sms = int(props.L2_cache_size), int(props.multi_processor_count)
    pool = torch.ones(4096 * MiB // 4, dtype=torch.float32, device=device)  # 4 GiB
    sink = torch.zeros((), dtype=torch.float32, device=device)
    signal = torch.zeros(2, dtype=torch.int64, device=device)
    one_tile_read, _ = _kernels()

    def plain(kind: str, block: int = 0) -> Any:
        if kind == "torch.sum":
            return lambda data: torch.sum(data, dim=0, out=sink)
        return lambda data: one_tile_read[(triton_cdiv(data.numel(), block),)](data, sink, data.numel(), BLOCK=block)

    def sweep(block: int, warps: int, per_sm: int, unroll: int) -> Any:
        grid = (sms * per_sm,)
        return lambda data: _sweep.cleanflush_l2_sweep[grid](
            data, sink, data.numel(), signal, 0, 0, BLOCK=block, HOLD=False, UNROLL=unroll, num_warps=warps
        )

    reference = [("torch.sum", 0)] + [("one tile per program", b) for b in (1024, 2048, 4096, 8192)]
    configs = list(itertools.product(BLOCKS, WARPS, PROGRAMS_PER_SM, UNROLLS))
    rows: dict[tuple[Any, ...], list[float]] = {}
    for r in range(rounds):
        progress(f"readkernel: round {r + 1} of {rounds}")
        for size in REFERENCE_SIZES:
            regions = _regions(pool, size)
            for kind, block in reference:
                rows.setdefault(("reference", kind, block, size), []).append(_per_call_us(plain(kind, block), regions))
        regions = _regions(pool, 2 * l2)
        for block, warps, per_sm, unroll in configs:
            key = ("sweep", block, warps, per_sm, unroll)
            rows.setdefault(key, []).append(_per_call_us(sweep(block, warps, per_sm, unroll), regions))
    # correctness of every sweep configuration: the sum of ones is the element count
    wrong: list[tuple[int, int, int, int]] = []
    data = pool[: 3 * 8192 * 4 + 12345]  # float32 sums of ones are exact up to 2**24
    for block, warps, per_sm, unroll in configs:
        sink.zero_()
        sweep(block, warps, per_sm, unroll)(data)
        if float(sink) != data.numel():
            wrong.append((block, warps, per_sm, unroll))
    records: list[dict[str, Any]] = []
    for key, times in rows.items():
        us = statistics.median(times)
        if key[0] == "reference":
            _, kind, block, size = key
            records.append({"table": "reference", "kernel": kind, "block": block, "bytes": size, "us": us})
        else:
            _, block, warps, per_sm, unroll = key
            records.append(
                {
                    "table": "sweep",
                    "block": block,
                    "warps": warps,
                    "programs_per_sm": per_sm,
                    "unroll": unroll,
                    "bytes": 2 * l2,
                    "us": us,
                    "right": (block, warps, per_sm, unroll) not in wrong,
                }
            )
        records[-1]["tb_per_s"] = records[-1]["bytes"] / (us * 1e-6) / 1e12
        records[-1]["spread_us"] = max(times) - min(times)
    for row in records:
        results.add(**row)
    product = {
        "block": _sweep.BLOCK,
        "warps": _sweep.WARPS,
        "programs_per_sm": _sweep.PROGRAMS_PER_SM,
        "unroll": _sweep.UNROLL,
    }
    path = results.write(l2=l2, sms=sms, rounds=rounds, calls=CALLS, product=product)
    for row in records:
        if row["table"] == "reference":
            size = f"{row['bytes'] // MiB} MiB"
            progress(f"  {row['kernel']} {row['block'] or ''} {size}: {row['us']:.2f} us, {row['tb_per_s']:.2f} TB/s")
    for row in sorted((r for r in records if r["table"] == "sweep"), key=lambda r: r["us"])[:12]:
        config = f"BLOCK {row['block']}, {row['warps']} warps, {row['programs_per_sm']}/SM, unroll {row['unroll']}"
        progress(f"  sweep {config}: {row['us']:.2f} us, {row['tb_per_s']:.2f} TB/s, right {row['right']}")
    return path


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)
