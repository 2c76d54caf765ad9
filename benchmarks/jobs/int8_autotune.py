"""A real autotuning job for `cleanflush ab`: Triton's @autotune over the INT8 GEMV sweep of
benchmarks/int8_gemv.py on two Llama layers.  It knows nothing of cleanflush.  Run on a GPU,
from the repository root:

    cleanflush ab --runs 2 --figure ab-int8.png -- python -m benchmarks.jobs.int8_autotune
"""

import triton

from benchmarks import int8_gemv

LAYERS = [(4096, 4096), (28672, 4096)]

configs = [
    triton.Config({"BLOCK_N": c["BLOCK_N"], "BLOCK_K": c["BLOCK_K"]}, num_warps=c["num_warps"])
    for c in int8_gemv.configs()
]
tuned = triton.autotune(configs=configs, key=["N", "K"])(int8_gemv._int8_gemv)

for n, k in LAYERS:
    layer = int8_gemv.Layer(n, k)
    tuned[lambda meta, n=n: (triton.cdiv(n, meta["BLOCK_N"]),)](layer.x, layer.w, layer.s, layer.y, n, k)
    ref = (layer.x.double() @ layer.w.double().T).squeeze(0) * layer.s.double()
    err = float((layer.y.double() - ref).norm() / ref.norm())
    assert err < 1e-2, err
    print(f"{n}x{k}: picked {tuned.best_config} (error {err:.1e})")
