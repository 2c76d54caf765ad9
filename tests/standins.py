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

KernelBench, SOL-ExecBench, DeepEP, DeepGEMM and tritonbench are git-only; SGLang's package
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

ALL = {**MODULE_FUNCTIONS, **KINETO, **TRITONBENCH["substring"]}
