"""A real low-bit GEMV/GEMM library's own autotuning, for ``cleanflush ab``: gemlite's 4-bit
(group 64) layers at Llama 3.1 8B decode shapes (one input row: its GEMV kernel) and one
prefill shape (512 rows: its GEMM), each layer's first call tuning its ``@triton.autotune``
kernel with gemlite's default search (the configs it ships for NVIDIA, its own pruner, its
split-K pre-hooks).  Needs a CUDA GPU and ``pip install gemlite``.

    cleanflush ab --runs 3 -- python -m benchmarks.jobs.gemlite_decode
"""

import torch

SHAPES = ((1, 4096, 4096), (1, 28672, 4096), (1, 4096, 14336), (512, 4096, 4096))  # (rows, N, K)
GROUP = 64


def main() -> None:
    import gemlite
    from gemlite import DType, GemLiteLinear

    gemlite.reset_config()  # no shipped table: every layer tunes here
    torch.manual_seed(0)
    for rows, n, k in SHAPES:
        layer = GemLiteLinear(
            4, group_size=GROUP, in_features=k, out_features=n, input_dtype=DType.FP16, output_dtype=DType.FP16
        )
        w_q = torch.randint(0, 16, (n, k), dtype=torch.uint8, device="cuda")
        scales = torch.rand(n, k // GROUP, dtype=torch.float16, device="cuda") * 0.01
        zeros = torch.full((n, k // GROUP), 7.0, dtype=torch.float16, device="cuda")
        layer.pack(w_q, scales, zeros, None)
        x = torch.randn(rows, k, dtype=torch.float16, device="cuda")
        for _ in range(3):
            layer(x)
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
