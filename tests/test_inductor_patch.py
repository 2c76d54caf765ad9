"""The Inductor patch, against the installed torch's real benchmarker classes on CPU."""

import os
import subprocess
import sys
import types
import warnings

import pytest
import torch
import wrapt

benchmarking = pytest.importorskip("torch._inductor.runtime.benchmarking")
from torch._dynamo.utils import counters  # noqa: E402
from torch._inductor import utils as inductor_utils  # noqa: E402

import cleanflush  # noqa: E402
from cleanflush import _flush, _hold, _state  # noqa: E402
from cleanflush.patches import inductor as inductor_patch  # noqa: E402

from .conftest import run_python  # noqa: E402
from .ops import OpRecorder, overlaps  # noqa: E402

InductorBenchmarker = benchmarking.InductorBenchmarker
record_function = torch.autograd.profiler.record_function


TORCH = tuple(int(part) for part in torch.__version__.split("+")[0].split(".")[:2])
# What each torch offers, read off its source, not detected the way the patch detects it
# (a wrong detection must fail here): InductorBenchmarker since 2.7; device_type, the
# TorchProfilerBenchmarker and utils' named profiler region since 2.13.
HAS_DEVICE_TYPE = HAS_PROFILER_BENCH = HAS_UTILS_REGION = TORCH >= (2, 13)
needs_cpu_device_type = pytest.mark.skipif(
    not HAS_DEVICE_TYPE, reason="benchmark_gpu takes no device_type before torch 2.13: GPU tests only"
)
needs_profiled = pytest.mark.skipif(not HAS_PROFILER_BENCH, reason="no profiled benchmarkers before torch 2.13")


def targets():
    """What this torch offers to patch."""
    found = {(InductorBenchmarker, "benchmark_gpu"), (InductorBenchmarker, "get_event_pairs")}
    if HAS_PROFILER_BENCH:
        found.add((benchmarking.TorchProfilerBenchmarker, "benchmark_gpu"))
    if HAS_UTILS_REGION:
        found.add((inductor_utils, "_do_bench_using_profiling"))
    if HAS_PROFILER_BENCH or HAS_UTILS_REGION:
        found.add((record_function, "__enter__"))
    return found


def bench_on_cpu(policy="write-read", iters=3):
    x = torch.ones(8)
    _flush.prepare(torch.device("cpu"))
    with cleanflush.policy(policy), OpRecorder() as rec:
        InductorBenchmarker().benchmark_gpu(
            lambda: torch.neg(x), device_type="cpu", benchmark_iters=iters, memory_warmup_iters=2
        )
    return rec


def test_every_target_is_wrapped():
    for owner, name in targets():
        assert isinstance(vars(owner)[name], wrapt.FunctionWrapper), (owner, name)


@needs_cpu_device_type
def test_read_sits_between_the_inline_write_and_each_timed_call():
    rec = bench_on_cpu()
    names = rec.names
    # warm-up call, buffer allocation and first zero_, then 5 estimation + 3 timed iterations
    timed = [i for i, n in enumerate(names) if n == "neg"][1:]
    assert len(timed) == 5 + 3
    buffer = next(args[0] for name, args, _ in rec.ops if name == "zero_")
    for i in timed:
        assert names[i - 2 : i] == ["zero_", "sum"], names
        data = rec.ops[i - 1][1][0]
        assert data.dtype == torch.float32 and not overlaps(data, buffer)
    assert names.count("sum") == 8  # nothing added to the memory warm-up or elsewhere


@needs_cpu_device_type
def test_write_policy_is_stock_and_read_runs_as_write_read():
    assert "sum" not in bench_on_cpu("write").names
    before = cleanflush.flush_counts().get(("InductorBenchmarker.benchmark_gpu", "write-read"), 0)
    rec = bench_on_cpu("read")
    assert rec.names.count("sum") == 8
    assert cleanflush.flush_counts()[("InductorBenchmarker.benchmark_gpu", "write-read")] == before + 8


@needs_cpu_device_type
def test_upstream_decorators_and_counters_still_run():
    key = "benchmarking.InductorBenchmarker.benchmark_gpu"
    before = counters["inductor"][key]
    bench_on_cpu()
    assert counters["inductor"][key] == before + 1


@needs_cpu_device_type
def test_the_inductor_benchmarkers_loop_holds_to_the_queued_bound_as_do_bench_does():
    """Its loop queues every call and synchronizes once (torch 2.13 benchmarking.py): every
    timed call, the flush before it included, runs under the long bound."""
    bounds = []

    def timed():
        bounds.append(_hold.bound_ns())

    def bench():
        bounds.clear()
        InductorBenchmarker().benchmark_gpu(timed, device_type="cpu", benchmark_iters=3, memory_warmup_iters=2)
        return set(bounds), len(bounds)

    assert bench() == ({_hold.QUEUED_HOLD_NS}, 1 + 5 + 3)
    assert _hold.bound_ns() == _hold.HOLD_NS  # the loop ends with the call
    cleanflush.uninstall()  # the negative control: the stock benchmarker, the stock bound
    assert bench() == ({_hold.HOLD_NS}, 1 + 5 + 3)


@needs_cpu_device_type
def test_event_pairs_outside_a_benchmark_are_plain():
    pairs = InductorBenchmarker().get_event_pairs(2, device_type="cpu")
    assert not any(isinstance(start, wrapt.ObjectProxy) for start, _ in pairs)


# The profiled benchmarker cuts ``rep`` to fit max_benchmark_duration (25 ms) by its own
# estimate of a call; on a loaded CPU that estimate grows and the test would see fewer
# profiled calls than it asked for.  A budget no estimate reaches keeps every rep.
EVERY_REP = {"max_benchmark_duration": 10**9}


class ProfiledOnCpu:
    """Stand-ins for the CUDA-only parts of the profiled benchmarkers, so the real ones run
    on CPU: the profiler is asked for CPU activity twice (CPU, then the device's, which is
    CPU here), and torch.profiler refuses a duplicate; ``get_gpu_type`` says "cpu".  Keeps
    each profile so the test can look at what it recorded."""

    def __init__(self, monkeypatch):
        self.profiles = []
        real = torch.profiler.profile

        def profile(activities, **kwargs):
            prof = real(activities=list(dict.fromkeys(activities)), **kwargs)
            self.profiles.append(prof)
            return prof

        monkeypatch.setattr(torch.profiler, "profile", profile)
        monkeypatch.setattr(inductor_utils, "get_gpu_type", lambda: "cpu")

    def reads_inside(self, region):
        """(reads inside ``region`` intervals, reads outside, region intervals) of the last
        profile, by the CPU events' own timestamps."""
        events = self.profiles[-1].profiler.kineto_results.events()
        spans = [(e.start_ns(), e.end_ns()) for e in events if e.name() == region]
        sums = [e.start_ns() for e in events if e.name() == "aten::sum"]
        inside = sum(any(a <= t <= b for a, b in spans) for t in sums)
        return inside, len(sums) - inside, len(spans)


def x_plus_one():
    return torch.neg(torch.ones(8))


@needs_profiled
@pytest.mark.parametrize("policy", ["write-read", "read"])
def test_torch_profiler_benchmarker_reads_before_its_region_opens(monkeypatch, policy):
    profiled = ProfiledOnCpu(monkeypatch)
    _flush.prepare(torch.device("cpu"))
    with cleanflush.policy(policy), OpRecorder() as rec:
        benchmarking.TorchProfilerBenchmarker().benchmark_gpu(
            x_plus_one, device_type="cpu", rep=4, estimation_iters=2, memory_warmup_iters=1, **EVERY_REP
        )
    names = rec.names
    # warm-up call; allocation and first zero_; 2 estimation + 1 memory warm-up + 4 profiled
    timed = [i for i, n in enumerate(names) if n == "neg"][1:]
    assert len(timed) == 2 + 4
    for i in timed:
        assert names[i - 2 : i] == ["zero_", "sum"], names
    assert names.count("sum") == 6  # none added to the memory warm-up
    inside, outside, regions = profiled.reads_inside(benchmarking._CALLABLE_PROFILE_EVENT_NAME)
    assert (inside, outside, regions) == (0, 4, 4)  # never timed as part of the callable
    key = ("TorchProfilerBenchmarker.benchmark_gpu", "write-read")
    assert cleanflush.flush_counts() == {key: 6}


@needs_profiled
def test_the_profiler_benchmarker_keeps_the_short_bound(monkeypatch):
    """Its timings are the kernels' own, by the profiler: no host time between calls reaches them."""
    ProfiledOnCpu(monkeypatch)
    bounds = []
    benchmarking.TorchProfilerBenchmarker().benchmark_gpu(
        lambda: bounds.append(_hold.bound_ns()), device_type="cpu", rep=2, estimation_iters=2, **EVERY_REP
    )
    assert len(bounds) == 1 + 2 + 2 and set(bounds) == {_hold.HOLD_NS}


@needs_profiled
def test_do_bench_using_profiling_reads_before_its_region_opens(monkeypatch):
    profiled = ProfiledOnCpu(monkeypatch)
    _flush.prepare(torch.device("cpu"))
    with OpRecorder() as rec:
        inductor_utils._do_bench_using_profiling(x_plus_one, warmup=1, rep=1, is_vetted_benchmarking=True)
    names = rec.names
    repeats = profiled.reads_inside(inductor_utils._DO_BENCH_PROFILE_EVENT_NAME)
    inside, outside, regions = repeats
    assert regions >= 1 and (inside, outside) == (0, regions)
    # the profiled loop: zero_, our read, the timed call; the estimation loop is left stock
    assert names.count("sum") == regions
    last = len(names) - 1 - names[::-1].index("sum")
    assert names[last - 1 : last + 2] == ["zero_", "sum", "neg"], names
    key = ("torch._inductor.utils._do_bench_using_profiling", "write-read")
    assert cleanflush.flush_counts() == {key: regions}


@needs_profiled
def test_other_record_function_regions_get_no_read(monkeypatch):
    # the same benchmark, but the callable opens a region of its own: only the benchmark's
    # region is preceded by a read
    profiled = ProfiledOnCpu(monkeypatch)

    def fn():
        with record_function("some user region"):
            return x_plus_one()

    _flush.prepare(torch.device("cpu"))
    with OpRecorder() as rec:
        benchmarking.TorchProfilerBenchmarker().benchmark_gpu(
            fn, device_type="cpu", rep=3, estimation_iters=1, memory_warmup_iters=0, **EVERY_REP
        )
    assert rec.names.count("sum") == 1 + 3
    assert profiled.reads_inside("some user region")[:2] == (0, 3)
    with OpRecorder() as rec, record_function(benchmarking._CALLABLE_PROFILE_EVENT_NAME):
        x_plus_one()  # the region's name, outside a benchmark: nothing to flush for
    assert rec.names == ["neg"]


def test_uninstall_restores_exact_objects():
    originals = {(o, n): vars(o)[n].__wrapped__ for o, n in targets()}
    cleanflush.uninstall()
    for (owner, name), original in originals.items():
        assert vars(owner)[name] is original, (owner, name)
    if HAS_DEVICE_TYPE:
        assert "sum" not in bench_on_cpu().names
    cleanflush.install()
    for (owner, name), original in originals.items():
        assert vars(owner)[name].__wrapped__ is original


def test_status_lists_each_inductor_target():
    rows = {row.target: row for row in cleanflush.status() if row.name == "inductor"}
    assert rows["InductorBenchmarker.benchmark_gpu"].patched
    assert rows["TritonBenchmarker.benchmark_gpu"].patched
    utils_row = rows["torch._inductor.utils._do_bench_using_profiling"]
    assert utils_row.patched == HAS_UTILS_REGION
    if not HAS_UTILS_REGION:
        assert utils_row.state == "unsupported"
    assert ("TorchProfilerBenchmarker.benchmark_gpu" in rows) == HAS_PROFILER_BENCH
    if HAS_PROFILER_BENCH:
        assert rows["TorchProfilerBenchmarker.benchmark_gpu"].patched
    assert "read runs as write-read" in rows["InductorBenchmarker.benchmark_gpu"].detail


def test_unknown_shape_keeps_stock_and_says_why():
    class FakeModule:  # stands in for a future torch whose benchmarker lost get_event_pairs
        class InductorBenchmarker:
            def benchmark_gpu(self):
                return "stock"

    with pytest.warns(RuntimeWarning, match="stock flush is kept"):
        sites = inductor_patch._apply_benchmarking(FakeModule)
    assert "get_event_pairs" not in vars(FakeModule.InductorBenchmarker)
    assert not isinstance(vars(FakeModule.InductorBenchmarker)["benchmark_gpu"], wrapt.FunctionWrapper)
    assert sites == [
        _state.Site(
            "InductorBenchmarker.benchmark_gpu",
            "unsupported",
            "no get_event_pairs/benchmark_gpu on InductorBenchmarker; stock flush kept",
        )
    ]


PROBE = """
import torch._inductor.runtime.benchmarking as b, wrapt
print(type(vars(b.InductorBenchmarker)["benchmark_gpu"]).__name__)
import cleanflush
print(cleanflush.current_policy() if cleanflush.is_installed() else "off")
"""


def test_torch_imported_before_cleanflush():
    child = run_python(
        "import torch._inductor.runtime.benchmarking as b\n"
        "import cleanflush\n"
        "print(type(vars(b.InductorBenchmarker)['benchmark_gpu']).__name__)"
    )
    assert child.stdout.split() == ["FunctionWrapper"], child.stderr


def test_cleanflush_imported_before_torch():
    child = run_python("import cleanflush\n" + PROBE)
    assert child.stdout.split() == ["FunctionWrapper", "write-read"], child.stderr


def test_autotune_subprocess_environment_carries_the_policy():
    # Inductor starts its autotuning workers with utils.python_subprocess_env() (2.9+),
    # or as spawn children inheriting os.environ: either way the parent's environment.
    make_env = getattr(inductor_utils, "python_subprocess_env", lambda: dict(os.environ))
    with cleanflush.policy("read"):
        env = make_env()
    child = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300)
    assert child.stdout.split() == ["FunctionWrapper", "read"], child.stderr


# Every layout the patch tells apart, as a stand-in module holding only the names it looks at
# (read off torch 2.6, 2.9, 2.12 and 2.13; matrix/ runs the real ones).  Each row word for word.

READ_NOTE = "policy read runs as write-read here: the stock write is inline"
# The benchmarker's loop queues every call, as do_bench's: the long bound (1 ms), word for word.
INDUCTOR_ROW = (
    "read after the inline L2-sized zero_(), before each start event; its loop queues every call, "
    f"so its reads may hold the GPU up to 1000 us for a host slower per call; {READ_NOTE}"
)


def stand_in(**names):
    """A module of those names, in sys.modules (the patch asks upstream's default device
    function of the module by name, at call time)."""
    module = types.ModuleType(f"stand_in_{len(STAND_INS)}")
    vars(module).update(names)
    STAND_INS.append(module)
    sys.modules[module.__name__] = module
    return module


STAND_INS: list = []  # kept for the session: parameters made at collection refer to them


def default_of(active):
    return inductor_patch.upstream_default(*active.default)


def bench_class():
    class Bench:
        def benchmark_gpu(self, *args, **kwargs):
            return inductor_patch._active.get()  # what the patch set up for this call

        def get_event_pairs(self, iters):
            return []

    return Bench


def rows_recorded(apply, module):
    """What applying the patch to ``module`` says of each site, and what it warned."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        sites = apply(module)
    return {s.target: (s.state, s.detail) for s in sites}, [str(w.message) for w in said]


def test_torch_before_2_7_has_no_inductor_benchmarker_and_is_not_news():
    rows, said = rows_recorded(inductor_patch._apply_benchmarking, stand_in(TritonBenchmarker=bench_class()))
    assert rows == {
        "InductorBenchmarker.benchmark_gpu": (
            "unsupported",
            "not in this torch (added in 2.7); TritonBenchmarker is the default",
        )
    }
    assert said == []


def test_torch_2_7_to_2_12_patches_the_inductor_benchmarker_only():
    module = stand_in(InductorBenchmarker=bench_class(), _get_default_gpu_device_type=lambda: "xpu")
    rows, said = rows_recorded(inductor_patch._apply_benchmarking, module)
    assert rows == {
        "InductorBenchmarker.benchmark_gpu": (
            "patched",
            INDUCTOR_ROW,
        )
    }
    assert said == []
    for name in ("benchmark_gpu", "get_event_pairs"):
        assert isinstance(vars(module.InductorBenchmarker)[name], wrapt.FunctionWrapper)
    active = module.InductorBenchmarker().benchmark_gpu(len, device_type="cuda")
    assert active[:3] == ("InductorBenchmarker.benchmark_gpu", None, "cuda")  # one L2 written
    assert default_of(active) == "xpu"  # upstream's own choice, asked at call time
    assert inductor_patch._active.get() is None  # only during the call


@pytest.mark.parametrize("hip, written", [(None, None), ("6.2", 256 << 20)])
def test_the_profiler_benchmarker_and_utils_calls_know_their_write(monkeypatch, hip, written):
    monkeypatch.setattr(torch.version, "hip", hip)
    module = stand_in(
        InductorBenchmarker=bench_class(),
        TorchProfilerBenchmarker=bench_class(),
        _CALLABLE_PROFILE_EVENT_NAME="stand-in callable",
        _get_default_gpu_device_type=lambda: "xpu",
    )
    rows, said = rows_recorded(inductor_patch._apply_benchmarking, module)
    assert rows["TorchProfilerBenchmarker.benchmark_gpu"] == (
        "patched",
        f"read after the inline zero_(), outside the profiled 'stand-in callable' region; {READ_NOTE}",
    )
    active = module.TorchProfilerBenchmarker().benchmark_gpu(len)
    assert active[:3] == ("TorchProfilerBenchmarker.benchmark_gpu", written, None) and default_of(active) == "xpu"
    utils = stand_in(
        _do_bench_using_profiling=lambda fn: inductor_patch._active.get(),
        _DO_BENCH_PROFILE_EVENT_NAME="stand-in do_bench",
        get_gpu_type=lambda: "mtia",
    )
    rows_recorded(inductor_patch._apply_utils, utils)
    active = utils._do_bench_using_profiling(len)
    assert active[:3] == ("torch._inductor.utils._do_bench_using_profiling", 256 * 10**6, None)
    assert default_of(active) == "mtia"


@pytest.mark.parametrize("layout", ["no region name", "benchmark_gpu inherited", "no InductorBenchmarker"])
def test_a_profiler_benchmarker_of_another_layout_is_left_stock_and_said(layout):
    profiler = bench_class()
    names = {
        "TorchProfilerBenchmarker": profiler,
        "_CALLABLE_PROFILE_EVENT_NAME": "_CALLABLE",
        "InductorBenchmarker": bench_class(),
    }
    if layout == "no region name":
        del names["_CALLABLE_PROFILE_EVENT_NAME"]
    elif layout == "benchmark_gpu inherited":
        names["TorchProfilerBenchmarker"] = profiler = type("Sub", (bench_class(),), {})
    else:
        del names["InductorBenchmarker"]
    rows, said = rows_recorded(inductor_patch._apply_benchmarking, stand_in(**names))
    target = "TorchProfilerBenchmarker.benchmark_gpu"
    assert rows[target] == ("unsupported", "unknown TorchProfilerBenchmarker layout; stock flush kept")
    assert said == [f"cleanflush: {target}: unknown TorchProfilerBenchmarker layout; its stock flush is kept"]
    assert not isinstance(vars(profiler).get("benchmark_gpu"), wrapt.FunctionWrapper)


@pytest.mark.parametrize(
    "layout, row",
    [
        (
            {"do_bench_using_profiling": len},
            "torch < 2.10 inlines the flush in do_bench_using_profiling, "
            "which call sites import by name; stock flush kept",
        ),
        (
            {"_do_bench_using_profiling": len},
            "this torch's _do_bench_using_profiling has no named profiler "
            "region to put the read in front of (torch 2.13 has one); stock flush kept",
        ),
        (
            {"_do_bench_using_profiling": len, "do_bench_using_profiling": len},
            "this torch's _do_bench_using_profiling has no named profiler region to put the read in front "
            "of (torch 2.13 has one); stock flush kept",
        ),
        (
            {"_do_bench_using_profiling": len, "_DO_BENCH_PROFILE_EVENT_NAME": "_DO_BENCH"},
            f"read after the inline zero_(), outside the profiled region; {READ_NOTE}",
        ),
        ({}, None),
    ],
)
def test_each_utils_layout_gets_its_row_and_no_warning(layout, row):
    module = stand_in(**layout)
    rows, said = rows_recorded(inductor_patch._apply_utils, module)
    target = "torch._inductor.utils._do_bench_using_profiling"
    assert rows == ({} if row is None else {target: ("patched" if row.startswith("read") else "unsupported", row)})
    assert said == []  # a known older torch is not news at every import
    wrapped = isinstance(vars(module).get("_do_bench_using_profiling"), wrapt.FunctionWrapper)
    assert wrapped == (row is not None and row.startswith("read"))


def test_the_rows_of_this_torch_word_for_word():
    rows = {r.target: (r.state, r.detail) for r in cleanflush.status() if r.name == "inductor"}
    expected = {
        "TritonBenchmarker.benchmark_gpu": ("patched", "flushes through triton.testing.do_bench: patched there"),
        "InductorBenchmarker.benchmark_gpu": (
            "patched",
            INDUCTOR_ROW,
        ),
    }
    if HAS_PROFILER_BENCH:
        expected["TorchProfilerBenchmarker.benchmark_gpu"] = (
            "patched",
            f"read after the inline zero_(), outside the profiled '_CALLABLE' region; {READ_NOTE}",
        )
    if HAS_UTILS_REGION:
        expected["torch._inductor.utils._do_bench_using_profiling"] = (
            "patched",
            f"read after the inline zero_(), outside the profiled region; {READ_NOTE}",
        )
    assert rows == expected
    assert {r.version for r in cleanflush.status() if r.name == "inductor"} == {torch.__version__}


def read_sizes(rec):
    return {args[0].nbytes for name, args, _ in rec.ops if name == "sum"}


@needs_profiled
@pytest.mark.parametrize("hip", [None, "6.2"])
def test_each_profiled_benchmarker_reads_what_its_write_left(monkeypatch, hip):
    """What the read covers follows each stock write: one L2 for the profiler benchmarker
    (256 MiB on ROCm), 256e6 bytes for utils; on a CPU (no L2) the rest of Triton's 256 MiB."""
    monkeypatch.setattr(torch.version, "hip", hip)
    cleanflush.uninstall()
    cleanflush.install()  # the profiler benchmarker's write size is read when it is patched
    ProfiledOnCpu(monkeypatch)
    _flush.prepare(torch.device("cpu"))
    with OpRecorder() as rec:
        benchmarking.TorchProfilerBenchmarker().benchmark_gpu(
            x_plus_one, device_type="cpu", rep=2, estimation_iters=1, memory_warmup_iters=0, **EVERY_REP
        )
    assert read_sizes(rec) == {0 if hip else 256 << 20}
    with OpRecorder() as rec:
        inductor_utils._do_bench_using_profiling(x_plus_one, warmup=1, rep=1, is_vetted_benchmarking=True)
    assert read_sizes(rec) == {(256 << 20) - 256 * 10**6}


@needs_profiled
def test_without_a_device_type_the_read_goes_to_upstreams_default_device(monkeypatch):
    """Upstream picks the device type when the caller names none; so must the read in front
    of the profiled region (the event-pair path gets upstream's choice as an argument)."""
    ProfiledOnCpu(monkeypatch)
    monkeypatch.setattr(benchmarking, "_get_default_gpu_device_type", lambda: "cpu")
    _flush.prepare(torch.device("cpu"))
    with OpRecorder() as rec:
        benchmarking.TorchProfilerBenchmarker().benchmark_gpu(
            x_plus_one, rep=2, estimation_iters=1, memory_warmup_iters=0, **EVERY_REP
        )
    assert rec.names.count("sum") == 1 + 2 and read_sizes(rec) == {256 << 20}


# The wrappers themselves, called as wrapt calls them, for what the real benchmarkers of this
# torch never send: a device object, an index, another device argument, other arguments.


def site(device_type=None, default="cpu"):
    module = stand_in(pick=lambda: default)
    return inductor_patch._Site("InductorBenchmarker.benchmark_gpu", None, device_type, (module.__name__, "pick"))


def test_the_read_device_is_the_current_one_of_the_named_type(monkeypatch):
    for named in ("cpu", torch.device("cpu"), None):  # a name, a device, upstream's default
        assert inductor_patch._device(site(), named) == torch.device("cpu")
    monkeypatch.setattr(torch.cpu, "current_device", lambda: 0)  # an index, as torch.cuda's
    assert inductor_patch._device(site(), "cpu") == torch.device("cpu", 0)
    assert inductor_patch._device(site(), torch.device("cpu")) == torch.device("cpu", 0)


def test_no_device_for_the_read_is_said_once_word_for_word(recwarn):
    for _ in range(2):
        assert inductor_patch._device_or_warn(site(), "nosuchdevice") is None
    said = [str(w.message) for w in recwarn]
    assert said == [
        "cleanflush: InductorBenchmarker.benchmark_gpu: no device for the read "
        "(AttributeError(\"module 'torch' has no attribute 'nosuchdevice'\")); stock flush kept"
    ]


class Event:
    def __init__(self):
        self.recorded = []

    def record(self, *args, **kwargs):
        self.recorded.append((args, kwargs))
        return "recorded"


def pairs_inside(active, stock_pairs, **kwargs):
    token = inductor_patch._active.set(active)
    try:
        return inductor_patch._get_event_pairs(lambda *a, **k: stock_pairs, None, (1,), kwargs)
    finally:
        inductor_patch._active.reset(token)


@pytest.mark.parametrize(
    "active, kwargs",
    [
        (site(device_type="nosuchdevice"), {"device_type": "cpu"}),  # the call's own argument wins
        (site(device_type="cpu", default="nosuchdevice"), {}),  # then the benchmark's
        (site(), {}),  # then upstream's default
    ],
)
def test_event_pairs_read_on_the_device_asked_for(active, kwargs):
    start, end = Event(), Event()
    [(proxy, same_end)] = pairs_inside(active, [(start, end)], **kwargs)
    assert isinstance(proxy, wrapt.ObjectProxy) and same_end is end
    _flush.prepare(torch.device("cpu"))
    with OpRecorder() as rec:
        assert proxy.record("stream", flag=True) == "recorded"
    assert rec.names == ["sum"] and start.recorded == [(("stream",), {"flag": True})]


@pytest.mark.parametrize(
    "shape, name",
    [
        (lambda s, e: ((s, e),), "tuple"),
        (lambda s, e: [[s, e]], "list"),
        (lambda s, e: [(s, e, None)], "list"),
        (lambda s, e: None, "NoneType"),
    ],
)
def test_event_pairs_of_any_other_shape_pass_through_and_are_said_once(shape, name, recwarn):
    pairs = shape(Event(), Event())
    assert pairs_inside(site(), pairs, device_type="cpu") is pairs
    said = [str(w.message) for w in recwarn]
    assert said == [
        f"cleanflush: InductorBenchmarker.benchmark_gpu: get_event_pairs returned {name}, not a list "
        "of (start, end) pairs; its stock flush is kept"
    ]


def test_a_region_without_a_name_and_enters_arguments_pass_through():
    calls = []

    def enter(*args, **kwargs):
        calls.append((args, kwargs))
        return "entered"

    token = inductor_patch._active.set(site())
    try:
        assert inductor_patch._record_function_enter(enter, object(), (1,), {"k": 2}) == "entered"
    finally:
        inductor_patch._active.reset(token)
    assert calls == [((1,), {"k": 2})]


def test_the_triton_benchmarker_row_follows_triton():
    from cleanflush import _registry, _targets

    assert inductor_patch.derived() == [
        _state.Site(
            "TritonBenchmarker.benchmark_gpu", "patched", "flushes through triton.testing.do_bench: patched there"
        )
    ]
    _targets.revert(_registry.BY_NAME["triton"])
    assert inductor_patch.derived() == [
        _state.Site(
            "TritonBenchmarker.benchmark_gpu",
            "off",
            "flushes through triton.testing.do_bench: its flush is not patched",
        )
    ]


def test_a_torch_without_the_default_device_function_reads_on_cuda():
    """Before torch named its default GPU type, Inductor's benchmarkers were CUDA only."""
    assert inductor_patch.upstream_default(stand_in().__name__, "_get_default_gpu_device_type") == "cuda"
    assert inductor_patch.upstream_default(stand_in(pick=lambda: "xpu").__name__, "pick") == "xpu"
