"""A real autotuning job for `cleanflush ab`: torch.compile(mode="max-autotune") of a decode
step made of the five one-row BF16 linear layers of Llama 3.1 8B.  It knows nothing of
cleanflush.  Run on a GPU:

    cleanflush ab --runs 2 --figure ab-decode.png -- python benchmarks/jobs/decode_max_autotune.py
"""

import torch
import torch._inductor.config as config
import torch.nn.functional as F

SHAPES = [(4096, 4096), (6144, 4096), (4096, 14336), (28672, 4096), (128256, 4096)]  # N x K

config.max_autotune_gemm_backends = "TRITON,ATEN"
torch.manual_seed(0)
weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / k**0.5 for n, k in SHAPES]
rows = {k: torch.randn(1, k, device="cuda", dtype=torch.bfloat16) for k in {k for _, k in SHAPES}}


def step(rows, weights):
    return [F.linear(rows[w.shape[1]], w) for w in weights]


compiled = torch.compile(step, mode="max-autotune")
for got, want in zip(compiled(rows, weights), step(rows, weights)):
    torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
print("decode step compiled and checked:", ", ".join(f"{n}x{k}" for n, k in SHAPES))
