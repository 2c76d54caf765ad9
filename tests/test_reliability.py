"""Never break the user's program: one test per finding of
shared/reference/review-reliability.md (2fa4d7e), each reproduced as the review did, in a
fresh interpreter where the finding needed one."""

import inspect
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import torch

import cleanflush
from cleanflush import _flush, _registry, _state

from .conftest import run_python
from .ops import OpRecorder
from .triton_layout import needs_driver_clear_cache

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


@needs_driver_clear_cache
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


@needs_driver_clear_cache
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
    triton_patch._clear_cache(stock, None, (cache,), {"stream": 3})  # another shape: not said again
    why = "clear_cache was called as (args=2, kwargs=['flag']), not clear_cache(cache)"
    said = [str(w.message) for w in recwarn if "clear_cache was called" in str(w.message)]
    assert said == [f"cleanflush: triton: {why}; its stock flush runs"]  # once per target, as documented
    assert cleanflush.flush_counts() == {("triton", "write"): 3}
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


@needs_driver_clear_cache
def test_clear_cache_of_a_non_tensor_runs_the_stock_write():
    class Buffer:
        zeroed = 0

        def zero_(self):
            self.zeroed += 1

    buffer = Buffer()
    with pytest.warns(RuntimeWarning, match="it flushed a Buffer, not a tensor"):
        for policy in cleanflush.POLICIES:
            with cleanflush.policy(policy):
                bare_driver().clear_cache(buffer)
    flushes = len(cleanflush.POLICIES)  # one a policy, each the stock write
    assert buffer.zeroed == flushes
    assert cleanflush.flush_counts() == {("triton", "write"): flushes}


@needs_driver_clear_cache
def test_clear_cache_of_a_cache_whose_device_is_a_string_runs_the_stock_write():
    # not a tensor, but shaped like one: the idle check once asked its device for a type
    class Buffer:
        device = "cuda"
        zeroed = 0

        def numel(self):
            return 64

        def element_size(self):
            return 4

        def zero_(self):
            self.zeroed += 1

    buffer = Buffer()
    with pytest.warns(RuntimeWarning, match="it flushed a Buffer, not a tensor") as said:
        for policy in cleanflush.POLICIES:
            with cleanflush.policy(policy):
                bare_driver().clear_cache(buffer)
    flushes = len(cleanflush.POLICIES)  # one a policy, each the stock write
    assert buffer.zeroed == flushes and len(said) == 1
    assert cleanflush.flush_counts() == {("triton", "write"): flushes}


@needs_driver_clear_cache
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


@needs_driver_clear_cache
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


def test_flushes_counted_from_many_threads_at_once_are_all_counted():
    # A key's first count runs Counter.__missing__, Python code where a thread can be switched
    # out between reading 0 and storing 1.  Without the lock this lost 13-35 of these counts
    # (each of 20000 keys counted first by 16 threads at once).
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    barrier = threading.Barrier(16)

    def flush():
        barrier.wait()
        for site in range(20000):
            _state.count_flush(f"site {site}", "write-read")

    threads = [threading.Thread(target=flush) for _ in range(16)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    counts = cleanflush.flush_counts()
    assert len(counts) == 20000 and set(counts.values()) == {16}


@needs_driver_clear_cache
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


def test_disable_with_an_unknown_name_says_one_line_once_and_the_valid_ones_still_apply(tmp_path):
    # a script file, whose import line a RuntimeWarning would quote on a second line
    script = tmp_path / "tune.py"
    script.write_text(
        "import triton  # the user's line: the autoload installs here\nimport triton.testing, cleanflush\n"
        "print([r.state for r in cleanflush.status() if r.name == 'triton'])\n"
    )
    child = run_python(
        f"import runpy; runpy.run_path({str(script)!r})", {"CLEANFLUSH": "1", "CLEANFLUSH_DISABLE": "foo,triton"}
    )
    assert child.stdout.strip() == "['disabled']", child.stderr
    said = [line for line in child.stderr.splitlines() if line.strip()]
    assert said == [
        "cleanflush: CLEANFLUSH_DISABLE names unknown targets foo (ignored); valid targets: "
        + ", ".join(_registry.NAMES)
    ], child.stderr


# Fork- and thread-safe state, and children of every start method (each in a fresh interpreter).

# What the parent of each test below runs: a process of the context started, its report read.
START = """
def start(ctx):
    queue = ctx.Queue()
    p = ctx.Process(target=report, args=(queue,))
    p.start()
    got = queue.get(timeout=120)
    p.join()
    return got
"""

CHILD_MODULE = """
import os

def report(queue):
    import triton  # noqa: F401  (wakes the autoload where cleanflush is not loaded yet)
    import cleanflush
    queue.put((os.environ.get("CLEANFLUSH"), cleanflush.current_policy()))
"""


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_a_process_started_inside_a_block_runs_under_the_blocks_policy(tmp_path, method):
    (tmp_path / "childmod.py").write_text(CHILD_MODULE + START)
    child = run_python(f"""
        import multiprocessing, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import childmod, cleanflush
        ctx = multiprocessing.get_context({method!r})
        outside = childmod.start(ctx)  # a forkserver starts here, outside any block
        with cleanflush.policy("read"):
            inside = childmod.start(ctx)
        with cleanflush.policy("write"):
            other = childmod.start(ctx)
        print(outside, inside, other)
        """)
    assert child.returncode == 0, child.stderr[-2000:]
    expected = "('write-read', 'write-read') ('read', 'read') ('write', 'write')"
    assert child.stdout.strip() == expected, child.stderr[-2000:]


GRANDCHILD_MODULE = """
import multiprocessing, os, subprocess, sys

def report(queue):
    import cleanflush
    inner = multiprocessing.get_context("spawn").Queue()
    p = multiprocessing.get_context("spawn").Process(target=_grandchild, args=(inner,))
    p.start()
    grandchild = inner.get(timeout=120)
    p.join()
    with cleanflush.policy("write-read"):  # a block in the child reaches its plain subprocesses too
        command = [sys.executable, "-c", "import os; print(os.environ.get('CLEANFLUSH'))"]
        shell = subprocess.run(command, capture_output=True, text=True).stdout.strip()
    queue.put((os.environ.get("CLEANFLUSH"), cleanflush.current_policy(), grandchild, shell))

def _grandchild(queue):
    import cleanflush
    queue.put(cleanflush.current_policy())
"""


def test_a_forkserver_that_loaded_cleanflush_first_hands_its_children_the_blocks_policy(tmp_path):
    # the server imports cleanflush before any block (a preload, or torch imported there), so the
    # child's cleanflush is installed already when the carried value arrives: it must take that
    # value as its own policy and pass it on to its own children
    (tmp_path / "childmod.py").write_text(GRANDCHILD_MODULE + START)
    child = run_python(f"""
        import multiprocessing, sys
        sys.path.insert(0, {str(tmp_path)!r})
        import childmod, cleanflush
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["cleanflush", "childmod"])
        with cleanflush.policy("read"):
            inside = childmod.start(ctx)
        with cleanflush.policy("write"):
            other = childmod.start(ctx)
        print(inside, other)
        """)
    assert child.returncode == 0, child.stderr[-2000:]
    expected = "('read', 'read', 'read', 'write-read') ('write', 'write', 'write', 'write-read')"
    assert child.stdout.strip() == expected, child.stderr[-2000:]


def test_a_fork_while_another_thread_holds_the_policy_lock_does_not_hang():
    child = run_python(
        """
        import os, threading, torch, cleanflush
        stop = threading.Event()
        def churn():
            while not stop.is_set():
                with cleanflush.policy("read"):
                    pass
        thread = threading.Thread(target=churn, daemon=True)  # a failed assert must not hang the child
        thread.start()
        hung = 0
        for _ in range(40):
            pid = os.fork()
            if pid == 0:
                with cleanflush.policy("write"):  # takes the locks the other thread may have held
                    pass
                if _ < 3:  # and the flush's own lock, allocating the child's read buffer (on CPU)
                    cache = torch.empty(1 << 20, dtype=torch.int32)
                    cleanflush._flush.flush("forked", write=cache.zero_, cache=cache)
                    if cleanflush.flush_counts() != {("forked", "write-read"): 1}:
                        os._exit(4)
                os._exit(0 if os.environ["CLEANFLUSH"] == "write-read" else 3)
            for _ in range(200):  # up to 10 s
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                threading.Event().wait(0.05)
            else:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                hung += 1
                continue
            assert os.waitstatus_to_exitcode(status) == 0, status
        stop.set()
        thread.join()
        print("hung", hung)
        """,
        args=("-W", "ignore::DeprecationWarning"),
    )  # fork with threads: Python 3.12+ warns
    assert child.returncode == 0, child.stderr[-2000:]
    assert child.stdout.strip() == "hung 0"


@needs_driver_clear_cache
def test_install_from_many_threads_at_once_wraps_once():
    child = run_python(
        """
        import os, threading, torch, triton
        os.environ["CLEANFLUSH"] = "0"
        import cleanflush  # off: nothing installed yet
        del os.environ["CLEANFLUSH"]
        barrier = threading.Barrier(8)
        def install():
            barrier.wait()
            cleanflush.install()
        threads = [threading.Thread(target=install) for _ in range(8)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        cls = triton.backends.backends["nvidia"].driver
        fn, depth = vars(cls)["clear_cache"], 0
        while hasattr(fn, "__wrapped__"):
            fn, depth = fn.__wrapped__, depth + 1
        object.__new__(cls).clear_cache(torch.zeros(16, dtype=torch.int32))
        print(depth, cleanflush.flush_counts())
        """,
        args=("-W", "error"),
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "1 {('triton', 'write-read'): 1}"


def test_a_block_in_a_generator_closed_in_another_thread_ends_for_its_own_thread():
    def gen():
        with cleanflush.policy("read"):
            yield cleanflush.current_policy()

    g = gen()
    assert next(g) == "read" and cleanflush.current_policy() == "read"
    closer = threading.Thread(target=g.close)
    closer.start()
    closer.join()
    assert cleanflush.current_policy() == "write-read"


def test_a_block_in_an_async_generator_ends_when_it_is_finalised():
    import asyncio

    closed = []

    async def gen():
        try:
            with cleanflush.policy("write"):
                yield 1
                yield 2
        finally:
            closed.append(True)

    async def main():
        async for _ in gen():
            break  # asyncio finalises the generator later, in a task of its own
        for _ in range(20):
            if closed:
                break
            await asyncio.sleep(0)
        return closed, cleanflush.current_policy(), os.environ["CLEANFLUSH"]

    assert asyncio.run(main()) == ([True], "write-read", "write-read")


REPORTING = """
import multiprocessing, os, sys, torch, triton, cleanflush
torch.set_num_threads(1)  # CPU torch's OpenMP pool hangs in a forked child (the read is a sum on CPU)
driver = object.__new__(triton.backends.backends["nvidia"].driver)
def flush(n):
    for _ in range(n):
        driver.clear_cache(torch.zeros(16, dtype=torch.int32))
def worker(n):
    flush(n)
if __name__ == "__main__":
    os.chdir(sys.argv[1])  # the report stays where it was named when the process started
    flush(3)
    pid = os.fork()
    if pid == 0:
        flush(2)
        sys.exit(0)  # a plain fork child: its own 2, not the parent's 3 again
    os.waitpid(pid, 0)
    for method in ("fork", "forkserver"):  # workers that end with os._exit
        p = multiprocessing.get_context(method).Process(target=worker, args=(4,))
        p.start()
        p.join()
"""


@needs_driver_clear_cache
def test_one_report_line_per_process_with_its_own_flushes_at_the_path_named_at_start(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(REPORTING)
    elsewhere = tmp_path / "sub"
    elsewhere.mkdir()
    out = subprocess.run(
        [sys.executable, str(script), str(elsewhere)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CLEANFLUSH": "1", "CLEANFLUSH_REPORT": "report.jsonl"},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert not (elsewhere / "report.jsonl").exists()
    lines = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text().splitlines()]
    counts = sorted(line["flushes"]["triton | write-read"] for line in lines)
    assert counts == [2, 3, 4, 4], lines
    assert len({line["pid"] for line in lines}) == 4
