"""A real linear-attention library's own autotuning, for ``cleanflush ab``:
flash-linear-attention (fla-core)'s chunked gated delta rule (the token mixer of Qwen3-Next
and Kimi Linear) forward at one prefill of 4096 tokens, 16 heads of 128 (its chunk kernels
carry ``@triton.autotune``: cumsum, the KKT product, the WY solve, the state and output
passes), and its fused RMSNorm at a decode row and that prefill.  Needs a CUDA GPU and
``pip install fla-core``.

    cleanflush ab --compare pick --runs 4 -- python -m benchmarks.jobs.fla_gdn
"""

import torch

HEADS, HEAD_DIM, TOKENS, HIDDEN = 16, 128, 4096, 2048


def main() -> None:
    import torch.nn.functional as F
    from fla.modules.norm.layernorm import rms_norm
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    torch.manual_seed(0)
    with torch.device("cuda"):
        q, k, v = (torch.randn(1, TOKENS, HEADS, HEAD_DIM, dtype=torch.bfloat16) for _ in range(3))
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        g = F.logsigmoid(torch.randn(1, TOKENS, HEADS, dtype=torch.float32))
        beta = torch.rand(1, TOKENS, HEADS, dtype=torch.bfloat16).sigmoid()
        weight = torch.ones(HIDDEN, dtype=torch.bfloat16)
        for _ in range(3):
            chunk_gated_delta_rule(q, k, v, g, beta, output_final_state=True)
        for rows in (1, TOKENS):
            x = torch.randn(rows, HIDDEN, dtype=torch.bfloat16)
            for _ in range(3):
                rms_norm(x, weight, None)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
