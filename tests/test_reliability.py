"""Never break the user's program: one test per finding of
shared/reference/review-reliability.md (2fa4d7e), each reproduced as the review did, in a
fresh interpreter where the finding needed one."""

import inspect
import json
import threading
import time

import pytest
import torch

import cleanflush
from cleanflush import _flush, _state

from .conftest import run_python
from .ops import OpRecorder

triton = pytest.importorskip("triton")


def bare_driver():
    return object.__new__(triton.backends.backends["nvidia"].driver)


# BUG-E1 and BUG-G2: a read buffer that cannot be allocated, under -W error ---------------

FAILING_ALLOCATION = """
import json, sys, torch, triton, cleanflush
from cleanflush import _state
calls = []
real_zeros = torch.zeros
def zeros(*args, **kwargs):
    if args and isinstance(args[0], int) and args[0] > 1:  # the read buffer, not the scalar sink
        calls.append(args[0])
        raise RuntimeError("CUDA out of memory (simulated)")
    return real_zeros(*args, **kwargs)
torch.zeros = zeros
driver = object.__new__(triton.backends.backends["nvidia"].driver)
cache = torch.full((64,), 7, dtype=torch.int32)
with cleanflush.policy(POLICY):
    for _ in range(5):
        driver.clear_cache(cache)
rows = [r.as_dict() for r in cleanflush.status() if r.target.startswith("read buffer")]
print(json.dumps({"zeroed": int(cache.sum()) == 0, "allocations": len(calls),
                  "counts": {f"{t} | {p}": n for (t, p), n in cleanflush.flush_counts().items()},
                  "rows": rows}))
"""


@pytest.mark.parametrize("policy", ["read", "write-read"])
def test_failed_read_allocation_under_warnings_as_errors(policy):
    child = run_python(FAILING_ALLOCATION.replace("POLICY", repr(policy)), {"CLEANFLUSH": "1"}, args=("-W", "error"))
    assert child.returncode == 0, child.stderr  # nothing raised out of clear_cache
    out = json.loads(child.stdout)
    assert out["zeroed"]  # the stock write ran instead
    assert out["allocations"] == 1  # tried once, not on every timed call
    assert out["counts"] == {"triton | write": 5}  # counted as the write it was
    assert len(out["rows"]) == 1 and not out["rows"][0]["patched"]
    assert "could not be allocated" in out["rows"][0]["detail"]
    lines = [line for line in child.stderr.splitlines() if "cleanflush" in line]
    assert len(lines) == 1 and "warnings are errors" in lines[0], child.stderr


def test_warn_once_falls_back_to_stderr_when_warnings_raise(capsys):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _state.warn_once("test-key", "something odd")
        _state.warn_once("test-key", "something odd")
    err = capsys.readouterr().err
    assert err.count("cleanflush: something odd") == 1


# BUG-F: unexpected call shapes run the stock code ----------------------------------------


def test_clear_cache_without_argument_behaves_as_stock():
    driver = bare_driver()
    stock = vars(type(driver))["clear_cache"].__wrapped__
    with pytest.raises(TypeError) as ours, pytest.warns(RuntimeWarning, match="not clear_cache.cache."):
        driver.clear_cache()
    with pytest.raises(TypeError) as theirs:
        stock(driver)
    assert str(ours.value) == str(theirs.value)


def test_clear_cache_called_another_way_gets_the_callers_arguments_and_counts_the_write(recwarn):
    """A future ``clear_cache(cache, stream)``: the stock method, with exactly what the caller
    passed, counted as the stock write, said once."""
    from cleanflush.patches import triton as triton_patch

    calls = []

    def stock(*args, **kwargs):
        calls.append((args, kwargs))
        return "stock result"

    cache = torch.zeros(8, dtype=torch.int32)
    for _ in range(2):
        assert triton_patch._clear_cache(stock, None, (cache, 7), {"flag": True}) == "stock result"
    assert [(len(a), a[0] is cache, a[1:], k) for a, k in calls] == [(2, True, (7,), {"flag": True})] * 2
    why = "clear_cache was called as (args=2, kwargs=['flag']), not clear_cache(cache)"
    said = [str(w.message) for w in recwarn if "clear_cache was called" in str(w.message)]
    assert said == [f"cleanflush: triton: {why}; its stock flush runs"]
    assert cleanflush.flush_counts() == {("triton", "write"): 2}
    row = {r.target: r for r in cleanflush.status()}["flushes in triton"]
    assert (row.state, row.detail) == ("failed", f"{why}: those flushes ran the stock code")


def test_get_empty_cache_passes_the_callers_arguments_on():
    """Wrapped, not replaced: a future ``get_empty_cache_for_benchmark(size)`` gets its argument."""
    from cleanflush.patches import triton as triton_patch

    calls = []

    def stock(*args, **kwargs):
        calls.append((args, kwargs))
        return torch.zeros(8, dtype=torch.int32)

    triton_patch._get_empty_cache(stock, None, (3,), {"device": "cpu"})
    assert calls == [((3,), {"device": "cpu"})]


def test_clear_cache_of_a_non_tensor_runs_the_stock_write():
    class Buffer:
        zeroed = 0

        def zero_(self):
            self.zeroed += 1

    buffer = Buffer()
    with pytest.warns(RuntimeWarning, match="unexpected cache object"):
        for policy in cleanflush.POLICIES:
            with cleanflush.policy(policy):
                bare_driver().clear_cache(buffer)
    assert buffer.zeroed == 3
    assert cleanflush.flush_counts() == {("triton", "write"): 3}


def test_clear_cache_by_keyword_is_flushed():
    cache = torch.full((64,), 3, dtype=torch.int32)
    _flush.prepare(cache.device)
    with OpRecorder() as rec:
        bare_driver().clear_cache(cache=cache)
    assert rec.names == ["zero_", "sum"]


def test_event_pairs_of_another_shape_are_passed_through(monkeypatch):
    # a future get_event_pairs that returns another shape, asked for inside a real patched
    # benchmark (the callable asks for 99 pairs; the benchmark's own requests stay stock)
    benchmarking = pytest.importorskip("torch._inductor.runtime.benchmarking")
    if "device_type" not in inspect.signature(benchmarking.InductorBenchmarker.benchmark_gpu).parameters:
        pytest.skip("benchmark_gpu runs on CPU from torch 2.13")
    bench = benchmarking.InductorBenchmarker
    stock = vars(bench)["get_event_pairs"].__wrapped__
    odd = (["s1", "s2"], ["e1", "e2"])
    monkeypatch.setattr(
        vars(bench)["get_event_pairs"], "__wrapped__", lambda self, n, **k: odd if n == 99 else stock(self, n, **k)
    )
    seen = []
    _flush.prepare(torch.device("cpu"))
    with pytest.warns(RuntimeWarning, match="not a list of .start, end. pairs"):
        bench().benchmark_gpu(
            lambda: seen.append(bench().get_event_pairs(99, device_type="cpu")),
            device_type="cpu",
            benchmark_iters=2,
            memory_warmup_iters=0,
        )
    assert seen and all(result is odd for result in seen)


# BUG-H: importlib.reload(cleanflush) writes one report line, not two ----------------------


def test_reload_does_not_register_the_report_twice(tmp_path):
    report = tmp_path / "r.jsonl"
    child = run_python(
        """
        import importlib, torch, triton, cleanflush
        importlib.reload(cleanflush)
        driver = object.__new__(triton.backends.backends["nvidia"].driver)
        driver.clear_cache(torch.zeros(16, dtype=torch.int32))
        """,
        {"CLEANFLUSH": "1", "CLEANFLUSH_REPORT": str(report)},
    )
    assert child.returncode == 0, child.stderr
    lines = report.read_text().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["flushes"] == {"triton | write-read": 1}
    assert line["env_at_start"] == "1"  # what a worker started with, to spot a stale policy


# BUG-R: the first flushes of 16 threads at once allocate one buffer ----------------------


def test_threads_flushing_first_at_once_allocate_one_buffer(monkeypatch):
    real_zeros = torch.zeros
    sizes = []

    def slow_zeros(*args, **kwargs):
        if args and isinstance(args[0], int) and args[0] > 1024:  # the read buffer
            sizes.append(args[0])
            time.sleep(0.01)  # widen the window, as the review did
        return real_zeros(*args, **kwargs)

    monkeypatch.setattr(torch, "zeros", slow_zeros)
    _flush.release()
    barrier = threading.Barrier(16)
    errors = []

    def flush():
        try:
            cache = torch.zeros(16, dtype=torch.int32)
            barrier.wait()
            bare_driver().clear_cache(cache)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=flush) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(sizes) == 1
    assert cleanflush.flush_counts() == {("triton", "write-read"): 16}


# Per-target switch ---------------------------------------------------------------------


def test_disable_with_an_unknown_name_names_it_once_and_the_valid_ones_still_apply():
    child = run_python(
        "import triton  # the user's line: the autoload installs here\nimport triton.testing, cleanflush\n"
        "print([r.state for r in cleanflush.status() if r.name == 'triton'])",
        {"CLEANFLUSH": "1", "CLEANFLUSH_DISABLE": "foo,triton"},
    )
    assert child.stdout.strip() == "['disabled']", child.stderr
    lines = [line for line in child.stderr.splitlines() if "CLEANFLUSH_DISABLE" in line]
    assert len(lines) == 1, child.stderr
    assert "unknown targets foo (ignored); valid targets: triton, inductor" in lines[0]
    assert lines[0].startswith("<string>:1: RuntimeWarning"), lines  # at the user's import, not in importlib
