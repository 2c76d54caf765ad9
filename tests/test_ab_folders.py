"""`cleanflush ab`'s work folder and its records, as a hostile tester or a shared scratch folder
would have them: nothing read from disk runs code, no link is followed, nothing ab did not make
is deleted, every call is recorded as the kernel saw it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest

from cleanflush import _calls, _decisions
from cleanflush._ab import folders, prices

from .conftest import environ_without_cleanflush, run_python

torch = pytest.importorskip("torch")


def ab(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "cleanflush", "ab", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**environ_without_cleanflush(), **(env or {})},
    )


def usage_error(out, says):
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert says in line, line


def kept(tmp_path):
    """A --keep folder ab made (its mark), as a second ab would find it."""
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / folders.MARK).touch()
    return keep


# Nothing from disk runs code


class Planted:
    """Unpickled, it creates the file it names: the marker of code that ran."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_recorded_call_is_loaded_without_running_what_a_planted_file_holds(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "planted.pt"
    torch.save({"module": "os", "name": "x", "args": [Planted(str(marker))]}, path)
    with pytest.raises(Exception, match="Weights only load failed|Unsupported global"):
        _calls.Call.load(str(path), torch.device("cpu"))
    assert not marker.exists()
    torch.load(path, weights_only=False)  # the control: loaded as before, the file runs its code
    assert marker.exists()


def test_a_link_where_ab_makes_a_folder_is_removed_never_followed(tmp_path):
    elsewhere = tmp_path / "someone-elses"
    elsewhere.mkdir()
    (elsewhere / "theirs.pt").write_text("kept")
    link = tmp_path / "calls"
    link.symlink_to(elsewhere)
    folders.fresh(str(link))
    assert link.is_dir() and not link.is_symlink() and list(link.iterdir()) == []
    assert (elsewhere / "theirs.pt").read_text() == "kept"


def test_ab_replaces_a_linked_calls_folder_and_a_linked_run_folder(tmp_path):
    keep = kept(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "planted.pt").write_text("not a record")
    (keep / "calls").symlink_to(elsewhere)
    old = tmp_path / "old-run"
    old.mkdir()
    line = {"kind": "triton", "op": "k", "key": "1", "winner": "a", "timings_ms": {"a": 1.0, "b": 2.0}}
    (old / "decisions.jsonl").write_text(json.dumps(line) + "\n")
    (keep / "run1-write").symlink_to(old)
    out = ab("--runs", "1", "--keep", str(keep), "--json", "--", sys.executable, "-c", "pass")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["comparison"]["decisions"] == []  # the older run lent nothing
    for name in ("calls", "run1-write"):
        assert (keep / name).is_dir() and not (keep / name).is_symlink()
    assert (elsewhere / "planted.pt").read_text() == "not a record" and (old / "decisions.jsonl").exists()


def test_the_lock_is_never_opened_through_a_link(tmp_path):
    keep = kept(tmp_path)
    target = tmp_path / "target"
    target.write_text("theirs")
    (keep / folders.LOCK).symlink_to(target)
    out = ab("--keep", str(keep), "--", sys.executable, "-c", "pass")
    usage_error(out, "is not a plain file")
    assert target.read_text() == "theirs"


def test_a_record_is_written_under_a_name_no_one_can_guess_then_renamed(tmp_path):
    # a link planted at the old predictable name (PATH.PID.tmp) is never written through
    victim = tmp_path / "victim"
    victim.write_text("theirs")
    path = tmp_path / "record.pt"
    (tmp_path / f"record.pt.{os.getpid()}.tmp").symlink_to(victim)
    tuner = types.SimpleNamespace(base_fn=test_a_record_is_written_under_a_name_no_one_can_guess_then_renamed)
    assert _calls.record(tuner, (torch.ones(4),), {}, None, [], str(path)) is None
    assert victim.read_text() == "theirs" and path.is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".call-")] == []


# --keep is the user's folder


@pytest.mark.parametrize(
    "keep, says",
    [
        ("", "--keep '' names no folder"),
        ("/proc/version/runs", "which is a file"),
        ("/sys/cleanflush-ab-test", "cannot be written"),
    ],
)
def test_a_keep_that_cannot_be_a_folder_is_a_usage_error_before_any_run(tmp_path, keep, says):
    ran = tmp_path / "ran"
    out = ab("--keep", keep, "--", sys.executable, "-c", f"open({str(ran)!r}, 'w')")
    usage_error(out, says)
    assert not ran.exists()


def test_a_lock_path_that_is_a_folder_is_a_usage_error(tmp_path):
    keep = kept(tmp_path)
    (keep / folders.LOCK).mkdir()
    usage_error(ab("--keep", str(keep), "--", sys.executable, "-c", "pass"), "is not a plain file")


@pytest.mark.parametrize("name", folders.SHARED)
def test_a_file_where_ab_puts_a_folder_is_a_usage_error_before_any_run(tmp_path, name):
    keep = kept(tmp_path)
    (keep / name).write_text("mine")
    usage_error(ab("--keep", str(keep), "--", sys.executable, "-c", "pass"), f"its folder {name!r}")
    assert (keep / name).read_text() == "mine"


def test_ab_never_deletes_a_folder_it_did_not_make(tmp_path):
    keep = tmp_path / "results"
    (keep / "calls").mkdir(parents=True)
    (keep / "calls" / "mine.txt").write_text("mine")
    out = ab("--keep", str(keep), "--", sys.executable, "-c", "pass")
    usage_error(out, "which cleanflush ab did not make there")
    assert (keep / "calls" / "mine.txt").read_text() == "mine"


def test_a_folder_without_abs_names_is_taken_on_and_the_users_files_stay(tmp_path):
    keep = tmp_path / "results"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    out = ab("--runs", "1", "--keep", str(keep), "--", sys.executable, "-c", "pass")
    assert out.returncode == 0, out.stderr
    assert (keep / "notes.txt").read_text() == "mine" and (keep / folders.MARK).is_file()


def test_runs_beyond_the_bound_are_a_usage_error_at_once():
    started = time.monotonic()
    out = ab("--runs", "51", "--", sys.executable, "-c", "pass")
    assert out.returncode == 2 and "at most 50 runs a side, got 51" in out.stderr
    assert time.monotonic() - started < 60


LISTS_ITS_CACHE = """
import os
cache = os.environ["TRITON_CACHE_DIR"]
seen = sorted(os.listdir(cache)) if os.path.isdir(cache) else []
open(os.path.join(os.path.dirname(cache), "seen.txt"), "w").write(repr(seen))
"""


def test_a_reused_keep_starts_with_an_empty_triton_cache(tmp_path):
    keep = kept(tmp_path)
    (keep / "compiled" / "abc").mkdir(parents=True)  # what an earlier ab carried
    (keep / "compiled" / "abc" / "old.cubin").write_bytes(b"\x7fELF")
    out = ab("--runs", "1", "--keep", str(keep), "--", sys.executable, "-c", LISTS_ITS_CACHE)
    assert out.returncode == 0, out.stderr
    assert (keep / "run1-write" / "seen.txt").read_text() == "[]"


def test_links_and_fifos_in_a_runs_cache_are_skipped_when_carrying(tmp_path):
    cache = tmp_path / "triton" / "abc"
    cache.mkdir(parents=True)
    (cache / "kernel.cubin").write_bytes(b"\x7fELF")
    (cache / "dangling").symlink_to(tmp_path / "gone")
    (cache / "outside").symlink_to(tmp_path)
    os.mkfifo(cache / "pipe")
    folders.carry(str(tmp_path / "triton"), str(tmp_path / "compiled"))  # a FIFO opened would block here
    assert sorted(p.name for p in (tmp_path / "compiled").rglob("*")) == ["abc", "kernel.cubin"]


def test_sigterm_stops_the_job_writes_the_report_and_removes_the_temporary_folder(tmp_path):
    scratch, started = tmp_path / "tmp", tmp_path / "job.pid"
    scratch.mkdir()
    job = f"import os, time; open({str(started)!r}, 'w').write(str(os.getpid())); time.sleep(120)"
    proc = subprocess.Popen(
        [sys.executable, "-m", "cleanflush", "ab", "--json", "--", sys.executable, "-c", job],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**environ_without_cleanflush(), "TMPDIR": str(scratch)},
    )
    for _ in range(600):
        if started.exists() and started.read_text():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert json.loads(out)["interrupted"] is True and "interrupted" in err
    job_pid = int(started.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # killed, then reaped by ab
            os.kill(job_pid, 0)
            time.sleep(0.1)
    assert list(scratch.iterdir()) == []


# Every call recorded as the kernel saw it


def test_a_kernel_module_that_exits_when_imported_costs_only_its_own_price(tmp_path):
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    path = tmp_path / "call.pt"
    torch.save({"module": "exits_on_import", "name": "k", "args": [], "kwargs": {}, "grid": None}, path)
    sys.path.insert(0, str(tmp_path))
    try:
        decision = {"key": ["triton", "k", "1"], "file": "call.pt", "error": None, "candidates": ["a", "b"]}
        priced = prices.price_decision(decision, str(tmp_path), torch.ones(4), rounds=1, calls=1)
    finally:
        sys.path.remove(str(tmp_path))
    assert priced == {"key": ["triton", "k", "1"], "error": "SystemExit: 3"}


def test_views_of_one_storage_count_once_and_stay_views_of_one_storage(tmp_path, monkeypatch):
    qkv = torch.arange(3 * 64, dtype=torch.float32)
    q, k, v = qkv.view(3, 64).unbind(0)
    monkeypatch.setattr(_calls, "MAX_BYTES", qkv.numel() * 4 + 1)  # under three storages' worth
    tuner = types.SimpleNamespace(base_fn=test_views_of_one_storage_count_once_and_stay_views_of_one_storage)
    path = tmp_path / "qkv.pt"
    assert _calls.record(tuner, (q, k, v), {}, None, [], str(path)) is None
    loaded = torch.load(path, weights_only=True)["args"]
    assert len({t.untyped_storage().data_ptr() for t in loaded}) == 1
    assert [t.storage_offset() for t in loaded] == [0, 64, 128]


def test_an_in_place_kernels_arguments_are_kept_as_they_were_before_the_call():
    x = torch.arange(20, dtype=torch.float32)[::2]  # a strided view
    out = torch.zeros(10)
    tuner = types.SimpleNamespace(arg_names=["x", "out", "n"], keys=["n"], restore_value=["x"], cache={})
    kept_args = _calls.before_call(tuner, (x, out, 10), {})
    x.mul_(-1)  # what the call itself writes
    assert kept_args is not None and kept_args[1] is out and kept_args[2] == 10
    assert kept_args[0].tolist() == list(range(0, 20, 2)) and kept_args[0].stride() == (2,)
    tuner.cache[(10, "torch.float32", "torch.float32")] = "a config"  # tuned already: nothing kept
    assert _calls.before_call(tuner, (x, out, 10), {}) is None
    plain = types.SimpleNamespace(arg_names=["x"], keys=["x"], restore_value=[], reset_to_zero=[], cache={})
    assert _calls.before_call(plain, (x,), {}) is None  # nothing written in place: nothing copied


def test_a_kernel_tuned_under_a_name_of_its_own_is_found():
    kernel = types.SimpleNamespace(__name__="kernel")
    tuned = types.SimpleNamespace(configs=[], base_fn=kernel)
    module = types.ModuleType("lib")
    module.kernel, module.tuned = kernel, tuned  # tuned = triton.autotune(...)(kernel)
    assert _calls._autotuner_in(module, "kernel") is tuned
    with pytest.raises(LookupError, match="is not a @triton.autotune kernel"):
        _calls._autotuner_in(types.ModuleType("empty"), "kernel")


WORKER_COUNTS = """
import multiprocessing, os, types
import triton.runtime.autotuner  # what loads cleanflush's autotuning hooks in a job
from cleanflush import _decisions, _tunercache

def work(_):
    kernel = types.SimpleNamespace(__module__="lib", __name__="kernel")
    cache = _tunercache.cache_of(types.SimpleNamespace(cache={{}}, base_fn=kernel))
    for _ in range(3):
        (7,) in cache
    return 0

if __name__ == "__main__":
    pool = multiprocessing.get_context({method!r}).Pool(1)
    pool.map(work, [0])
    pool.close()  # the workers end as they do: multiprocessing's finalizers, then os._exit
    pool.join()
"""


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn"])
def test_call_counts_of_workers_that_end_with_os_exit_are_written(tmp_path, method):
    decisions = tmp_path / "d.jsonl"
    script = tmp_path / "job.py"
    script.write_text(WORKER_COUNTS.format(method=method))
    env = {**environ_without_cleanflush(), "CLEANFLUSH_DECISIONS": str(decisions), "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in decisions.read_text().splitlines()]
    assert lines == [{"kind": "calls", "op": "lib.kernel", "counts": {"(7,)": 3}}]


def test_the_recorder_keeps_the_autotuners_own_cache_dict():
    mine = {}
    tuner = types.SimpleNamespace(cache=mine, base_fn=types.SimpleNamespace(__module__="lib", __name__="k"))

    def run(*args, **kwargs):
        tuner.cache[("key",)] = "config"  # the autotuner tunes a key
        return "launched"

    assert _decisions._autotuner_run(run, tuner, (), {}) == "launched"
    assert mine == {("key",): "config"}  # a reference the job took before tuning sees the key
    assert ("key",) in tuner.cache and tuner.cache.data is mine


def test_the_counts_a_fork_inherits_are_the_parents_to_write(tmp_path):
    code = """
import os, json, types
import triton.runtime.autotuner
from cleanflush import _decisions, _tunercache
kernel = types.SimpleNamespace(__module__="lib", __name__="kernel")
cache = _tunercache.cache_of(types.SimpleNamespace(cache={}, base_fn=kernel))
(1,) in cache
counts = lambda: {op: dict(c) for op, c in _decisions.COUNTS.items() if c}
pid = os.fork()
if pid == 0:
    print(json.dumps(counts()), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps(counts()))
"""
    out = run_python(code, env={"CLEANFLUSH_DECISIONS": str(tmp_path / "d.jsonl")})
    assert out.returncode == 0, out.stderr
    child, parent = (json.loads(line) for line in out.stdout.splitlines())
    assert child == {} and parent == {"lib.kernel": {"(1,)": 1}}


def test_a_call_larger_than_the_limit_is_refused_and_one_at_the_limit_is_recorded(tmp_path, monkeypatch):
    x = torch.ones(16)  # 64 bytes of storage
    tuner = types.SimpleNamespace(base_fn=test_a_call_larger_than_the_limit_is_refused_and_one_at_the_limit_is_recorded)
    monkeypatch.setattr(_calls, "MAX_BYTES", 64)
    assert _calls.record(tuner, (x,), {}, None, [], str(tmp_path / "at.pt")) is None
    monkeypatch.setattr(_calls, "MAX_BYTES", 63)
    why = _calls.record(tuner, (x,), {}, None, [], str(tmp_path / "over.pt"))
    assert why == "its arguments' storages hold 0.0 GiB: too large to record" and not (tmp_path / "over.pt").exists()


def test_a_pruners_config_is_made_again_with_its_options_and_the_tuners_pre_hook():
    triton = pytest.importorskip("triton")

    def hook(nargs):
        pass

    own = triton.Config({"BLOCK": 64}, num_warps=4, num_stages=2, pre_hook=hook)
    pruned = triton.Config({"BLOCK": 64}, num_warps=2, num_stages=3)  # what a pruner handed the autotuner
    tuner = types.SimpleNamespace(configs=[own], base_fn=hook)
    call = _calls.Call(tuner, [], {}, None, {}, [], {str(pruned): _calls.config_spec(pruned)})
    assert call.config(str(own)) is own  # the tuner's own, as it is
    again = call.config(str(pruned))
    assert str(again) == str(pruned) and again.kwargs == {"BLOCK": 64} and again.pre_hook is hook
    alone = triton.Config({"BLOCK": 32}, num_warps=1)  # no config of the tuner's has its meta-parameters
    call.configs[str(alone)] = _calls.config_spec(alone)
    assert str(call.config(str(alone))) == str(alone) and call.config(str(alone)).pre_hook is None
    with pytest.raises(LookupError, match="no config of hook is 'BLOCK: 8' here"):
        call.config("BLOCK: 8")


def test_a_decision_is_priced_from_its_own_record_and_keeps_what_its_pricing_found(tmp_path, monkeypatch):
    # the pricing itself (price_one) needs a GPU: tests/gpu/test_ab_gpu.py runs it; here, what
    # price_decision hands it and keeps of it
    seen = []

    def price_one(path, labels, read, rounds, calls):
        seen.append((path, labels, read, rounds, calls))
        return {"prices": {"a": {"us": 1.0}}, "rounds": rounds, "calls": calls, "kernel": "k"}

    monkeypatch.setattr(prices, "price_one", price_one)
    key = ["triton", "lib.k", "1"]
    found = prices.price_decision(
        {"key": key, "file": "c.pt", "error": None, "candidates": ["a", "b"]}, str(tmp_path), "read", 2, 7
    )
    assert seen == [(str(tmp_path / "c.pt"), ["a", "b"], "read", 2, 7)]
    assert found == {"key": key, "prices": {"a": {"us": 1.0}}, "rounds": 2, "calls": 7, "kernel": "k"}
    for error, says in ((None, "no call recorded"), ("its arguments could not be saved", None)):
        nothing = {"key": key, "file": None, "error": error, "candidates": ["a", "b"]}
        assert prices.price_decision(nothing, str(tmp_path), "read", 2, 7) == {"key": key, "error": says or error}
    assert len(seen) == 1  # no record: nothing priced


def test_a_decision_is_kept_where_its_call_cannot_be_recorded(tmp_path):
    tuner = types.SimpleNamespace(base_fn=test_a_decision_is_kept_where_its_call_cannot_be_recorded)
    (tmp_path / "a-file").write_text("")
    for folder in (tmp_path / "missing", tmp_path / "a-file"):
        why = _calls.record(tuner, (torch.ones(2),), {}, None, [], str(folder / "call.pt"))
        assert why == f"the folder it would be recorded in, {str(folder)!r}, is not a folder"
    assert _calls.record(tuner, (torch.ones(2),), {}, None, [], str(tmp_path / "call.pt")) is None  # the control
