"""The harnesses' own timers on the one-row 4096 x 4096 BF16 GEMM, stock (``write``) against
patched, each beside a clean reference timed right after it, 5 interleaved rounds.

References, none of which runs cleanflush code:
* event timers: verify's plain read loop (``_measure.read_flush_reference``: a float32 sum
  of a 256 MiB buffer of its own, start event, call, end event);
* kernel-only timers: the ``bench_kineto`` copies, the same timer with its flush off and
  ``fn`` preceded by that plain 256 MiB sum, so the GEMM's kernels follow a clean read (the
  table picks only the GEMM by name); TileLang's CUPTI timer and TileGym's, the GEMM's
  kernels alone in a profiler session after the plain sum (TileLang's own timer cannot be
  the reference: torch's sum is two kernels, and the gap between them in its flush range
  would be taken off the GEMM);
* loops that sync before every flush and report the mean (GPU MODE's eval.py, the CuTe DSL
  autotuner's timer): the same loop flushed by that plain 256 MiB sum and a 120 us
  ``torch.cuda._sleep`` (no memory traffic).  Their GPU is idle when the flush starts, so
  whatever the host does between the flush's last launch and the timed call's shows in the
  mean unless the flush outlasts it; the plain sum alone does not on slower hosts
  (benchmarks/synced.py).

The harnesses are real files put on PYTHONPATH (not part of this repository); each one that
imports is timed, the others are skipped:

* KernelBench src/kernelbench/timing.py as kernelbench/timing.py; DeepEP
  deep_ep/utils/testing.py as deep_ep/utils/testing.py (empty __init__.py files);
* SOL-ExecBench src/sol_execbench/core/bench/timing.py as sol_execbench/core/bench/timing.py,
  with an io.py next to it defining a ``ShiftingMemoryPoolAllocator`` class (only its
  ``time_runnable`` uses it) and, without cupti-python, a ``cupti`` package whose
  ``__init__.py`` sets ``cupti`` to any object (its event timer needs none);
* flashinfer-python's flashinfer/testing/ (its __init__.py and utils.py) under a flashinfer/
  whose __init__.py is empty and whose utils.py defines ``round_up`` (the one name it takes
  from the compiled package); einops installed;
* DeepGEMM's deep_gemm/testing/bench.py, with deep_gemm/testing/__init__.py doing
  ``from . import bench; from .bench import *`` and an empty deep_gemm/__init__.py;
* tilelang 0.1.15's tilelang/profiler/{bench,torch_bench,wall}.py and tilelang/utils/device.py,
  with empty tilelang/, tilelang/profiler/ and tilelang/utils/ __init__.py files;
* triton 3.1.0's ``do_bench`` (from its triton/testing.py) as triton31_do_bench.py: this
  machine's triton is newer, so the function is wrapped with the triton patch's 3.0-3.1
  wrapper by hand;
* GPU MODE reference-kernels f83cb92 problems/nvidia/utils.py as utils.py (timed with
  eval.py's loop: sync, ``clear_l2_cache()``, events around the call; eval.py reports the
  mean); TileGym 28ab0a2 tests/benchmark/bench_utils.py as bench_utils.py (kernel-only, its
  reference the same profiler loop after the plain read); ThunderKittens b12a915
  kernels/parallel/common.py as common.py;
* NVIDIA/cutlass 7107b05 python/CuTeDSL/cutlass/testing.py as cutlass/testing.py, with
  cutlass/cute/typing.py defining ``Int8``, ``Numeric`` and ``Uint8`` as any object and
  cutlass/utils/__init__.py a ``HardwareInfo`` whose ``get_l2_cache_size_in_bytes`` is
  torch's L2 size (the one method its autotuner's timer calls); cuda-bindings installed.

Run on a GPU with CLEANFLUSH=1 (the autoload patches the harnesses as they are imported);
ROUNDS, ONLY (names, comma-separated) and TILEGYM_REPS narrow it, OUT=file.json keeps the
rounds:

    PYTHONPATH=ext CLEANFLUSH=1 python benchmarks/harness_timing.py

H200 results: the table in docs/harnesses.md (KernelBench 423217d, DeepEP dd758ca,
SOL-ExecBench 8d2237d, flashinfer-python 0.7.4, DeepGEMM 54e2261, tilelang 0.1.15, triton
3.1.0).
"""

import importlib
import os
import statistics
import sys
import warnings

# the harness files on PYTHONPATH, not this folder: ThunderKittens' module is named `common`, as
# is the benchmark suite's (benchmarks/common.py)
here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [path for path in sys.path if os.path.abspath(path or ".") != here]
sys.path.append(os.path.dirname(here))  # the suite's own helpers, as benchmarks.common

# the kernel-only timers profile: let Kineto detach CUPTI after each session, or every later
# launch in this process is slower (pytorch/pytorch#144455)
os.environ.setdefault("TEARDOWN_CUPTI", "1")

import torch  # noqa: E402

import cleanflush  # noqa: E402
from benchmarks.common import spin_cycles_per_us  # noqa: E402
from cleanflush import _measure  # noqa: E402
from cleanflush._stats import central_mean  # noqa: E402

fn, _, _ = _measure.one_row_gemm(4096, 4096)
_measure.warm_up(fn, 1.5)
plain = torch.ones(256 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")  # the references' read


def after_plain_read():
    plain.sum()
    fn()


def event_reference():
    return central_mean(_measure.read_flush_reference(fn, 300))


def gemm_kernel_filter():
    """A name substring of the GEMM's main kernel, as kernel-only timers ask for it."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.key for e in prof.key_averages() if "reduce" not in e.key.lower()]
    return next(n for n in names if any(s in n.lower() for s in ("nvjet", "gemm", "gemv")))[:40]


def optional(module):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        print(f"skipped {module}: {exc}")
        return None


REPS = int(os.environ.get("TILEGYM_REPS", 30))  # a profiler session per rep: slow
BUSY_CYCLES = int(120 * spin_cycles_per_us())


def plain_read_then_busy():
    """The sync loops' reference flush: the plain read, then the GPU kept busy ~120 us without
    memory traffic, so the host's own time before the timed call stays out of the reference."""
    plain.sum()
    torch.cuda._sleep(BUSY_CYCLES)


def kernel_only_after_plain_read(rep=REPS):
    """The GEMM's kernels alone (CUPTI), each call after the plain read: the kernel-only
    timers' reference (TileGym's profiler loop, flushed by the plain read)."""
    times = []
    for _ in range(rep):
        plain.sum()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        times.append(sum(e.device_time_total for e in prof.key_averages() if e.device_time_total > 0))
    return sorted(times)[len(times) // 2]


GEMM = gemm_kernel_filter()
harnesses = {}  # name -> (timer under the active policy, its clean reference)
if kb := optional("kernelbench.timing"):
    harnesses["KernelBench time_execution_with_cuda_event"] = (
        lambda: (
            central_mean(kb.time_execution_with_cuda_event(fn, [], num_warmup=3, num_trials=200, verbose=False)) * 1e3
        ),
        event_reference,
    )
if dep := optional("deep_ep.utils.testing"):
    harnesses["DeepEP bench"] = (lambda: dep.bench(fn, num_warmups=20, num_tests=200)[0] * 1e6, event_reference)
if sol := optional("sol_execbench.core.bench.timing"):
    harnesses["SOL-ExecBench bench_time_with_cuda_events"] = (
        lambda: statistics.median(sol.bench_time_with_cuda_events(fn, warmup=20, rep=300)) * 1e3,
        event_reference,
    )
if fi := optional("flashinfer.testing.utils"):
    harnesses["FlashInfer bench_gpu_time_with_cuda_event"] = (
        lambda: statistics.median(fi.bench_gpu_time_with_cuda_event(fn, dry_run_iters=50, repeat_iters=300)) * 1e3,
        event_reference,
    )
    harnesses["FlashInfer bench_gpu_time_with_cupti (events without cupti-python)"] = (
        lambda: statistics.median(fi.bench_gpu_time_with_cupti(fn, dry_run_iters=50, repeat_iters=300)) * 1e3,
        event_reference,
    )
    harnesses["FlashInfer bench_kineto"] = (
        lambda: fi.bench_kineto(fn, GEMM, num_tests=50, suppress_kineto_output=True) * 1e6,
        lambda: (
            fi.bench_kineto(after_plain_read, GEMM, num_tests=50, suppress_kineto_output=True, flush_l2=False) * 1e6
        ),
    )
if dg := optional("deep_gemm.testing"):
    harnesses["DeepGEMM bench_kineto"] = (
        lambda: dg.bench_kineto(fn, GEMM, num_tests=50, suppress_kineto_output=True) * 1e6,
        lambda: (
            dg.bench_kineto(after_plain_read, GEMM, num_tests=50, suppress_kineto_output=True, flush_l2=False) * 1e6
        ),
    )
if tl := optional("tilelang.profiler.bench"):
    harnesses["TileLang do_bench event"] = (
        lambda: tl.do_bench(fn, backend="event", return_mode="median", _n_warmup=50, _n_repeat=300) * 1e3,
        event_reference,
    )

    harnesses["TileLang do_bench cupti"] = (
        lambda: tl.do_bench(fn, backend="cupti", _n_warmup=50, _n_repeat=300) * 1e3,
        kernel_only_after_plain_read,
    )
if (gm := optional("utils")) and hasattr(gm, "clear_l2_cache"):

    def gpu_mode_eval(flush=None, n=200):  # eval.py's _run_single_benchmark, without its checks
        durations = []
        for _ in range(n):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            (flush or gm.clear_l2_cache)()
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            durations.append(start.elapsed_time(end) * 1e3)
        return statistics.mean(durations)

    # its loop syncs before every flush and reports the mean: the reference is that loop
    harnesses["GPU MODE eval.py loop (utils.clear_l2_cache)"] = (
        gpu_mode_eval,
        lambda: gpu_mode_eval(plain_read_then_busy),
    )
if tg := optional("bench_utils"):
    harnesses["TileGym profile_with_l2flush"] = (
        lambda: tg.profile_with_l2flush(fn, warmup=5, rep=REPS) * 1e3,
        kernel_only_after_plain_read,
    )
if tk := optional("common"):
    harnesses["ThunderKittens benchmark_l2_clear"] = (
        lambda: tk.benchmark_l2_clear(fn, num_warmup_iters=20, num_iters=200, single=True) * 1e3,
        event_reference,
    )
if ct := optional("cutlass.testing"):
    from cuda.bindings import driver

    def cute_loop_reference(n=200):
        """_benchmark_for_autotune's timed loop (its driver calls, a sync per call, the mean),
        flushed by the plain read and a spin: that loop's reference."""
        _, start = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT)
        _, end = driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DEFAULT)
        stream = driver.CUstream(driver.CUstream_flags.CU_STREAM_DEFAULT)
        times = []
        for _ in range(n):
            plain_read_then_busy()
            driver.cuEventRecord(start, stream)
            fn()
            driver.cuEventRecord(end, stream)
            driver.cuEventSynchronize(end)
            times.append(driver.cuEventElapsedTime(start, end)[1])
        driver.cuEventDestroy(start)
        driver.cuEventDestroy(end)
        return sum(times) * 1e3 / len(times)

    harnesses["CuTe DSL _benchmark_for_autotune"] = (
        lambda: ct._benchmark_for_autotune(
            fn, warmup_iterations=20, iterations=200, use_cold_l2=True, print_verbose=False
        ),
        cute_loop_reference,
    )
if t31 := optional("triton31_do_bench"):
    import wrapt

    from cleanflush.patches import triton as triton_patch

    do_bench_31 = wrapt.FunctionWrapper(t31.do_bench, triton_patch._do_bench)
    harnesses["triton 3.1.0 do_bench"] = (lambda: do_bench_31(fn, return_mode="median") * 1e3, event_reference)

print("GEMM kernel filter:", repr(GEMM))
print("patched:", sorted(r.target for r in cleanflush.status() if r.patched and r.name not in ("triton", "inductor")))
rows = {}
with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # FlashInfer's "CUPTI is not installed", per call
    for _ in range(int(os.environ.get("ROUNDS", 5))):
        for name, (measure, reference) in harnesses.items():
            if os.environ.get("ONLY") and not any(part in name for part in os.environ["ONLY"].split(",")):
                continue
            for policy in ("write", "write-read", "read"):
                with cleanflush.policy(policy):
                    t = measure()
                rows.setdefault((name, policy), []).append((t, reference()))
                print(f"{name} {policy}: {t:.2f} us, reference {rows[(name, policy)][-1][1]:.2f} us", flush=True)
# one row per harness and flush: medians over rounds of its time, of the reference, and of
# their ratio (paired per round)
print(f"{'harness':70s} {'flush':10s} {'median us':>9s} {'ref us':>7s} {'vs ref':>7s}")
for (name, policy), pairs in rows.items():
    t = statistics.median(p[0] for p in pairs)
    ref = statistics.median(p[1] for p in pairs)
    ratio = statistics.median(p[0] / p[1] for p in pairs)
    print(f"{name:70s} {policy:10s} {t:9.2f} {ref:7.2f} {ratio - 1:+7.1%}")
for name in {name for name, _ in rows}:
    stock = statistics.median(p[0] / p[1] for p in rows[(name, "write")])
    for policy in ("write-read", "read"):
        clean = statistics.median(p[0] / p[1] for p in rows[(name, policy)])
        print(f"{name}: {policy} removed {(stock - clean) / (stock - 1):.0%} of the stock penalty")
print(sorted(cleanflush.flush_counts().items()))
if os.environ.get("OUT"):  # the rounds as measured: [time, reference] per round, in us
    import datetime
    import json
    import subprocess

    driver = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout.split()
    measured = {}
    for (name, policy), pairs in rows.items():
        measured.setdefault(name, {})[policy] = [[round(t, 2), round(ref, 2)] for t, ref in pairs]
    record = {
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(),
        "driver": driver[0] if driver else None,
        "torch": torch.__version__,
        "triton": importlib.import_module("triton").__version__,
        "gemm": GEMM,
        "rounds": measured,
    }
    with open(os.environ["OUT"], "w") as f:
        json.dump(record, f, indent=1)
