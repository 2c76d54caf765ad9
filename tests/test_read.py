"""The clean read on each device (``_read``): its buffer, the named read kernel and its hold
(``_sweep``), how they are built and checked, and what happens where they cannot be."""

import json
import types

import pytest
import torch

import cleanflush
from cleanflush import _flush, _hold, _read

from .conftest import run_python
from .ops import OpRecorder
from .triton_layout import skip_unless_the_interpreter_runs_our_kernels

MiB = 1 << 20
STAND_IN_HANDSHAKE = types.SimpleNamespace(signal="signal")  # pinned memory needs CUDA


def cuda_entry(index=0):
    """A read buffer entry whose buffer stands in for one on ``cuda:index``."""
    return _read.ReadBuffer(types.SimpleNamespace(device=torch.device("cuda", index)), "sink", 0)


# The named read kernel (on CUDA): its sum, its name, and torch's sum where it cannot be built

SWEEP_CHECK = """
import json, torch
from cleanflush import _sweep
out = {}
signal = torch.zeros(2, dtype=torch.int64)
for n in (1, 4095, 4096, 3 * 4096 * 5 + 7):
    data = torch.zeros(n, dtype=torch.float32)  # the read buffer: zeros
    sink = torch.zeros((), dtype=torch.float32)
    sweep = _sweep.build(data, sink, signal, 3)  # compiles, checks itself, leaves the zeros
    out[f"zeros left {n}"] = [float(data.abs().sum()), 0.0]
    out[f"signal left {n}"] = [signal.tolist(), [0, 0]]
    data.copy_(torch.arange(n, dtype=torch.float32) % 7)
    sink.zero_()
    sweep(data, sink, 40 + n)
    out[n] = [float(sink), float(data.sum())]
    out[f"started {n}"] = [signal.tolist(), [0, 40 + n]]  # the read marks its call, the host's count untouched
sink.zero_()
sweep(data[:5000], sink, 3)  # a prefix, as the read after a write asks
out["prefix"] = [float(sink), float(data[:5000].sum())]
print(json.dumps(out))
"""


def test_the_sweep_kernel_sums_every_element_once():
    # Triton's interpreter runs the real kernel on CPU tensors
    skip_unless_the_interpreter_runs_our_kernels()
    child = run_python(SWEEP_CHECK, {"TRITON_INTERPRET": "1"})
    assert child.returncode == 0, child.stderr
    for n, (swept, expected) in json.loads(child.stdout).items():
        assert swept == expected, n


def test_the_sweep_kernel_name_matches_no_name_filter():
    pytest.importorskip("triton")
    from cleanflush import _sweep

    assert _sweep.cleanflush_l2_sweep.fn.__name__ == _read.READ_KERNEL == "cleanflush_l2_sweep"
    # substrings and names that timers look for or drop (harnesses.md): DeepGEMM's and
    # SGLang's bench_kineto tests, tritonbench's CACHE_CLEAR_KERNEL, torch's own kernels
    for name in ("reduce", "gemm", "nvjet", "FillFunctor", "elementwise", "sum", "kernel", "fused", "triton_"):
        assert name.lower() not in _read.READ_KERNEL.lower(), name


def test_read_runs_the_sweep_when_there_is_one(monkeypatch):
    calls = []
    entry = _read.prepare(torch.device("cpu"))
    monkeypatch.setattr(entry, "sweep", lambda data, out, call: calls.append((data, out, call)))
    data = entry.views.span(entry.buffer, 64 * MiB // 4)
    with OpRecorder() as rec:
        entry.read(data, 0, False)
    assert rec.names == []  # not torch's sum
    ((data, out, call),) = calls
    assert data.data_ptr() == entry.buffer.data_ptr() and data.numel() * 4 == 64 * MiB and out is entry.sink
    assert call == 0  # no handshake on CPU


def test_without_a_kernel_the_read_is_torchs_sum_into_the_sink():
    entry = _read.prepare(torch.device("cpu"))
    data = entry.views.span(entry.buffer, 1024)
    data.fill_(2.0)
    try:
        with OpRecorder() as rec:
            entry.read(data, 50_000, False)  # no held kernel: the hold asked for is not there
    finally:
        data.zero_()
    assert rec.names == ["sum"] and rec.ops[0][2]["out"] is entry.sink and float(entry.sink) == 2048.0


def test_read_buffer_is_allocated_from_a_thread_of_its_own(monkeypatch):
    # CUDA-graph trees route the calling thread's allocations into a graph pool while they
    # warm up; the buffer must come from another thread (the GPU proof: the max-autotune
    # test in tests/gpu).  Here: which thread called the allocator.
    import threading

    real_zeros = torch.zeros
    threads = []

    def zeros(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real_zeros(*args, **kwargs)

    monkeypatch.setattr(torch, "zeros", zeros)
    _flush.release()
    _read.prepare(torch.device("cpu"))
    assert threads == ["cleanflush-prepare", "cleanflush-prepare"]


def test_a_forked_child_does_not_touch_the_parents_read_buffers():
    import os

    _read.prepare(torch.device("cpu"))
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its buffers start empty (the parent's pinned signal is not mapped here)
        os.write(write_end, b"1" if not _read.READS.buffers else b"0")
        os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(read_end, 1) == b"1" and _read.READS.buffers  # the parent keeps its own


def test_a_hold_that_cannot_be_built_is_a_status_row_and_no_warning(monkeypatch, recwarn):
    # ROCm, no %globaltimer, an old Triton: every process would say it again
    pytest.importorskip("triton")
    from cleanflush import _sweep

    def broken(*args):
        raise RuntimeError("no %globaltimer\nmore lines")

    monkeypatch.setattr(_hold, "Handshake", lambda: STAND_IN_HANDSHAKE)
    monkeypatch.setattr(_sweep, "build", lambda *args: "the sweep")
    monkeypatch.setattr(_sweep, "build_held", broken)
    monkeypatch.setattr(_sweep, "programs_for", lambda device: 4)
    entry = _read._with_kernels(cuda_entry())
    assert (entry.sweep, entry.held, entry.handshake) == ("the sweep", None, STAND_IN_HANDSHAKE)
    assert not [w for w in recwarn if "cleanflush" in str(w.message)]
    row = {r.target: r for r in cleanflush.status()}["read kernel's hold on cuda:0"]
    assert not row.patched and "no %globaltimer" in row.detail and "more lines" not in row.detail


def test_a_sweep_that_cannot_be_built_leaves_the_sum_and_says_so(monkeypatch):
    from cleanflush import _sweep

    monkeypatch.setattr(_hold, "Handshake", lambda: STAND_IN_HANDSHAKE)

    def broken(*args, **kwargs):
        raise RuntimeError("PTX too new\nmore lines")

    monkeypatch.setattr(_sweep, "build", broken)
    monkeypatch.setattr(_sweep, "programs_for", lambda device: 4)
    with pytest.warns(RuntimeWarning, match="cleanflush_l2_sweep could not be built on cuda:") as caught:
        for index in (0, 0, 1):
            entry = _read._with_kernels(cuda_entry(index))
            assert (entry.sweep, entry.held, entry.handshake) == (None, None, None)
    assert [str(w.message) for w in caught] == [
        f"cleanflush: the read kernel cleanflush_l2_sweep could not be built on cuda:{i} (RuntimeError: PTX too "
        "new); the read runs as torch's sum, which timers that pick kernels by name can mistake for the kernel "
        "under test"
        for i in (0, 1)
    ]
    row = {r.target: r for r in cleanflush.status()}["read kernel on cuda:0"]
    assert not row.patched and "RuntimeError: PTX too new" in row.detail and "more lines" not in row.detail
    cpu = _read._with_kernels(_read.ReadBuffer(torch.zeros(4), torch.zeros(()), 0))
    assert (cpu.sweep, cpu.held, cpu.handshake) == (None, None, None)  # CPU: the sum, nothing to build


class FakeKernel:
    """Stands in for the Triton kernel: ``kernel[grid](...)`` (the JIT launch) sums with
    torch, marks its call in the signal, and returns a compiled kernel whose direct runner
    takes ``takes`` arguments (Triton 3.3+ passes the constexprs too, older versions do not;
    other lists raise).  ``right=False``: every launch writes a wrong sum; ``marks=False``:
    none writes its mark (a GPU that cannot see the signal)."""

    def __init__(self, takes, right=True, marks=True):
        self.takes, self.right, self.marks, self.launched = takes, right, marks, []

    def _sum(self, how, data, out, n, signal, call):
        self.launched.append(how)
        out += data[:n].sum() if self.right else -1.0
        if self.marks:
            signal[1] = call

    def __getitem__(self, grid):
        def jit(data, out, n, signal, call, hold_ns, BLOCK, HOLD, UNROLL, num_warps):
            self._sum("jit", data, out, n, signal, call)
            return Compiled(self)

        return jit


class Compiled:
    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        def runner(*args):
            if len(args) != self.kernel.takes:
                raise TypeError(f"expected {self.kernel.takes} arguments, got {len(args)}")
            self.kernel._sum(f"direct/{len(args)}", *args[:5])

        return runner


@pytest.mark.parametrize("takes, used", [(9, "direct/9"), (6, "direct/6"), (10, "jit")])
def test_the_sweep_launches_the_way_its_triton_takes(monkeypatch, takes, used):
    pytest.importorskip("triton")
    from cleanflush import _sweep

    kernel = FakeKernel(takes)
    monkeypatch.setattr(_sweep, "cleanflush_l2_sweep", kernel)
    buffer, sink, signal = torch.zeros(4 * _sweep.BLOCK), torch.zeros(()), torch.zeros(2, dtype=torch.int64)
    sweep = _sweep.build(buffer, sink, signal, 2)
    assert float(buffer.abs().sum()) == 0 and signal.tolist() == [0, 0]  # the check's ones and mark are gone
    kernel.launched.clear()
    buffer[:10] = 3.0
    sink.zero_()
    sweep(buffer[:8], sink, 12)
    assert kernel.launched == [used] and float(sink) == 24.0 and signal.tolist() == [0, 12]


@pytest.mark.parametrize("kernel", [FakeKernel(6, right=False), FakeKernel(6, marks=False)], ids=["sum", "mark"])
def test_a_sweep_that_never_sums_right_or_never_marks_its_call_is_not_used(monkeypatch, kernel):
    pytest.importorskip("triton")
    from cleanflush import _sweep

    monkeypatch.setattr(_sweep, "cleanflush_l2_sweep", kernel)
    with pytest.raises(RuntimeError, match=r"no launch of the read kernel worked \(direct: .+; direct without const"):
        _sweep.build(torch.zeros(4 * _sweep.BLOCK), torch.zeros(()), torch.zeros(2, dtype=torch.int64), 2)


@pytest.mark.parametrize(
    "waited, released, used",
    [
        (140_000, 40_000, True),  # held its bound, let go by the call (both with ~40 us of launch latency)
        (140_000, 135_000, False),  # never let go: the kernel cannot see the host's count
        (60_000, 20_000, False),  # no hold at all (no clock)
        (None, 20_000, False),  # a wrong sum
        (140_000, None, False),
    ],
)
def test_a_hold_is_used_only_where_it_holds_its_bound_and_a_call_lets_it_go(monkeypatch, waited, released, used):
    pytest.importorskip("triton")
    from cleanflush import _sweep

    spans, counts = [waited, released], []

    def held_ns(launch, probe, sink, ns):
        counts.append(int(signal[0]))  # what the host's count was at each launch
        return spans[len(counts) - 1]

    monkeypatch.setattr(_sweep, "_held_ns", held_ns)
    signal = torch.zeros(2, dtype=torch.int64)
    buffer = torch.zeros(4 * _sweep.BLOCK)
    assert (_sweep._holds_wrong(None, buffer, torch.zeros(()), signal, 100_000) is None) is used
    assert counts == [_sweep.CHECK_CALL, _sweep.CHECK_CALL + 1]  # first no call after it, then one
    assert signal.tolist() == [0, 0] and float(buffer.abs().sum()) == 0  # left as found


def test_l2_size_comes_from_the_cuda_device_properties(monkeypatch):
    # stands in for torch.cuda.get_device_properties, which needs a GPU
    seen = []

    def properties(device):
        seen.append(device)
        return types.SimpleNamespace(L2_cache_size=62914560)

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    assert _read.l2_bytes(torch.device("cuda", 1)) == 62914560 and seen == [torch.device("cuda", 1)]
    assert _read.l2_bytes(torch.device("cpu")) == 0 and len(seen) == 1


def test_no_buffer_is_made_during_capture(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(_read.ReadUnavailable, match="^the read buffer cannot be allocated during CUDA graph capture$"):
        _read.prepare(torch.device("cuda", 0))
    assert _read.READS.unavailable == {}  # the next flush outside capture may make it


def test_the_buffer_is_float32_whatever_the_default_dtype():
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        entry = _read.prepare(torch.device("cpu"))
    finally:
        torch.set_default_dtype(default)
    assert entry.buffer.dtype == entry.sink.dtype == torch.float32 and entry.sink.dim() == 0
    assert float(entry.buffer.abs().sum()) == 0.0


def test_a_buffer_that_cannot_be_made_is_said_and_not_tried_again(monkeypatch):
    calls = []

    def no_memory(device, numel):
        calls.append(numel)
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(_read, "_allocate_outside_pools", no_memory)
    for _ in range(2):
        with pytest.raises(
            _read.ReadUnavailable, match=r"^the read buffer could not be allocated \(CUDA out of memory\)$"
        ):
            _read.prepare(torch.device("cpu"))
    assert calls == [256 * MiB // 4]  # tried once
    assert _read.READS.unavailable == {
        ("read buffer", "cpu"): "the read buffer could not be allocated (CUDA out of memory)"
    }


def test_the_sweep_is_built_for_the_buffer_and_its_device(monkeypatch):
    from cleanflush import _sweep

    calls = []
    monkeypatch.setattr(_sweep, "programs_for", lambda device: calls.append(("programs", device)) or 7)
    monkeypatch.setattr(_sweep, "build", lambda *args: calls.append(("build", *args)) or "the sweep")
    monkeypatch.setattr(_sweep, "build_held", lambda *args: calls.append(("held", *args)) or "the hold")
    monkeypatch.setattr(_hold, "Handshake", lambda: STAND_IN_HANDSHAKE)
    entry = _read._with_kernels(cuda_entry(3))
    assert (entry.sweep, entry.held, entry.handshake) == ("the sweep", "the hold", STAND_IN_HANDSHAKE)
    assert calls == [("programs", torch.device("cuda", 3)), ("build", entry.buffer, "sink", "signal", 7)] + [
        ("programs", torch.device("cuda", 3)),
        ("held", entry.buffer, "sink", "signal", 7),
    ]


def test_a_long_build_error_is_cut_to_one_line_of_200(monkeypatch):
    from cleanflush import _sweep

    def broken(*args):
        raise ValueError("x" * 400 + "\nsecond line")

    monkeypatch.setattr(_sweep, "build", broken)
    monkeypatch.setattr(_sweep, "programs_for", lambda device: 4)
    monkeypatch.setattr(_hold, "Handshake", lambda: STAND_IN_HANDSHAKE)
    with pytest.warns(RuntimeWarning):
        _read._with_kernels(cuda_entry())
    assert _read.READS.unavailable[("read kernel", "cuda:0")] == ("ValueError: " + "x" * 400)[:200]


def test_the_buffer_is_made_on_the_device_asked_for():
    buffer, sink = _read._allocate_outside_pools(torch.device("meta"), 16)  # no memory: shapes only
    assert buffer.device.type == sink.device.type == "meta"
    assert (buffer.shape, sink.shape, buffer.dtype) == ((16,), (), torch.float32)


def test_an_allocation_error_in_the_thread_reaches_the_caller(monkeypatch):
    def no_memory(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(torch, "zeros", no_memory)
    with pytest.raises(_read.ReadUnavailable, match=r"could not be allocated \(boom\)"):
        _read.prepare(torch.device("cpu"))


def test_release_waits_for_every_device_it_read_on_and_keeps_what_a_graph_captured(monkeypatch):
    # a flush on cuda:1 must be finished before its buffer goes, not only the current device's;
    # a buffer a CUDA graph captured is read again at every replay, after uninstall too
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    plain, captured = cuda_entry(0), cuda_entry(1)
    monkeypatch.setitem(_read.READS.buffers, torch.device("cuda", 0), plain)
    monkeypatch.setitem(_read.READS.buffers, torch.device("cuda", 1), captured)
    monkeypatch.setattr(_read.READS, "kept", [])
    monkeypatch.setattr(captured, "sweep", lambda data, out, call: None)
    captured.read(torch.zeros(4), 0, capturing=True)  # a read made during capture marks its buffer
    _flush.release()
    assert sorted(synced, key=str) == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert _read.READS.buffers == {} and _read.READS.kept == [captured]
