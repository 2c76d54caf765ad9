"""One process of ``benchmarks.launch``: a real ``@triton.autotune`` kernel launched ``CALLS``
times a round from its cache, ``ROUNDS`` rounds; prints the median round's ns a call (rank 0's,
in a job of ranks).  It imports cleanflush only where ``LAUNCH_CLEANFLUSH`` is set, so nothing
of the benchmarks package (which imports cleanflush) may be imported here."""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

CALLS = 20_000  # served calls a round
ROUNDS = 9  # rounds a process; its time is their median


def main() -> None:
    if os.environ.get("LAUNCH_CLEANFLUSH"):
        import cleanflush  # noqa: F401
    import torch
    import triton
    import triton.language as tl
    from triton.runtime.autotuner import Autotuner

    ours = bool(os.environ.get("LAUNCH_CLEANFLUSH"))
    # the baseline must run Triton alone, and the others through cleanflush's wrapper
    assert ("cleanflush" in sys.modules) == ours == hasattr(Autotuner.run, "__wrapped__"), "not the variant asked"

    @triton.autotune(configs=[triton.Config({"B": 1}), triton.Config({"B": 2})], key=["n"])
    @triton.jit
    def kernel(x, n, B: tl.constexpr):  # type: ignore[no-untyped-def]
        pass

    def never(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a served call tuned")

    kernel.fn.run = lambda *args, **kwargs: None  # a launch needs a GPU; the dispatch is what is timed
    kernel._bench = never
    job = os.environ.get("WORLD_SIZE")
    if job:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    x = torch.empty(4)
    for key in [(8, str(x.dtype)), (8,)]:  # triton 3.0-3.9 key the dtype of tensor arguments, or not
        kernel.cache[key] = kernel.configs[0]
    for _ in range(2000):
        kernel.run(x, 8, grid=(1,))
    rounds = []
    for _ in range(ROUNDS):
        start = time.perf_counter_ns()
        for _ in range(CALLS):
            kernel.run(x, 8, grid=(1,))
        rounds.append((time.perf_counter_ns() - start) / CALLS)
    if job:
        dist.barrier()
        dist.destroy_process_group()
    if os.environ.get("RANK", "0") == "0":
        print(statistics.median(rounds))


if __name__ == "__main__":
    main()
