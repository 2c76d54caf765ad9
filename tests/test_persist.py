"""Persisting L2 (``_persist``): where part of L2 is set aside, a clean flush sets the limit to
0, resets the persisting lines and clears the stream's window; nowhere else, never inside
capture, never more readings than its design says; a binding that fails is said once and
shown by status; uninstall gives the set-aside back and forgets every reading.

There is no GPU here: the CUDA runtime is a stand-in that counts its calls (the real bindings
run in tests/gpu/test_persist_gpu.py).  What the bindings do with the runtime's answers is
checked here against stand-ins of the runtime's own shape: cuda-python's module and the
functions of a libcudart."""

from __future__ import annotations

import sys
import types

import pytest
import torch

import cleanflush
from cleanflush import _flush, _hold, _persist, _read, _state
from cleanflush._verify import report

MiB = 1 << 20
CUDA0, CUDA1 = torch.device("cuda", 0), torch.device("cuda", 1)


class StandIn:
    """The runtime of a GPU that can set aside ``max_bytes``, its limit now ``limit``; every
    call is logged, and the calls named in ``failing`` raise as a failing binding does."""

    name = "stand-in"

    def __init__(self, limit: int = 0, max_bytes: int = 30 * MiB, failing: tuple[str, ...] = ()) -> None:
        self.set_aside, self.max_bytes, self.failing = limit, max_bytes, failing
        self.calls: list[tuple[object, ...]] = []

    def _log(self, what: str, *args: object) -> None:
        self.calls.append((what, *args))
        if what in self.failing:
            raise _persist.Unavailable(f"{what} returned 999 (cudaErrorUnknown)")

    def max_persisting(self, index: int) -> int:
        self._log("max_persisting", index)
        return self.max_bytes

    def limit(self, index: int) -> int:
        self._log("limit", index)
        return self.set_aside

    def set_limit(self, index: int, nbytes: int) -> None:
        self._log("set_limit", index, nbytes)
        self.set_aside = nbytes

    def reset_lines(self, index: int) -> None:
        self._log("reset_lines", index)

    def clear_window(self, index: int) -> None:
        self._log("clear_window", index)

    def names(self) -> list[object]:
        return [call[0] for call in self.calls]


class Clock:
    def __init__(self) -> None:
        self.ns = 10**12

    def __call__(self) -> int:
        return self.ns


@pytest.fixture
def gpu(monkeypatch):
    """A CUDA device of compute capability 8.0 or later whose runtime is a fresh stand-in
    (set its limit with ``gpu.set_aside``); the clock stands still unless a test moves it."""
    runtime = StandIn()
    loads = []

    def load(index):
        loads.append(index)
        _persist.STATE.runtime = runtime
        return runtime

    monkeypatch.setattr(_persist, "_load", load)
    monkeypatch.setattr(_persist, "_can_set_aside", lambda device: True)
    monkeypatch.setattr(_persist, "clock", Clock())
    runtime.loads = loads
    return runtime


def rows():
    return [(r.name, r.target, r.state, r.detail) for r in cleanflush.status() if r.target.startswith("persisting")]


def test_where_part_of_l2_is_set_aside_the_limit_goes_to_0_the_lines_are_reset_and_the_window_cleared(gpu):
    gpu.set_aside = 8 * MiB
    _persist.before_flush(CUDA1, capturing=False)
    assert gpu.calls == [
        ("max_persisting", 1),
        ("limit", 1),
        ("set_limit", 1, 0),  # first: the set-aside goes back to the flush
        ("reset_lines", 1),
        ("clear_window", 1),
    ]
    assert gpu.set_aside == 0
    seen = _persist.STATE.devices[CUDA1]
    assert (seen.limit, seen.taken, seen.resets) == (0, 8 * MiB, 1)
    assert not _state.STATE.warned and rows() == []  # a reset is the flush doing its work, not news


def test_where_none_is_set_aside_nothing_is_set(gpu):
    for _ in range(3):
        _persist.before_flush(CUDA0, capturing=False)
    assert gpu.names() == ["max_persisting", "limit"]  # read once, and nothing set: setting it drains the GPU


def test_the_limit_is_read_at_most_once_per_read_again_ns_and_a_change_is_seen_after_it(gpu):
    clock = _persist.clock
    for _ in range(100):  # a loop of flushes a few microseconds apart
        clock.ns += 5_000
        _persist.before_flush(CUDA0, capturing=False)
    assert gpu.names().count("limit") == 1 and "set_limit" not in gpu.names()
    gpu.set_aside = 4 * MiB  # the timed call sets part of L2 aside
    clock.ns += 5_000
    _persist.before_flush(CUDA0, capturing=False)
    assert "set_limit" not in gpu.names()  # not seen yet: the reading is younger than READ_AGAIN_NS
    clock.ns += _persist.READ_AGAIN_NS
    _persist.before_flush(CUDA0, capturing=False)
    assert gpu.names().count("limit") == 2 and gpu.set_aside == 0
    assert gpu.calls[-3:] == [("set_limit", 0, 0), ("reset_lines", 0), ("clear_window", 0)]


def test_a_fresh_reading_is_taken_where_asked_whatever_its_age(gpu):
    _persist.before_flush(CUDA0, capturing=False)
    gpu.set_aside = 4 * MiB  # set up between two benchmarks
    _persist.before_flush(CUDA0, capturing=False, fresh=True)
    assert gpu.names() == ["max_persisting", "limit", "limit", "set_limit", "reset_lines", "clear_window"]


def test_nothing_is_read_or_set_during_capture_and_a_set_aside_seen_before_is_said(gpu):
    gpu.set_aside = 8 * MiB
    _persist.before_flush(CUDA0, capturing=True)
    assert gpu.calls == [] and rows() == []  # never a driver call while a stream captures
    _persist.check(CUDA0)  # read outside capture: set aside, not reset (no flush asked)
    with pytest.warns(RuntimeWarning, match="8 MiB of L2 was set aside for persisting lines when a flush was captured"):
        _persist.before_flush(CUDA0, capturing=True)
        _persist.before_flush(CUDA0, capturing=True)  # said once
    assert gpu.names() == ["max_persisting", "limit"] and gpu.set_aside == 8 * MiB
    [(name, target, state, detail)] = rows()
    assert (name, target, state) == ("cleanflush", "persisting L2 on cuda:0", "unsupported")
    assert "cannot reset it at replay" in detail


def test_a_gpu_that_cannot_set_any_aside_loads_no_binding_and_says_nothing(gpu, monkeypatch):
    monkeypatch.setattr(_persist, "_can_set_aside", lambda device: False)  # before compute capability 8.0, ROCm
    for _ in range(3):
        _persist.before_flush(CUDA0, capturing=False)
    assert gpu.loads == [] and gpu.calls == [] and rows() == [] and not _state.STATE.warned


def test_a_device_whose_set_aside_is_at_most_0_is_not_read_again(gpu):
    gpu.max_bytes = 0  # MIG, or a part without it
    for _ in range(3):
        _persist.clock.ns += _persist.READ_AGAIN_NS
        _persist.before_flush(CUDA0, capturing=False)
    assert gpu.names() == ["max_persisting"]


def test_a_binding_that_cannot_load_falls_back_once_and_says_so_in_status(gpu, monkeypatch):
    tried = []

    def broken(index):
        tried.append(index)
        raise _persist.Unavailable("cuda.bindings.runtime: ModuleNotFoundError; torch's libcudart: none loaded")

    monkeypatch.setattr(_persist, "_load", broken)
    with pytest.warns(RuntimeWarning, match="persisting L2 on cuda:0: it could not be checked") as caught:
        for _ in range(3):
            _persist.clock.ns += _persist.READ_AGAIN_NS
            _persist.before_flush(CUDA0, capturing=False)  # never raises into the flush
    assert len(caught) == 1 and tried == [0]  # not retried on every flush
    assert _persist.reading(CUDA0)["error"].startswith("it could not be checked") and tried == [0]  # nor by verify
    [(name, target, state, detail)] = rows()
    assert (name, target, state) == ("cleanflush", "persisting L2 on cuda:0", "failed")
    assert "torch's libcudart: none loaded" in detail and "survives the flush" in detail


@pytest.mark.parametrize("failing", ["set_limit", "reset_lines"])
def test_a_reset_that_fails_is_said_once_and_not_tried_again(gpu, failing):
    gpu.set_aside, gpu.failing = 8 * MiB, (failing,)
    with pytest.warns(RuntimeWarning, match="it could not be reset") as caught:
        for _ in range(3):
            _persist.clock.ns += _persist.READ_AGAIN_NS
            _persist.before_flush(CUDA0, capturing=False)
    assert len(caught) == 1 and gpu.names().count(failing) == 1
    assert [state for _, _, state, _ in rows()] == ["failed"]


def test_a_window_that_cannot_be_cleared_is_said_and_the_limit_still_reset(gpu):
    gpu.set_aside, gpu.failing = 8 * MiB, ("clear_window",)
    with pytest.warns(RuntimeWarning, match="current stream's window could not be cleared"):
        _persist.before_flush(CUDA0, capturing=False)
    assert gpu.set_aside == 0 and _persist.STATE.devices[CUDA0].resets == 1
    gpu.set_aside = 2 * MiB  # set again: the device is still checked, and reset again
    _persist.before_flush(CUDA0, capturing=False, fresh=True)
    assert gpu.set_aside == 0 and _persist.STATE.devices[CUDA0].resets == 2


def test_uninstall_gives_the_set_aside_back_and_leaves_nothing_behind(gpu):
    gpu.set_aside = 8 * MiB
    _persist.before_flush(CUDA0, capturing=False)
    _persist.before_flush(CUDA1, capturing=False)  # the stand-in's limit is one for both: 0 here, nothing taken
    assert gpu.set_aside == 0
    before = len(gpu.calls)
    cleanflush.uninstall()
    assert gpu.calls[before:] == [("limit", 0), ("set_limit", 0, 8 * MiB)]  # given back where it still reads 0
    assert _persist.STATE.devices == {} and _persist.STATE.runtime is None
    cleanflush.install()
    _persist.before_flush(CUDA0, capturing=False)
    assert gpu.loads == [0, 0]  # loaded and read again, nothing kept from before


def test_uninstall_keeps_a_limit_set_again_since_the_reset(gpu):
    gpu.set_aside = 8 * MiB
    _persist.before_flush(CUDA0, capturing=False)
    gpu.set_aside = 2 * MiB  # the program set it again after the flush's reset
    cleanflush.uninstall()
    assert gpu.set_aside == 2 * MiB and gpu.calls[-1] == ("limit", 0)


# --------------------------------------------------------------------------- the flush asks it


@pytest.fixture
def asked(monkeypatch):
    """What ``_flush`` asks ``_persist``, in order with the stock write (``write``)."""
    log: list[tuple[object, ...]] = []
    monkeypatch.setattr(
        _persist, "before_flush", lambda device, capturing, fresh=False: log.append((device, capturing))
    )
    return log


@pytest.mark.parametrize("policy, expected", [("write-read", True), ("read", True), ("write", False)])
def test_a_clean_flush_asks_before_its_write_and_the_stock_flush_never(asked, policy, expected):
    cache = torch.zeros(16, dtype=torch.int32)
    _flush.prepare(cache.device)
    with cleanflush.policy(policy):
        _flush.flush("test", write=lambda: asked.append(("write",)), cache=cache)
    cpu = torch.device("cpu")
    assert asked == ([(cpu, False)] if expected else []) + ([("write",)] if policy != "read" else [])


def test_a_captured_flush_asks_as_captured(asked, monkeypatch):
    _flush.prepare(torch.device("cpu"))  # the read buffer, made before capture
    monkeypatch.setattr(_hold, "capturing", lambda device: True)
    _flush.flush("test", device=torch.device("cpu"), written=None)
    assert asked == [(torch.device("cpu"), True)]


@pytest.mark.parametrize("policy, capturing, expected", [("write-read", False, True), ("write", False, False)])
def test_prepare_asks_for_a_fresh_reading_under_a_clean_policy_outside_capture(
    monkeypatch, policy, capturing, expected
):
    log = []
    monkeypatch.setattr(_persist, "before_flush", lambda device, capturing, fresh=False: log.append((capturing, fresh)))
    monkeypatch.setattr(_hold, "capturing", lambda device: capturing)
    monkeypatch.setattr(_read, "prepare", lambda device: (_ for _ in ()).throw(_read.ReadUnavailable("no GPU here")))
    with cleanflush.policy(policy):
        _flush.prepare(CUDA0)  # a harness making its cache, before its loop: a reset's drain lands here
    assert log == ([(False, True)] if expected else [])


def test_prepare_asks_nothing_during_capture(monkeypatch):
    log = []
    monkeypatch.setattr(_persist, "before_flush", lambda *args, **kwargs: log.append(args))
    monkeypatch.setattr(_hold, "capturing", lambda device: True)
    _flush.prepare(CUDA0)
    assert log == []


def test_the_flush_shows_persisting_l2_in_status_and_releases_it(gpu, monkeypatch):
    monkeypatch.setattr(_persist, "_load", lambda index: (_ for _ in ()).throw(OSError("no such library")))
    with pytest.warns(RuntimeWarning):
        _persist.before_flush(CUDA0, capturing=False)
    assert [r.target for r in _flush.status_rows()] == ["persisting L2 on cuda:0"]
    released = []
    monkeypatch.setattr(_persist, "release", lambda: released.append(True))
    _flush.release()
    assert released == [True]


# --------------------------------------------------------------------------- the bindings


def test_without_cuda_python_or_a_loaded_libcudart_no_binding_loads_and_each_says_why():
    # the real bindings on this machine: no cuda-python, a torch without CUDA
    if "cuda.bindings.runtime" in sys.modules or torch.version.cuda:
        pytest.skip("a binding can load here")
    with pytest.raises(_persist.Unavailable) as caught:
        _persist._load(0)
    assert str(caught.value).startswith("cuda.bindings.runtime: ModuleNotFoundError")
    assert "torch's libcudart: Unavailable: no libcudart is loaded in this process" in str(caught.value)


def test_the_loaded_libcudart_is_found_in_the_loaders_map(tmp_path):
    maps = tmp_path / "maps"
    lines = [
        "7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libc.so.6",
        "7f02-7f03 rw-p 00000000 00:00 0 ",
        "7f04-7f05 r-xp 00000000 08:01 13 /venv/site-packages/nvidia/cu13/lib/libcudart.so.13",
    ]
    maps.write_text("\n".join(lines) + "\n")
    assert _persist.loaded_cudart(str(maps)) == "/venv/site-packages/nvidia/cu13/lib/libcudart.so.13"
    maps.write_text("\n".join(lines[:2]) + "\n")
    with pytest.raises(_persist.Unavailable, match="no libcudart is loaded"):
        _persist.loaded_cudart(str(maps))


class Enum(int):
    @property
    def name(self):
        return f"cudaError{int(self)}"


def fake_cuda_python(answers: dict[str, tuple[object, ...]]) -> tuple[types.ModuleType, list[tuple[object, ...]]]:
    """A module of cuda-python's shape: every call returns ``(error, *values)``."""
    calls: list[tuple[object, ...]] = []
    rt = types.ModuleType("cuda.bindings.runtime")
    for what in ("cudaDeviceGetAttribute", "cudaDeviceGetLimit", "cudaDeviceSetLimit", "cudaCtxResetPersistingL2Cache"):
        setattr(rt, what, lambda *args, what=what: calls.append((what, *args)) or answers.get(what, (Enum(0),)))
    rt.cudaStreamSetAttribute = lambda *args: calls.append(("cudaStreamSetAttribute", *args)) or (Enum(0),)
    rt.cudaGetLastError = lambda: calls.append(("cudaGetLastError",)) or (Enum(0),)
    rt.cudaDeviceAttr = rt.cudaLimit = rt.cudaStreamAttrID = lambda value: ("enum", value)
    window = types.SimpleNamespace(num_bytes=99)
    rt.cudaStreamAttrValue = lambda: types.SimpleNamespace(accessPolicyWindow=window)
    return rt, calls


def test_cuda_pythons_binding_passes_the_runtimes_values_and_clears_a_failed_calls_error(monkeypatch):
    rt, calls = fake_cuda_python({"cudaDeviceGetLimit": (Enum(0), 8 * MiB), "cudaDeviceSetLimit": (Enum(1),)})
    monkeypatch.setitem(sys.modules, "cuda.bindings.runtime", rt)
    monkeypatch.setattr(_persist, "_on", lambda index: __import__("contextlib").nullcontext())
    monkeypatch.setattr(_persist, "_current_stream", lambda index: 1234)
    binding = _persist.CudaPython()
    assert binding.limit(0) == 8 * MiB
    binding.reset_lines(0)
    binding.clear_window(0)
    assert calls[0] == ("cudaDeviceGetLimit", ("enum", 0x06))
    assert calls[1] == ("cudaCtxResetPersistingL2Cache",)
    what, stream, attr, value = calls[2]
    assert (what, stream, attr, value.accessPolicyWindow.num_bytes) == ("cudaStreamSetAttribute", 1234, ("enum", 1), 0)
    with pytest.raises(_persist.Unavailable, match="cudaDeviceSetLimit returned cudaError1"):
        binding.set_limit(0, 0)
    assert calls[-2:] == [("cudaDeviceSetLimit", ("enum", 0x06), 0), ("cudaGetLastError",)]


def test_the_libcudart_binding_clears_a_failed_calls_error_and_names_it():
    calls = []

    class Lib:
        def cudaDeviceSetLimit(self, limit, nbytes):
            calls.append(("cudaDeviceSetLimit", limit, nbytes))
            return 708

        def cudaGetLastError(self):
            calls.append(("cudaGetLastError",))
            return 708

        def cudaGetErrorString(self, err):
            return b"operation not permitted"

    binding = _persist.TorchCudart.__new__(_persist.TorchCudart)
    binding.lib = Lib()
    with pytest.raises(_persist.Unavailable, match=r"cudaDeviceSetLimit returned 708 \(operation not permitted\)"):
        binding._call("cudaDeviceSetLimit", 0x06, 0)
    assert calls == [("cudaDeviceSetLimit", 0x06, 0), ("cudaGetLastError",)]


# --------------------------------------------------------------------------- verify


def test_verify_reads_the_limit_and_the_resets(gpu):
    gpu.set_aside = 8 * MiB
    assert _persist.reading(CUDA0) == {
        "limit_bytes": 8 * MiB,
        "max_bytes": 30 * MiB,
        "resets": 0,
        "binding": "stand-in",
        "error": None,
    }
    _persist.before_flush(CUDA0, capturing=False, fresh=True)
    assert _persist.reading(CUDA0)["resets"] == 1


@pytest.mark.parametrize(
    "found, expected",
    [
        (None, None),
        (
            {"limit_bytes": 0, "max_bytes": 30 * MiB, "resets": 0, "binding": "b", "error": None},
            "persisting L2: none set aside at the start (limit 0 of the 30 MiB this GPU allows; read through b)",
        ),
        (
            {"limit_bytes": 8 * MiB, "max_bytes": 30 * MiB, "resets": 2, "binding": "b", "error": None, "end": 0},
            "persisting L2: 8 MiB set aside at the start (of the 30 MiB this GPU allows; read through b); "
            "cleanflush's flushes set it to 0 (2 resets); it read 0 MiB at the end",
        ),
        (
            {"limit_bytes": 8 * MiB, "max_bytes": 30 * MiB, "resets": 0, "binding": "b", "error": None, "end": 8 * MiB},
            "persisting L2: 8 MiB set aside at the start (of the 30 MiB this GPU allows; read through b); "
            "NOT reset by the flushes timed here; it read 8 MiB at the end",
        ),
        (
            {"limit_bytes": None, "max_bytes": 0, "resets": 0, "binding": None, "error": None},
            "persisting L2: this GPU sets none aside",
        ),
        (
            {"limit_bytes": None, "max_bytes": None, "resets": 0, "binding": None, "error": "it could not be checked"},
            "persisting L2: it could not be checked",
        ),
    ],
)
def test_verify_says_whether_persisting_l2_was_set_aside_and_reset(found, expected):
    assert report.persisting_line(found) == expected


@pytest.mark.parametrize("name", ["verify-h200-fresh-process.json", "verify-h200-controls.json"])
def test_verify_prints_the_line_after_the_flushes_and_records_from_before_print_none(name):
    import json
    from pathlib import Path

    from cleanflush._verify import verdict

    rec = json.loads((Path(__file__).resolve().parent / "data" / name).read_text())
    rec = rec["records"][0] if "records" in rec else rec
    form = report.format_controls if "controls" in name else report.format_report
    judged = verdict.judge_controls(rec) if "controls" in name else verdict.judge(rec)
    assert "persisting L2" not in form(rec, judged)  # recorded before verify read it
    rec["persisting_l2"] = {"limit_bytes": 0, "max_bytes": 30 * MiB, "resets": 0, "binding": "b", "error": None}
    lines = form(rec, judged).splitlines()
    said = "persisting L2: none set aside at the start (limit 0 of the 30 MiB this GPU allows; read through b)"
    at = lines.index(said)
    assert lines[at - 1].startswith("flushes under ")
