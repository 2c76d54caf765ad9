"""Every benchmarker cleanflush patches, as data: the one place that names them.

A target's patch module is imported only when one of its trigger modules is imported (its
``apply`` and ``revert`` are ``"module:function"`` strings, as in wrapt's post-import hooks),
so ``import cleanflush`` loads no patch code and neither torch nor triton.  Adding a harness is
a patch module with ``apply() -> list[Site]`` and ``revert()``, plus one entry below.
"""

from __future__ import annotations

from dataclasses import dataclass

PATCHES = "cleanflush.patches"


@dataclass(frozen=True)
class Target:
    name: str  # as CLEANFLUSH_DISABLE and `cleanflush status --check` name it
    title: str  # its status row before anything of it is imported
    # the first one installed gives the version status reports; none: a script's own module
    distributions: tuple[str, ...]
    triggers: tuple[str, ...]  # importing any of these applies the patch
    apply: str  # "module:function" -> list[Site]; may be called once per trigger (idempotent)
    revert: str  # "module:function": put back every object apply replaced
    # "module:function" -> list[Site] computed at status time from other targets' state
    derived: str | None = None
    # what `cleanflush status` imports to tell whether the target would be patched here
    # (empty: the harness is reported as patched when imported, without importing it)
    probe: tuple[str, ...] = ()

    @property
    def module(self) -> str:
        return self.apply.partition(":")[0]


def _target(
    name: str,
    title: str,
    distributions: tuple[str, ...],
    triggers: tuple[str, ...],
    module: str,
    derived: bool = False,
    probe: tuple[str, ...] = (),
) -> Target:
    path = f"{PATCHES}.{module}"
    return Target(
        name,
        title,
        distributions,
        triggers,
        f"{path}:apply",
        f"{path}:revert",
        f"{path}:derived" if derived else None,
        probe,
    )


# The benchmarkers, then the harnesses; status lists them in this order.
TARGETS = (
    _target(
        "triton",
        "triton",
        ("triton", "pytorch-triton"),
        (
            "triton.backends",
            "triton.backends.nvidia.driver",
            "triton.backends.amd.driver",
            "triton.testing",
            "triton.runtime.autotuner",
        ),
        "triton",
        derived=True,
        probe=("triton", "triton.testing"),
    ),
    _target(
        "inductor",
        "torch._inductor",
        ("torch",),
        ("torch._inductor.runtime.benchmarking", "torch._inductor.utils"),
        "inductor",
        derived=True,
        probe=("torch._inductor.runtime.benchmarking", "torch._inductor.utils"),
    ),
    _target(
        "tritonbench",
        "tritonbench.components.do_bench.run profiler timer",
        ("tritonbench",),
        ("tritonbench.components.do_bench.run",),
        "tritonbench",
    ),
    _target(
        "tilelang",
        "tilelang.profiler",
        ("tilelang",),
        ("tilelang.profiler.bench", "tilelang.profiler._torch_gpu"),
        "tilelang",
    ),
    _target(
        "flashinfer",
        "flashinfer.testing.utils",
        ("flashinfer-python",),
        ("flashinfer.testing.utils", "flashinfer.testing"),
        "flashinfer",
    ),
    _target(
        "deep-gemm",
        "deep_gemm.testing.bench.bench_kineto",
        ("deep_gemm",),
        ("deep_gemm.testing.bench", "deep_gemm.testing"),
        "deep_gemm",
    ),
    _target("sglang", "sglang.srt.bench_utils.bench_kineto", ("sglang",), ("sglang.srt.bench_utils",), "sglang"),
    _target(
        "kernelbench", "kernelbench.timing.clear_l2_cache", ("kernelbench",), ("kernelbench.timing",), "kernelbench"
    ),
    _target(
        "sol-execbench",
        "sol_execbench.core.bench.timing._clear_cache",
        ("sol-execbench",),
        ("sol_execbench.core.bench.timing",),
        "sol_execbench",
    ),
    _target("deep-ep", "deep_ep.utils.testing.flush_l2_cache", ("deep_ep",), ("deep_ep.utils.testing",), "deep_ep"),
    _target(
        "cute-dsl",
        "cutlass.testing (CuTe DSL autotuner)",
        ("nvidia-cutlass-dsl",),
        ("cutlass.testing",),
        "cute_dsl",
    ),
    # scripts' own top-level modules, not packages: nothing to find installed
    _target("gpu-mode", "utils.clear_l2_cache (GPU MODE eval.py)", (), ("utils",), "gpu_mode"),
    _target("tilegym", "bench_utils.profile_with_l2flush (TileGym)", (), ("bench_utils",), "tilegym"),
    _target("thunderkittens", "common.benchmark_l2_clear (ThunderKittens)", (), ("common",), "thunderkittens"),
)
NAMES = tuple(target.name for target in TARGETS)
BY_NAME = {target.name: target for target in TARGETS}


def name_of(patch_module: str) -> str:
    """The target a patch module (its ``__name__``) applies: patch modules name themselves
    through this, so that each target's name is written here alone."""
    return next(target.name for target in TARGETS if target.module == patch_module)
