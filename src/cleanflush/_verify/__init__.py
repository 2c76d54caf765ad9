"""``cleanflush verify``: prove on this GPU that the patch took effect, with evidence that
does not share code with the flush it judges.

It reruns a one-row GEMM (F.linear with one input row and an N x K weight, the kernel the
problem was found on) and
times it, interleaved over rounds in one process, through ``triton.testing.do_bench`` and
Inductor's benchmarker under the stock flush and under the active policy, beside a plain
read loop and a rotating-weight CUDA graph.  ``--controls`` adds deliberately broken
flushes that must be judged FAIL.

The pieces: ``probe`` (the machine), ``measure`` (the GPU work), ``verdict`` (plain
Python over the record), ``report`` (the text), ``controls`` (the flushes to time); the
command itself is ``cleanflush.cli.verify``.
"""

from __future__ import annotations

from .measure import DTYPES, CannotRun, Options

__all__ = ["DTYPES", "CannotRun", "Options"]
