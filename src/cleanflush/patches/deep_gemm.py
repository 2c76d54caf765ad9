"""DeepGEMM: ``deep_gemm.testing.bench.bench_kineto``, an 8 GB inline write before each
profiled call (read at deepseek-ai/DeepGEMM 54e2261).  Its tests import the name through
``from deep_gemm.testing import bench_kineto`` (``deep_gemm.testing`` star-imports
``bench``), so that re-export is patched too.  Its ``bench`` flushes once before a warm
loop: nothing to fix there.
"""

from __future__ import annotations

from .._registry import name_of
from ._kineto import BenchKineto

TARGET = BenchKineto(
    name_of(__name__),
    "deep_gemm.testing.bench",
    "checked against DeepGEMM 54e2261's layout",
    reexported_by="deep_gemm.testing",
)
apply, revert = TARGET.apply, TARGET.revert
