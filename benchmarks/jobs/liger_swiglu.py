"""A real fused-MLP library's own autotuning, for ``cleanflush ab``: Liger-Kernel's fused
gate/up projection + SwiGLU for inference (its ``@triton.autotune`` kernel of 32 configs,
keyed by the bucket of rows, taking TMA tensor descriptors and a host pre-hook) at the Llama
3.1 8B MLP (4096 -> 14336), one decode row and one prefill of 512 rows.  Needs a Hopper GPU
and ``pip install liger-kernel``.

    cleanflush ab --runs 3 -- python -m benchmarks.jobs.liger_swiglu
"""

import torch

DIM, HIDDEN = 4096, 14336
ROWS = (1, 512)


def main() -> None:
    from liger_kernel.ops.mlp import gemm_swiglu

    torch.manual_seed(0)
    gate = torch.randn(HIDDEN, DIM, dtype=torch.bfloat16, device="cuda") * 0.02
    up = torch.randn(HIDDEN, DIM, dtype=torch.bfloat16, device="cuda") * 0.02
    for rows in ROWS:
        x = torch.randn(1, rows, DIM, dtype=torch.bfloat16, device="cuda")
        for _ in range(3):
            gemm_swiglu(x, gate, up, 1.0, store_preact=False)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
