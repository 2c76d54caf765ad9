"""Where the installed triton keeps its L2 flush, found by feature (never the version string),
for tests whose subject exists in one layout only.

* 3.3+: the driver class defines ``clear_cache`` and ``get_empty_cache_for_benchmark``;
* 3.2: only ``get_empty_cache_for_benchmark``, whose tensor ``do_bench`` zeroes inline;
* 3.0-3.1: neither; ``do_bench`` allocates and zeroes a buffer of its own.

The layouts a test skips are checked on every triton by test_triton_patch's stand-ins of them,
and with the real 3.0-3.9 packages by matrix/ (and the suite itself runs on each, README).
This module reads triton only, never cleanflush, so it cannot agree with a wrong patch."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from functools import cache

import pytest

try:
    import triton
    from triton.backends.nvidia.driver import CudaDriver
except ImportError:  # the tests that need triton skip themselves
    triton = CudaDriver = None

DRIVER_CLEAR_CACHE = CudaDriver is not None and "clear_cache" in vars(CudaDriver)
DRIVER_EMPTY_CACHE = CudaDriver is not None and "get_empty_cache_for_benchmark" in vars(CudaDriver)


def _autotune_uses_do_bench() -> bool:
    # triton 3.2's autotune takes do_bench= and drops it (the tuner asks the driver for its
    # benchmarker, which needs a GPU); 3.0-3.1's has no such argument
    if triton is None:
        return False

    def bench(kernel_call, quantiles):  # never called
        return [1.0, 1.0, 1.0]

    @triton.jit
    def kernel(x):
        pass

    try:
        tuner = triton.autotune(configs=[triton.Config({})], key=[], do_bench=bench)(kernel)
    except Exception:  # noqa: BLE001 (TypeError for the argument, RuntimeError for no driver)
        return False
    return getattr(tuner, "do_bench", None) is bench


AUTOTUNE_DO_BENCH = _autotune_uses_do_bench()

needs_driver_clear_cache = pytest.mark.skipif(
    not DRIVER_CLEAR_CACHE,
    reason="this triton's driver has no clear_cache (3.3+): it flushes in do_bench, a layout "
    "test_triton_patch stands in for and matrix/ checks",
)
needs_driver_empty_cache = pytest.mark.skipif(
    not DRIVER_EMPTY_CACHE,
    reason="this triton's driver has no get_empty_cache_for_benchmark (3.2+): do_bench allocates "
    "its own buffer, a layout test_triton_patch stands in for and matrix/ checks",
)
needs_do_bench_buffer = pytest.mark.skipif(
    DRIVER_EMPTY_CACHE, reason="this triton's do_bench flushes through its driver (3.2+), not a buffer of its own"
)
needs_autotune_do_bench = pytest.mark.skipif(
    not AUTOTUNE_DO_BENCH, reason="this triton's @autotune does not time with the do_bench= it is given (3.3+)"
)

# One flush site per layout, as a child process imports and reads it: (import line, the
# expression of the object that owns the attribute, the attribute).
if DRIVER_CLEAR_CACHE:
    FLUSH_SITE = ("import triton", 'triton.backends.backends["nvidia"].driver', "clear_cache")
elif DRIVER_EMPTY_CACHE:
    FLUSH_SITE = ("import triton", 'triton.backends.backends["nvidia"].driver', "get_empty_cache_for_benchmark")
else:
    FLUSH_SITE = ("import triton, triton.testing", "triton.testing", "do_bench")


def flush_point() -> tuple[object, str]:
    """(the object, its attribute) where this triton flushes, in this process."""
    import triton.testing

    owner = triton.testing if FLUSH_SITE[1] == "triton.testing" else triton.backends.backends["nvidia"].driver
    return owner, FLUSH_SITE[2]


# In a process that imported the importable driver module (as this one has), its row
# (3.2+); where no driver method flushes (3.0-3.1), do_bench's.
IMPORTED_ROW = (
    f"triton.backends.nvidia.driver.CudaDriver.{FLUSH_SITE[2]}" if DRIVER_EMPTY_CACHE else "triton.testing.do_bench"
)

# The row a fresh process's `cleanflush status` names the NVIDIA flush by: the importable class
# where the registry holds it (3.4+), the registry's copy where that is another class (3.0-3.3).
_SAME_CLASS = CudaDriver is not None and triton.backends.backends["nvidia"].driver is CudaDriver
if not DRIVER_EMPTY_CACHE:
    STATUS_ROW = "triton.testing.do_bench"
elif _SAME_CLASS:
    STATUS_ROW = f"triton.backends.nvidia.driver.CudaDriver.{FLUSH_SITE[2]}"
else:
    STATUS_ROW = f"triton.backends.backends['nvidia'].driver.{FLUSH_SITE[2]}"

# What our kernels and the benchmark's do: a grid-stride loop over blocks of a constexpr size.
_INTERPRETER_PROBE = """
import torch, triton, triton.language as tl

@triton.jit
def count(out, n, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for offset in range(tl.program_id(0) * BLOCK, n, tl.num_programs(0) * BLOCK):
        acc += tl.where(offset + tl.arange(0, BLOCK) < n, 1.0, 0.0)
    tl.atomic_add(out, tl.sum(acc, axis=0))

out = torch.zeros(1)
count[(2,)](out, 100, BLOCK=16)
assert int(out.item()) == 100, out
"""


@cache
def _interpreter_runs_grid_stride_loops() -> bool:
    if triton is None:
        return False
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    code = textwrap.dedent(_INTERPRETER_PROBE)
    child = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    return child.returncode == 0


def skip_unless_the_interpreter_runs_our_kernels() -> None:
    """Skip where this triton's interpreter cannot run a grid-stride loop over constexpr-sized
    blocks, as our kernels and the benchmark's do: triton 3.0-3.6's interpreter turns
    one-element arrays into Python ints, which numpy 2.4 refuses.  The kernels compile on a
    GPU either way (tests/gpu)."""
    if not _interpreter_runs_grid_stride_loops():
        import numpy

        pytest.skip(
            f"this triton's interpreter cannot run a grid-stride loop with numpy {numpy.__version__} "
            "(triton < 3.7 with numpy 2.4+); pip install 'numpy<2.4' to run it"
        )
