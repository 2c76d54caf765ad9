"""Run inside one version pairing's environment; print one JSON record of what cleanflush does
there.  Started by matrix/run.py in a fresh interpreter (no CLEANFLUSH in the environment)."""

import importlib
import json
import os
import subprocess
import sys
import warnings

warnings.simplefilter("ignore")
record = {"python": sys.version.split()[0], "errors": []}

# What the user imported first, then cleanflush (installed on import); the CLEANFLUSH=1 probe
# below covers the other order, with cleanflush in place before anything it patches.
MODULES = ("triton", "triton.testing", "torch._inductor.runtime.benchmarking", "torch._inductor.utils")
for module in MODULES:
    try:
        importlib.import_module(module)
    except Exception as exc:
        record["errors"].append(f"import {module}: {exc!r}")

import torch  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

import cleanflush  # noqa: E402
from cleanflush import _patching as patching  # noqa: E402
from cleanflush.patches import triton as triton_patch  # noqa: E402

record["torch"] = torch.__version__
record["triton"] = getattr(sys.modules.get("triton"), "__version__", None)
record["targets"] = [row.as_dict() for row in cleanflush.status()]


class Ops(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in ("zero_", "sum", "neg"):
            self.names.append(name)
        return func(*args, **(kwargs or {}))


# 1. every patched attribute is restored exactly, and wrapped again on install
patches = list(patching.patch_set("triton")) + list(patching.patch_set("inductor"))
originals = [(p.owner, p.name, p.original) for p in patches]
record["patched_attributes"] = sorted(
    f"{getattr(o, '__qualname__', getattr(o, '__name__', o))}.{n}" for o, n, _ in originals
)
cleanflush.uninstall()
record["restored_exactly"] = all(vars(o)[n] is orig for o, n, orig in originals)
cleanflush.install()
record["rewrapped"] = all(getattr(vars(o)[n], "__wrapped__", None) is orig for o, n, orig in originals)

# 2. the flush sequence on CPU tensors, per policy
from cleanflush import _flush  # noqa: E402

_flush.prepare(torch.device("cpu"))  # the one allocation, outside the recorded sequence
sequences = {}
for label, cls in triton_patch.driver_classes():
    clear_owner = patching.defining_class(cls, "clear_cache")
    empty_owner = patching.defining_class(cls, "get_empty_cache_for_benchmark")
    if clear_owner and patching.our_patch(clear_owner, "clear_cache"):

        def run(cache, cls=cls):
            object.__new__(cls).clear_cache(cache)
    elif empty_owner and patching.our_patch(empty_owner, "get_empty_cache_for_benchmark"):

        def run(cache, cls=cls):
            # triton 3.2: do_bench takes the tensor from the patched get_empty_cache_for_benchmark
            # and zeroes it inline; its CUDA allocation is stood in for by this CPU tensor
            real_empty = torch.empty
            torch.empty = lambda *args, **kwargs: cache
            try:
                flushed = object.__new__(cls).get_empty_cache_for_benchmark()
            finally:
                torch.empty = real_empty
            flushed.zero_()
    else:
        continue
    for policy in cleanflush.POLICIES:
        with cleanflush.policy(policy), Ops() as ops:
            run(torch.zeros(64, dtype=torch.int32))
        sequences[f"{label} | {policy}"] = ops.names
testing = sys.modules.get("triton.testing")
do_bench_patch = patching.our_patch(testing, "do_bench") if testing is not None else None
if do_bench_patch is not None and triton_patch._has_inline_flush(do_bench_patch.original):
    # triton 3.0-3.1 (3.2+ wrap do_bench for the hold's bound only): the real do_bench on CPU.
    # 3.1 asks the device interface (CPU has one); 3.0 calls torch.cuda and allocates on
    # "cuda": those are stood in for.
    import inspect

    class CpuEvent:
        def __init__(self, enable_timing=True):
            pass

        def record(self):
            pass

        def elapsed_time(self, end):
            return 1.0

    x = torch.ones(4)
    on_cpu = "device_type" in inspect.signature(testing.do_bench).parameters
    if on_cpu:
        from torch._dynamo import device_interface

        try:
            device_interface.get_interface_for_device("cpu")
        except NotImplementedError:  # torch < 2.6 has no CPU device interface: a stand-in

            class CpuInterface(device_interface.DeviceInterface):
                @staticmethod
                def synchronize(device=None):
                    pass

            CpuInterface.Event = CpuEvent  # set after: its metaclass wants a torch event class
            device_interface.register_interface_for_device("cpu", CpuInterface)
    real = torch.empty, torch.cuda.synchronize, torch.cuda.Event
    if not on_cpu:
        torch.empty = lambda *a, **k: real[0](*a, **{**k, "device": "cpu"})
        torch.cuda.synchronize, torch.cuda.Event = (lambda *a: None), CpuEvent
    # the autotuner of 3.0-3.1 calls the name its module imported (``from ..testing import do_bench``)
    callers = {"triton.testing.do_bench": testing}
    autotuner = sys.modules.get(triton_patch.AUTOTUNER)
    if autotuner is not None and callable(vars(autotuner).get("do_bench")):
        callers["triton.runtime.autotuner.do_bench"] = autotuner
    try:
        for label, caller in callers.items():
            for policy in cleanflush.POLICIES:
                with cleanflush.policy(policy), Ops() as ops:
                    caller.do_bench(lambda: torch.neg(x), warmup=1, rep=1, **({"device_type": "cpu"} if on_cpu else {}))
                # the flush before each call, once per call after the first (which has none)
                chunks, chunk = [], []
                for name in ops.names[1:]:
                    if name == "neg":
                        chunks.append(chunk)
                        chunk = []
                    else:
                        chunk.append(name)
                unique = {tuple(c) for c in chunks if c}  # empty: its warm-up calls, unflushed by design
                sequences[f"{label} | {policy}"] = list(unique.pop()) if len(unique) == 1 else sorted(unique)
    finally:
        torch.empty, torch.cuda.synchronize, torch.cuda.Event = real
benchmarking = sys.modules.get("torch._inductor.runtime.benchmarking")
bench_cls = getattr(benchmarking, "InductorBenchmarker", None)
if bench_cls is not None and patching.our_patch(bench_cls, "benchmark_gpu"):
    import inspect

    if "device_type" in inspect.signature(bench_cls.benchmark_gpu).parameters:
        x = torch.ones(4)
        for policy in cleanflush.POLICIES:
            with cleanflush.policy(policy), Ops() as ops:
                bench_cls().benchmark_gpu(
                    lambda: torch.neg(x),
                    device_type="cpu",
                    benchmark_iters=2,
                    memory_warmup_iters=1,
                    estimation_iters=1,
                )
            sequences[f"InductorBenchmarker | {policy}"] = ops.names
    else:
        sequences["InductorBenchmarker"] = "no device_type argument: needs a GPU to run"
record["sequences"] = sequences

# 3. CLEANFLUSH=1 alone (no import of cleanflush) patches the same attributes
probe = """
import importlib, json, sys, warnings
warnings.simplefilter("ignore")
for m in %r:
    try: importlib.import_module(m)
    except Exception: pass
from cleanflush._patching import patch_set
print(json.dumps(sorted(f"{getattr(p.owner, '__qualname__', getattr(p.owner, '__name__', p.owner))}.{p.name}"
                        for p in list(patch_set("triton")) + list(patch_set("inductor")))))
""" % (MODULES,)
env = dict(os.environ, CLEANFLUSH="1")
child = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=600)
try:
    record["env_switch_patched"] = json.loads(child.stdout.strip().splitlines()[-1])
except Exception:
    record["env_switch_patched"] = None
    record["errors"].append(f"CLEANFLUSH=1 probe: {child.stderr.strip()[-300:]}")
record["env_switch_matches"] = record["env_switch_patched"] == record["patched_attributes"]
print(json.dumps(record))
