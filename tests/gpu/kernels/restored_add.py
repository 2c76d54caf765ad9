"""A memory-bound in-place ``@triton.autotune`` kernel, ``x += 1``, twice: with
``restore_value=["x"]`` (the autotuner clones ``x`` before each timed call and copies it back
after) and without, for the GPU test of what ``cleanflush ab`` prices after such hooks."""

import triton
import triton.language as tl

CONFIGS = [triton.Config({"BLOCK": 1024}, num_warps=4), triton.Config({"BLOCK": 4096}, num_warps=8)]


@triton.autotune(configs=CONFIGS, key=["n"], restore_value=["x"])
@triton.jit
def restored_add(x, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x + offsets, tl.load(x + offsets, mask=mask) + 1.0, mask=mask)


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def plain_add(x, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x + offsets, tl.load(x + offsets, mask=mask) + 1.0, mask=mask)


def launch(kernel, x):
    n = x.numel()
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
