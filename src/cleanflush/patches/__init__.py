"""Patch targets.  Each module has ``HOOKS`` (modules whose import triggers it), ``apply``,
``revert`` and ``status``; none imports torch or triton at module level."""

from __future__ import annotations

from functools import lru_cache
from importlib import metadata

from . import (decisions, deep_ep, deep_gemm, flashinfer, inductor, kernelbench, sglang, sol_execbench, tilelang,
               triton, tritonbench)

# the benchmarkers, the harnesses, then the recorder
TARGETS = (triton, inductor, tritonbench, tilelang, flashinfer, deep_gemm, sglang, kernelbench, sol_execbench,
           deep_ep, decisions)


@lru_cache(maxsize=None)
def installed_version(*dists: str) -> str | None:
    """Version of the first installed distribution among ``dists`` (``pytorch-triton``
    is how nightly torch ships triton)."""
    for dist in dists:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None

