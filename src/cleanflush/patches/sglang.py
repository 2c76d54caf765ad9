"""SGLang: ``sglang.srt.bench_utils.bench_kineto``, DeepGEMM's copy with the same 8 GB
inline write (read at sgl-project/sglang 126a97f).
"""

from __future__ import annotations

from .._registry import name_of
from ._kineto import BenchKineto

TARGET = BenchKineto(name_of(__name__), "sglang.srt.bench_utils", "checked against SGLang 126a97f's layout")
apply, revert = TARGET.apply, TARGET.revert
