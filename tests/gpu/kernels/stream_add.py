"""A memory-bound ``@triton.autotune`` kernel for the GPU tests of ``cleanflush ab``'s prices:
``out = x + 1``, in blocks of 256 or 4096 elements (the small block is several times slower on
a large input), with a config pre-hook that zeroes ``out`` and a grid that depends on the block."""

import triton
import triton.language as tl


def zero_out(nargs):
    nargs["out"].zero_()


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 256}, num_warps=1, pre_hook=zero_out),
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
