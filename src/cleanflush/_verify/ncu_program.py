"""The program ``cleanflush verify --ncu`` runs under Nsight Compute: ``calls`` timed GEMMs
after each named flush (``stock``, a policy, or a control of ``controls``), each GEMM inside
an NVTX range ``timed`` so that only the GEMMs are profiled.

    python -m cleanflush._verify.ncu_program N K DTYPE DEVICE CALLS FLUSH [FLUSH ...]
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import torch
    import triton

    from .. import _measure
    from .controls import flushing

    n, k, dtype, device, calls, *flushes = argv
    torch.cuda.set_device(int(device))
    fn, _, _ = _measure.one_row_gemm(int(n), int(k), getattr(torch, dtype))
    driver = triton.runtime.driver.active
    cache = driver.get_empty_cache_for_benchmark()
    _measure.warm_up(fn, 1.0)
    torch.cuda.profiler.start()
    for name in flushes:
        with flushing(name):
            for _ in range(int(calls)):
                driver.clear_cache(cache)
                torch.cuda.nvtx.range_push("timed")
                fn()
                torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
