"""A memory-bound ``@triton.autotune`` kernel for the GPU tests of ``cleanflush ab``'s prices:
``out = x + 1``, in blocks of 32 or 4096 elements, with a config pre-hook that zeroes ``out``
and a grid that depends on the block.

The small block is slower on a large input on any GPU, not only on a slow one: one warp a
program and 128 bytes a load, with at most 32 programs resident on an SM (Hopper, Ampere),
keep about 4 KiB in flight per SM, far under what HBM needs to stream at full rate.  (A
256-element block, eight times as much in flight, streamed as fast as the large one on an
H100.)"""

import triton
import triton.language as tl


def zero_out(nargs):
    nargs["out"].zero_()


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 32}, num_warps=1, pre_hook=zero_out),
        triton.Config({"BLOCK": 4096}, num_warps=8, pre_hook=zero_out),
    ],
    key=["n"],
)
@triton.jit
def stream_add(x, out, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out + offsets, tl.load(x + offsets, mask=mask) + 1.0, mask=mask)


def launch(x, out):
    n = x.numel()
    stream_add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
