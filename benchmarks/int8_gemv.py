"""A Triton GEMV with an INT8 weight and one float32 scale per output row (y = (W x) * s),
the kernel of the autotune study and the Python-launched kernel of the latency study."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
import triton
import triton.language as tl


@triton.jit
def _int8_gemv(x_ptr, w_ptr, s_ptr, y_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
        w = tl.load(
            w_ptr + rows[:, None] * K + cols[None, :], mask=(rows[:, None] < N) & (cols[None, :] < K), other=0
        ).to(tl.float32)
        acc += tl.sum(w * x[None, :], axis=1)
    scale = tl.load(s_ptr + rows, mask=rows < N, other=0.0)
    tl.store(y_ptr + rows, (acc * scale).to(y_ptr.dtype.element_ty), mask=rows < N)


def configs() -> list[dict[str, int]]:
    """The sweep: block sizes and warps, without tiles too large for registers."""
    return [
        {"BLOCK_N": bn, "BLOCK_K": bk, "num_warps": w}
        for bn, bk, w in itertools.product((8, 16, 32, 64), (128, 256, 512, 1024), (2, 4, 8))
        if bn * bk <= 32768
    ]


def name(config: dict[str, int]) -> str:
    return f"BN{config['BLOCK_N']} BK{config['BLOCK_K']} w{config['num_warps']}"


class Layer:
    """One INT8 layer: x (1 x K, bf16), W (N x K, int8), s (N, fp32), y (N, bf16)."""

    def __init__(self, n: int, k: int, device: torch.device | str = "cuda") -> None:
        self.n, self.k, self.device = n, k, device
        self.x = torch.randn(1, k, device=device, dtype=torch.bfloat16)
        self.w = torch.randint(-127, 128, (n, k), device=device, dtype=torch.int8)
        self.s = torch.rand(n, device=device, dtype=torch.float32) * 0.01 + 1e-3
        self.y = torch.empty(n, device=device, dtype=torch.bfloat16)

    def call(self, config: dict[str, int], w: torch.Tensor | None = None) -> Callable[[], Any]:
        grid = (triton.cdiv(self.n, config["BLOCK_N"]),)
        w = self.w if w is None else w
        kwargs = dict(config)
        return lambda: _int8_gemv[grid](self.x, w, self.s, self.y, self.n, self.k, **kwargs)

    def error(self, config: dict[str, int]) -> float:
        """‖y − ref‖ / ‖ref‖ against a float64 dequantized reference, on fresh inputs."""
        self.x.normal_()
        self.w.random_(-127, 128)
        self.s.uniform_(1e-3, 1.1e-2)
        self.y.fill_(float("nan"))
        self.call(config)()
        ref = (self.x.double() @ self.w.double().T).squeeze(0) * self.s.double()
        got = self.y.double()
        if not torch.isfinite(got).all():
            return float("inf")
        return float((got - ref).norm() / ref.norm())
