"""Stand-ins for the harnesses that do not install from the package index, each the part of
the real file that matters to the patch, at the commit it was read at:

* KernelBench, ScalingIntelligence/KernelBench 0de4ce8, src/kernelbench/timing.py;
* SOL-ExecBench, NVIDIA/SOL-ExecBench 2f55c0f, src/sol_execbench/core/bench/timing.py;
* DeepEP, deepseek-ai/DeepEP 855fa9d, deep_ep/utils/testing.py;
* DeepGEMM, deepseek-ai/DeepGEMM 54e2261, deep_gemm/testing/bench.py (star-imported by
  deep_gemm/testing/__init__.py), and SGLang, sgl-project/sglang 126a97f,
  python/sglang/srt/bench_utils.py: ``bench_kineto``'s signature, its first unflushed call
  and its 8 GB inline write before each profiled call (the profiler and the table parsing
  left out);
* tritonbench, meta-pytorch/tritonbench 2cd46d0, tritonbench/components/do_bench/run.py:
  the kernel-name filter of ``_do_bench_profiler`` (``evt.name != CACHE_CLEAR_KERNEL``), and
  the later layout in the search index (``not _is_cache_clear_kernel(evt.name)``).

* GPU MODE, gpu-mode/reference-kernels f83cb92, problems/nvidia/utils.py (``utils``, a
  script's top-level module): ``set_seed`` and the two flushes; TileGym, NVIDIA/TileGym
  28ab0a2, tests/benchmark/bench_utils.py (``bench_utils``): ``profile_with_l2flush``
  without the profiler; ThunderKittens, HazyResearch/ThunderKittens b12a915,
  kernels/parallel/common.py (``common``): ``benchmark_l2_clear``'s event path without the
  events.  Their writes are the real ones, on ``DEVICE`` (the CPU here; "cuda" in the GPU
  tests), and TileGym's L2 is ``L2`` bytes where there is no CUDA device.

KernelBench, SOL-ExecBench, DeepEP, DeepGEMM, tritonbench and the scripts are git-only; SGLang's package
pulls a serving stack.  Devices are the CPU here.
"""

from __future__ import annotations

MODULE_FUNCTIONS = {
    "kernelbench/timing.py": """
        import torch

        def clear_l2_cache(device="cuda"):
            dummy = torch.empty((32, 1024, 1024), dtype=torch.int64, device=device)
            dummy.fill_(42)
            del dummy

        def time_execution_with_cuda_event(kernel_fn, args, num_trials=3, device="cpu"):
            for _ in range(num_trials):
                clear_l2_cache(device=device)  # measuring cold cache performance
                kernel_fn(*args)
        """,
    "sol_execbench/core/bench/timing.py": """
        import torch

        def _get_empty_cache_for_benchmark(device):
            return torch.empty(2 * 1024 * 1024, dtype=torch.int8, device=device)

        def _clear_cache(cache):
            cache.zero_()

        def bench_time_with_cuda_events(fn, rep=3, device="cpu"):
            cache = _get_empty_cache_for_benchmark(device)
            for _ in range(rep):
                _clear_cache(cache)
                fn()
        """,
    "deep_ep/utils/testing.py": """
        import torch

        def flush_l2_cache(enabled=True):
            l2_flush_cache_size = 256e6
            if enabled:
                torch.empty(int(l2_flush_cache_size // 4), dtype=torch.int, device="cpu").zero_()

        def bench(fn, num_tests=3, flush_l2=True):
            for _ in range(num_tests):
                flush_l2_cache(flush_l2)
                fn()
        """,
}

BENCH_KINETO = """
    import torch

    def bench_kineto(fn, kernel_names, num_tests: int = 30, suppress_kineto_output: bool = False,
                     trace_path: str = None, flush_l2: bool = True, with_multiple_kernels: bool = False,
                     {extra}):
        flush_l2_size = int(8e9 // 4)
        fn()
        for i in range(2):
            for _ in range(num_tests):
                if flush_l2:
                    torch.empty(flush_l2_size, dtype=torch.int, device={quote}cuda{quote}).zero_()
                fn()
        return 1
"""
KINETO = {
    "deep_gemm/testing/bench.py": BENCH_KINETO.format(extra="barrier=None", quote="'"),
    "deep_gemm/testing/__init__.py": "from . import bench\nfrom .bench import *\n",
    "sglang/srt/bench_utils.py": BENCH_KINETO.replace("{extra}):", "):").format(quote='"'),
}

FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >"
    "(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)"
)
TRITONBENCH_EXACT = f'''
CACHE_CLEAR_KERNEL = "{FILL}"

def counted(names):  # the filter of _do_bench_profiler's _trace_handler
    return [name for name in names if name != CACHE_CLEAR_KERNEL]
'''
TRITONBENCH_SUBSTRING = f'''
CACHE_CLEAR_KERNEL = "{FILL}"

def _is_cache_clear_kernel(name: str) -> bool:
    return "vectorized_elementwise_kernel" in name and "FillFunctor" in name

def counted(names):
    return [name for name in names if not _is_cache_clear_kernel(name)]
'''
TRITONBENCH = {
    "exact": {"tritonbench/components/do_bench/run.py": TRITONBENCH_EXACT},
    "substring": {"tritonbench/components/do_bench/run.py": TRITONBENCH_SUBSTRING},
}

SCRIPTS = {
    "utils.py": """
        import random
        import torch

        DEVICE = "cuda"

        def set_seed(seed=42):
            random.seed(seed)
            torch.manual_seed(seed)

        def clear_l2_cache():
            dummy = torch.randn((1024, 1024, 1024), device=DEVICE)
            del dummy

        def clear_l2_cache_large():
            dummy = torch.randn((16000, 1024, 1024), device=DEVICE)
            del dummy
        """,
    "bench_utils.py": """
        import torch

        DEVICE = "cpu"
        L2 = 1 << 20

        def profile_with_l2flush(fn, warmup=20, rep=100):
            if DEVICE == "cpu":
                l2_size = L2
            else:
                l2_size = torch.cuda.get_device_properties(0).L2_cache_size
            l2_flush = torch.empty(l2_size // 4, dtype=torch.float32, device=DEVICE)
            for _ in range(warmup):
                fn()
            for _ in range(rep):
                l2_flush.zero_()
                fn()
        """,
    "common.py": """
        import torch

        DEVICE = "cpu"

        def benchmark_l2_clear(func, num_warmup_iters=1, num_iters=5, single=False, use_events=True):
            for _ in range(num_warmup_iters):
                func()
            l2_cache = torch.empty(1024 * 1024 * 128 // 2, dtype=torch.bfloat16, device=DEVICE)
            for i in range(num_iters):
                l2_cache.random_(0, 100)
                func()
        """,
}

ALL = {**MODULE_FUNCTIONS, **KINETO, **TRITONBENCH["substring"], **SCRIPTS}
