"""A real model's job for `cleanflush ab`: one decode token of a transformers
LlamaForCausalLM (Llama 3.1 8B shapes, 2 layers, random weights, BF16) compiled with
torch.compile(mode="max-autotune-no-cudagraphs").  It knows nothing of cleanflush.  The
token has no cache to attend to (use_cache=False): its GEMMs are the one-row decode GEMMs.
Run on a GPU with transformers installed:

    cleanflush ab --figure ab-llama.png -- python -m benchmarks.jobs.llama_decode
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

LAYERS = 2

config = LlamaConfig(
    hidden_size=4096,
    intermediate_size=14336,
    num_attention_heads=32,
    num_key_value_heads=8,
    num_hidden_layers=LAYERS,
    vocab_size=128256,
    max_position_embeddings=8192,
)
torch.manual_seed(0)
with torch.device("cuda"):
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval()
token = torch.randint(0, config.vocab_size, (1, 1), device="cuda")

compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
with torch.no_grad():
    got = compiled(input_ids=token, use_cache=False).logits
    want = model(input_ids=token, use_cache=False).logits
torch.testing.assert_close(got, want, rtol=5e-2, atol=0.2)  # bf16 logits of random weights
print(f"decode step of a {LAYERS}-layer Llama 3.1 8B compiled with max-autotune and checked")
