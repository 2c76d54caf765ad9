"""One pick for every rank and every run (#68): the store, the pick file, and the real Triton
Autotuner under Triton's interpreter in jobs of several ranks launched by ``torchrun`` (gloo),
where each rank's timings jitter so that the autotuner's own pick differs between ranks."""

import importlib.util
import inspect
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import types
import warnings

import pytest

import cleanflush
from cleanflush import _agree

from .conftest import environ_without_cleanflush
from .triton_layout import needs_autotune_do_bench

torch_distributed = pytest.importorskip("torch.distributed")

DECISION = _agree.Decision("triton", "lib.k", "(256,)", ("BLOCK: 16", "BLOCK: 32"), "abc")

# ---- the store, on a real torch.distributed store ----------------------------------------


def test_the_first_pick_published_is_every_ranks_pick(monkeypatch):
    store = torch_distributed.HashStore()
    cleanflush.pick_store(store)
    assert _agree.published(DECISION, chooses=True) is None  # nothing published yet
    monkeypatch.setenv("RANK", "0")
    assert _agree.publish(DECISION, "BLOCK: 32", 0.0123, chooses=True) is None  # rank 0's is the first
    monkeypatch.setenv("RANK", "1")
    lost = _agree.publish(DECISION, "BLOCK: 16", 0.0120, chooses=True)
    assert lost == _agree.Agreed("BLOCK: 32", "rank 0", 0.0123)  # rank 1 takes rank 0's
    assert _agree.published(DECISION, chooses=True) == lost  # a rank that comes later finds it before tuning
    other = _agree.Decision("triton", "lib.k", "(256,)", ("BLOCK: 16", "BLOCK: 64"), "abc")
    assert _agree.published(other, chooses=True) is None  # other candidate configs: another decision


def test_the_store_is_used_under_a_rule_that_chooses_unless_turned_on_or_off(monkeypatch):
    cleanflush.pick_store(torch_distributed.HashStore())
    assert _agree.active(chooses=True) and not _agree.active(chooses=False)  # auto: under stable only
    monkeypatch.setenv("CLEANFLUSH_PICK_STORE", "on")
    assert _agree.active(chooses=False)
    monkeypatch.setenv("CLEANFLUSH_PICK_STORE", "off")
    assert not _agree.active(chooses=True)
    monkeypatch.setenv("CLEANFLUSH_PICK_STORE", "sometimes")
    with pytest.warns(
        RuntimeWarning, match="CLEANFLUSH_PICK_STORE='sometimes' is not valid; use one of: auto, on, off"
    ):
        assert _agree.active(chooses=True)


def test_no_store_without_a_process_group_of_several_ranks():
    assert not torch_distributed.is_initialized()
    assert _agree.active(chooses=True) is False and _agree.publish(DECISION, "BLOCK: 16", None, True) is None


def test_two_jobs_on_one_store_never_mix(monkeypatch):
    shared = torch_distributed.HashStore()
    cleanflush.pick_store(shared)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-a")
    assert _agree.publish(DECISION, "BLOCK: 32", None, True) is None
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job-b")
    cleanflush.pick_store(shared)  # the next job, on the same store
    assert _agree.published(DECISION, True) is None


class Hanging:
    """A store whose server stopped answering: every call blocks."""

    def __init__(self):
        self.release = threading.Event()

    def check(self, keys):
        self.release.wait()
        return False

    compare_set = get = check


def test_a_store_that_does_not_answer_is_given_up_in_bounded_time_said_once(monkeypatch):
    hanging = Hanging()  # a stand-in: a real store that hangs needs a server that stops answering
    monkeypatch.setattr(_agree, "STORE_TIMEOUT_S", 0.2)
    monkeypatch.setattr(_agree, "_store", lambda chooses: None if _agree.STORE.dead else hanging)
    started = time.monotonic()
    with pytest.warns(RuntimeWarning, match="no longer agreed through the job.s store .it did not answer in 0.2 s"):
        assert _agree.published(DECISION, True) is None
    assert _agree.publish(DECISION, "BLOCK: 16", None, True) is None  # given up: asked no more
    assert time.monotonic() - started < 2
    hanging.release.set()


@pytest.mark.parametrize(
    "text",
    [
        b"not json",
        json.dumps({"v": 99, "pick": "BLOCK: 16"}),
        json.dumps({"v": 1, "pick": 16}),
        json.dumps(["BLOCK: 16"]),
        b"\xff\xfe",
        "[" * 100000,  # written by hand, deeper than the parser goes
        json.dumps({"v": 1, "pick": "BLOCK: 16", "pad": "x" * (64 << 10)}),  # too large to be ours
    ],
)
def test_a_published_pick_that_is_none_is_not_taken(text):
    with pytest.warns(RuntimeWarning, match="could not be read"):
        assert _agree.read_payload(text) is None


def test_a_published_picks_time_too_large_for_a_float_is_no_time():
    text = '{"v": 1, "pick": "BLOCK: 16", "ms": 1' + "0" * 400 + ', "rank": 1}'  # JSON's integers have no bound
    assert _agree.read_payload(text) == _agree.Agreed("BLOCK: 16", "rank 1", None)


# ---- the pick file ---------------------------------------------------------------------

HERE = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "triton": "3.6.0"}


def kept(decision=DECISION, pick="BLOCK: 32", **changes):
    entry = _agree.Entry(decision, pick, "stable", "write-read", {"BLOCK: 16": 1.0, "BLOCK: 32": 0.99}, **HERE,
                         written=time.time(), host="h", pid=1)  # fmt: skip
    for name, value in changes.items():
        setattr(entry, name, value)
    return entry


def test_a_pick_file_keeps_a_runs_picks_and_a_later_run_takes_them(tmp_path, monkeypatch):
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    _agree.write(kept())
    _agree.FILE.stamp = None  # another process
    assert _agree.in_file(DECISION, HERE) == _agree.Agreed("BLOCK: 32", "the pick file", 0.99)
    data = json.loads((tmp_path / "picks.json").read_text())
    assert data["format"] == "cleanflush picks" and data["version"] == 1 and len(data["entries"]) == 1


@pytest.mark.parametrize(
    ("changed", "why"),
    [
        ({"configs": ("BLOCK: 16", "BLOCK: 32", "BLOCK: 64")}, "its candidate configs are others now"),
        ({"kernel": "def"}, "the kernel's source changed"),
        ({"gpu": "NVIDIA H200"}, "another gpu"),
        ({"triton": "3.7.1"}, "another triton"),
        ({"torch": "2.13.0"}, "another torch"),
    ],
)
def test_an_entry_that_no_longer_matches_is_tuned_again_said_once(tmp_path, monkeypatch, capsys, changed, why):
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    _agree.write(kept())
    here = {**HERE, **{k: v for k, v in changed.items() if k in HERE}}
    decision = _agree.Decision(**{**vars(DECISION), **{k: v for k, v in changed.items() if k not in HERE}})
    assert _agree.in_file(decision, here) is None
    assert _agree.in_file(decision, here) is None
    said = [line for line in capsys.readouterr().err.splitlines() if "tuned again here" in line]
    assert len(said) == 1 and why in said[0]


@pytest.mark.parametrize(
    "content",
    [
        "{ torn",
        json.dumps({"format": "cleanflush picks", "version": 2, "entries": []}),
        json.dumps({"format": "something else"}),
        json.dumps({"format": "cleanflush picks", "version": 1, "entries": [{"decision": "x"}]}),
        json.dumps({"format": "cleanflush picks", "version": 1, "entries": {"a": 1}}),
        "[" * 100000 + "]" * 100000,  # deeper than the parser goes
        "\udcff not utf-8".encode("utf-8", "surrogateescape").decode("latin-1"),
        json.dumps({"format": "cleanflush picks", "version": 1, "entries": [{**kept().line(), "written": 0}]}).replace(
            '"written": 0',
            '"written": 1' + "0" * 400,  # an integer too large for a float
        ),
        json.dumps({"format": "cleanflush picks", "version": 1, "entries": [kept().line()]}).replace(
            '"BLOCK: 16": 1.0', '"BLOCK: 16": -1' + "0" * 400
        ),
    ],
)
def test_a_torn_or_hostile_or_other_version_file_is_one_line_and_nothing_taken(tmp_path, monkeypatch, capsys, content):
    path = tmp_path / "picks.json"
    path.write_text(content)
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(path))
    assert _agree.in_file(DECISION, HERE) is None
    said = [line for line in capsys.readouterr().err.splitlines() if "picks.json cannot be read" in line]
    assert len(said) == 1 and said[0].startswith("cleanflush: CLEANFLUSH_PICK_FILE: ")


@pytest.mark.parametrize("behind_a_link", [False, True])
def test_a_fifo_in_place_of_the_pick_file_is_never_read_and_nothing_waits_for_it(tmp_path, monkeypatch, behind_a_link):
    from cleanflush.cli import status

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it to read waits for a writer; reading it may never end
    path = tmp_path / "picks.json"
    path.symlink_to(fifo) if behind_a_link else os.replace(fifo, path)
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(path))
    found: list[object] = []
    reader = threading.Thread(target=lambda: found.extend([_agree.in_file(DECISION, HERE), status.agreement_says(
        {"CLEANFLUSH_PICK_FILE": str(path)})]), daemon=True)  # fmt: skip
    reader.start()
    reader.join(20)
    if reader.is_alive():  # let the reader go before failing: a writer ends its wait
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading the pick file waited for a writer of a FIFO")
    assert found[0] is None and "(unreadable: it is not a regular file; its picks are not taken)" in str(found[1])


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('{"name": "my-app", "dependencies": {}}', "it is not a cleanflush pick file"),
        (json.dumps({"format": "cleanflush picks", "version": 2, "entries": [{"new": 1}]}), "it is version 2"),
        ("{ torn", "Expecting property name"),
    ],
)
def test_a_file_the_pick_file_cannot_read_is_never_written_over_said_once(tmp_path, monkeypatch, capsys, content, why):
    path = tmp_path / "picks.json"
    path.write_text(content)
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(path))
    _agree.write(kept())
    _agree.write(kept(decision=_agree.Decision(**{**vars(DECISION), "key": "(512,)"})))
    assert path.read_text() == content and [p.name for p in tmp_path.iterdir()] == ["picks.json"]
    said = [line for line in capsys.readouterr().err.splitlines() if "picks are not kept" in line]
    assert len(said) == 1 and f"cannot write {path} (it is left as it is: {why}" in said[0]


def test_a_fifo_in_place_of_the_one_pick_file_is_never_replaced(tmp_path, monkeypatch, capsys):
    path = tmp_path / "picks.json"
    os.mkfifo(path)  # as /dev/null would be: a root process renamed a regular file over it
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(path))
    _agree.write(kept())
    assert stat.S_ISFIFO(os.lstat(path).st_mode) and [p.name for p in tmp_path.iterdir()] == ["picks.json"]
    assert "(it is left as it is: it is not a regular file); picks are not kept" in capsys.readouterr().err


def test_an_empty_pick_file_is_written(tmp_path, monkeypatch):
    path = tmp_path / "picks.json"
    path.touch()
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(path))
    _agree.write(kept())
    _agree.FILE.stamp = None  # another process
    assert _agree.in_file(DECISION, HERE) == _agree.Agreed("BLOCK: 32", "the pick file", 0.99)


def test_a_pick_that_is_none_of_the_decisions_configs_is_not_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    _agree.write(kept(pick="__import__('os').system('true')"))
    assert _agree.in_file(DECISION, HERE) is None


def test_a_pick_file_that_is_a_link_is_never_written_through(tmp_path, monkeypatch, capsys):
    target = tmp_path / "elsewhere.json"
    target.write_text("mine")
    (tmp_path / "picks.json").symlink_to(target)
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    _agree.write(kept())
    assert target.read_text() == "mine" and (tmp_path / "picks.json").is_symlink()
    assert "it is a symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.json", "picks.json"]  # no temporary left


def test_a_folder_holds_a_file_per_process_and_every_reader_takes_the_earliest(tmp_path, monkeypatch):
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks") + os.sep)
    _agree.write(kept(pick="BLOCK: 16", written=2.0))
    (own,) = (tmp_path / "picks").iterdir()
    assert own.name == f"picks-{socket.gethostname()}-{os.getpid()}.json"
    other = json.loads(own.read_text())
    other["entries"][0].update(pick="BLOCK: 32", written=1.0, pid=7)
    (tmp_path / "picks" / "picks-other-7.json").write_text(json.dumps(other))
    assert _agree.in_file(DECISION, HERE).pick == "BLOCK: 32"  # the earliest written


WRITER = """
import os, sys, time
from cleanflush import _agree
d = _agree.Decision("triton", "lib.k", "({0},)", ("BLOCK: 16", "BLOCK: 32"), "abc")
for n in range(5):
    d = _agree.Decision("triton", "lib.k", f"({{os.getpid()}}, {{n}})", d.configs, "abc")
    _agree.write(_agree.entry(d, "BLOCK: 16", "stable", "write-read", {{}}))
"""


def test_many_processes_writing_one_pick_file_at_once_lose_no_entry(tmp_path):
    env = {**environ_without_cleanflush(), "CLEANFLUSH_PICK_FILE": str(tmp_path / "picks.json")}
    children = [
        subprocess.Popen([sys.executable, "-c", WRITER.format(i)], env=env, stderr=subprocess.PIPE, text=True)
        for i in range(8)
    ]
    errors = [child.communicate(timeout=120)[1] for child in children]
    assert all(child.returncode == 0 for child in children), errors
    entries = json.loads((tmp_path / "picks.json").read_text())["entries"]
    assert len(entries) == 40 and len({e["decision"]["key"] for e in entries}) == 40
    assert [p.name for p in tmp_path.iterdir()] == ["picks.json"]  # no temporary left behind


# ---- the real autotuner: ranks of one job, and fresh runs ---------------------------------

RANKS_JOB = """
import json, os, random, sys, time
import torch, triton, triton.language as tl
import cleanflush
import torch.distributed as dist

STORE = os.environ.get("OWN_STORE")
if STORE:  # a TCPStore of the job's own, hosted by rank 0, named to cleanflush
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    store = dist.TCPStore("127.0.0.1", int(STORE), world, rank == 0, wait_for_workers=True)
    cleanflush.pick_store(store)
else:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
rng = random.Random(1000 * int(os.environ.get("SEED", "0")) + rank)
BASE = {16: 1.000, 32: 1.002, 64: 1.004, 128: 1.5}
block, tuned = [], []

def jitter_bench(kernel_call, quantiles=None, **kw):
    kernel_call()
    if os.environ.get("DIE") == str(rank) and len(tuned) == 2:
        os._exit(0)  # this rank dies in the middle of a sweep
    tuned.append(block[-1])
    t = BASE[block[-1]] * (1 + rng.uniform(-0.01, 0.01))
    return [t, t, t]

def pre(nargs):
    block.append(nargs["BLOCK"])

def own_configs(configs, named_args, **kwargs):  # a library's pruner that makes configs of its own
    return [triton.Config(dict(c.kwargs), num_warps=2, pre_hook=pre) for c in configs]

def one_key(configs, named_args, **kwargs):  # a library's pruner that keeps its tuner's cache to one key
    for key in list(add_one.cache):
        del add_one.cache[key]
    return configs

PRUNE = {"early_config_prune": own_configs} if os.environ.get("PRUNER") else None
PRUNE = {"early_config_prune": one_key} if os.environ.get("ONE_KEY") else PRUNE

@triton.autotune(configs=[triton.Config({"BLOCK": b}, pre_hook=pre) for b in BASE], key=["n"], do_bench=jitter_bench,
                 restore_value=["x_ptr"], prune_configs_by=PRUNE)
@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=m) + 1, mask=m)

keys = [64, 128, 192, 256]
if os.environ.get("ORDER") == "rotated":  # each rank its own order, and a key of its own
    keys = keys[rank % len(keys):] + keys[:rank % len(keys)] + [1000 + rank]
if os.environ.get("STORE_GONE"):
    if rank == 0:
        os._exit(0)  # the rank that hosts the store leaves before anyone tunes
    time.sleep(1)
time.sleep(float(os.environ.get("STAGGER", "0")) * rank)
picks, swept, timed = {}, {}, {}
for n in keys:
    x = torch.zeros(n)
    before = len(tuned)
    add_one[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, n)
    assert float(x.sum()) == n
    picks[n], swept[n], timed[n] = add_one.best_config.kwargs["BLOCK"], len(tuned) > before, len(tuned) - before
with open(os.path.join(os.environ["OUT"], f"rank-{rank}.json"), "w") as f:
    json.dump({"picks": picks, "swept": swept, "timed": timed, "world": world}, f)
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(tmp_path, ranks, env=None, nodes=1, timeout=240):
    """The job on ``ranks`` ranks of ``nodes`` torchrun launchers on this host (a c10d
    rendezvous where there are two); each rank's result, by rank."""
    job = tmp_path / "ranks_job.py"
    job.write_text(RANKS_JOB)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    full = {**environ_without_cleanflush(), "TRITON_INTERPRET": "1", "OUT": str(out), "CLEANFLUSH": "1", **(env or {})}
    per_node, port = ranks // nodes, free_port()
    launch = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}", f"--nproc-per-node={per_node}"]
    if nodes == 1:
        launch += [f"--master-port={port}", "--master-addr=127.0.0.1"]
    else:
        launch += ["--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=cleanflush-test"]
    started = time.monotonic()
    launchers = [
        subprocess.Popen([*launch, str(job)], env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(nodes)
    ]
    outputs = [launcher.communicate(timeout=timeout) for launcher in launchers]
    for launcher, (_, err) in zip(launchers, outputs):
        assert launcher.returncode == 0, err[-4000:]
    found = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in out.glob("rank-*.json")}
    return found, time.monotonic() - started, "".join(err for _, err in outputs)


def alike(found, keys=("64", "128", "192", "256")):
    """The keys every rank that tuned them picked alike."""
    return {k for k in keys if len({r["picks"][k] for r in found.values() if k in r["picks"]}) == 1}


@needs_autotune_do_bench
@pytest.mark.parametrize("ranks", [4, 8])
def test_every_rank_keeps_the_same_pick_through_the_store_and_not_without_it(tmp_path, ranks):
    found, _, _ = torchrun(tmp_path, ranks, {"CLEANFLUSH_PICK_STORE": "on", "SEED": "1"})
    assert sorted(found) == list(range(ranks)) and alike(found) == {"64", "128", "192", "256"}
    control, _, _ = torchrun(tmp_path, ranks, {"CLEANFLUSH_PICK_STORE": "off", "SEED": "1"})
    assert len(alike(control)) < 4  # the negative control: jitter decides each rank's own pick


@needs_autotune_do_bench
def test_a_rank_that_finds_the_pick_published_skips_the_tuning(tmp_path):
    found, _, _ = torchrun(tmp_path, 4, {"CLEANFLUSH_PICK": "stable", "STAGGER": "2"})
    assert alike(found) == {"64", "128", "192", "256"}  # stable turns the store on by itself
    assert all(found[0]["swept"].values())  # rank 0 came first and tuned every key
    assert not any(v for r in (1, 2, 3) for v in found[r]["swept"].values())  # the others took its picks


@needs_autotune_do_bench
def test_a_rank_that_finds_the_pick_published_times_only_that_config_where_a_pruner_makes_them(tmp_path):
    found, _, _ = torchrun(tmp_path, 2, {"CLEANFLUSH_PICK": "stable", "STAGGER": "2", "PRUNER": "1"})
    assert alike(found) == {"64", "128", "192", "256"}
    assert min(found[0]["timed"].values()) >= 4  # rank 0 came first and tuned every config its pruner made
    assert set(found[1]["timed"].values()) <= {0, 1}  # rank 1 only the published pick, if that


@needs_autotune_do_bench
def test_ranks_that_tune_other_keys_in_other_orders_and_one_that_dies_mid_tune_never_hang(tmp_path):
    env = {"CLEANFLUSH_PICK_STORE": "on", "ORDER": "rotated", "DIE": "3"}
    found, took, _ = torchrun(tmp_path, 4, env, timeout=240)
    assert sorted(found) == [0, 1, 2]  # rank 3 died in its first sweep, the others finished
    assert alike(found) == {"64", "128", "192", "256"}
    assert all(f"{1000 + r}" in found[r]["picks"] for r in found)  # each rank's own key, tuned by it alone


@needs_autotune_do_bench
def test_a_store_that_goes_away_leaves_each_rank_its_own_pick_said_once(tmp_path):
    env = {"CLEANFLUSH_PICK_STORE": "on", "OWN_STORE": str(free_port()), "STORE_GONE": "1"}
    found, took, stderr = torchrun(tmp_path, 3, env, timeout=240)
    assert sorted(found) == [1, 2] and all(len(r["picks"]) == 4 for r in found.values())
    assert stderr.count("picks are no longer agreed through the job's store") == 2  # once a rank


@needs_autotune_do_bench
def test_two_nodes_on_one_host_agree_through_the_store_as_one_node_does(tmp_path):
    found, _, _ = torchrun(tmp_path, 4, {"CLEANFLUSH_PICK_STORE": "on", "SEED": "2"}, nodes=2)
    assert sorted(found) == [0, 1, 2, 3] and alike(found) == {"64", "128", "192", "256"}


ONE_PROCESS = '    dist.init_process_group("gloo")\n    rank, world = dist.get_rank(), dist.get_world_size()'
RUN_JOB = RANKS_JOB.replace(ONE_PROCESS, "    rank, world = 0, 1")  # a plain run: no process group


def fresh_run(tmp_path, seed, **env):
    job = tmp_path / "run_job.py"
    job.write_text(RUN_JOB)
    out = tmp_path / f"out-{seed}"
    out.mkdir()
    full = {**environ_without_cleanflush(), "TRITON_INTERPRET": "1", "OUT": str(out), "SEED": str(seed), **env}
    child = subprocess.run([sys.executable, str(job)], env=full, capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads((out / "rank-0.json").read_text()), child.stderr


@needs_autotune_do_bench
def test_fresh_runs_with_a_pick_file_keep_the_first_runs_picks(tmp_path):
    picks = tmp_path / "picks.json"
    runs = [fresh_run(tmp_path, seed, CLEANFLUSH_PICK_FILE=str(picks))[0] for seed in range(4)]
    assert all(run["picks"] == runs[0]["picks"] for run in runs)
    assert all(runs[0]["swept"].values()) and not any(v for run in runs[1:] for v in run["swept"].values())
    control = [fresh_run(tmp_path, 10 + seed, CLEANFLUSH="1")[0]["picks"] for seed in range(4)]
    assert any(c != control[0] for c in control)  # the negative control: no file, each run its own
    entries = json.loads(picks.read_text())["entries"]
    assert {e["decision"]["key"] for e in entries} == {"(64, 'torch.float32')", "(128, 'torch.float32')",
                                                       "(192, 'torch.float32')", "(256, 'torch.float32')"}  # fmt: skip
    assert all(e["gpu"] == "cpu" and e["triton"] and e["rule"] == "fastest" and e["timings_ms"] for e in entries)


@needs_autotune_do_bench
def test_an_entry_for_other_configs_is_tuned_again_and_said(tmp_path):
    picks = tmp_path / "picks.json"
    fresh_run(tmp_path, 0, CLEANFLUSH_PICK_FILE=str(picks))
    data = json.loads(picks.read_text())
    for entry in data["entries"]:
        entry["decision"]["configs"] = entry["decision"]["configs"][:-1]  # the job's configs changed since
    picks.write_text(json.dumps(data))
    run, stderr = fresh_run(tmp_path, 1, CLEANFLUSH_PICK_FILE=str(picks))
    assert all(run["swept"].values())
    assert stderr.count("is tuned again here: its candidate configs are others now") == 4


@needs_autotune_do_bench
@pytest.mark.parametrize("one_key", ["", "1"])  # "": the control, every key kept in the tuner's cache
def test_every_key_tuned_is_kept_in_the_pick_file_where_a_hook_deletes_keys_meanwhile(tmp_path, one_key):
    """A library's pruner that deletes the keys tuned before (a cache of one key) runs inside
    ``Autotuner.run``: the call tunes a key and the cache holds as many as before it."""
    picks = tmp_path / "picks.json"
    run, _ = fresh_run(tmp_path, 0, CLEANFLUSH_PICK_FILE=str(picks), ONE_KEY=one_key)
    assert all(run["swept"].values())
    keys = {e["decision"]["key"] for e in json.loads(picks.read_text())["entries"]}
    assert keys == {f"({n}, 'torch.float32')" for n in (64, 128, 192, 256)}


def test_a_key_stored_again_is_not_added_again_so_a_library_that_restores_its_pick_costs_nothing():
    from cleanflush._tunercache import TunerCache

    cache = TunerCache({}, types.SimpleNamespace())
    cache.keep("a", 1)
    cache.keep("a", 2)  # a library writing its pick back at every call: not a tuning
    cache.keep("b", 3)
    del cache["a"]
    cache.keep("a", 4)  # deleted, then tuned again: a tuning
    assert cache.added == ["a", "b", "a"] and cache.data == {"a": 4, "b": 3}


def test_pick_store_is_public_and_names_the_store_picks_are_agreed_through():
    store = torch_distributed.HashStore()
    cleanflush.pick_store(store)
    assert "pick_store" in cleanflush.__all__ and _agree.STORE.named is store
    cleanflush.pick_store()
    assert _agree.STORE.named is None


DISK_JOB = """
import json, os, random
import torch, triton, triton.language as tl
from triton.backends.compiler import GPUTarget

class Target:  # a stand-in: Triton's disk cache names the GPU it tuned for, and the interpreter has none
    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

triton.runtime.driver.set_active(Target())
rng = random.Random(int(os.environ["SEED"]))
BASE = {16: 1.004, 32: 1.000, 64: 1.5}  # 32 the fastest, 16 first in order within the band
which = torch.zeros(1)

def jitter_bench(kernel_call, quantiles=None, **kw):
    kernel_call()
    t = BASE[int(which.item())] * (1 + rng.uniform(-0.0002, 0.0002))
    return [t, t, t]

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in BASE], key=["n"], do_bench=jitter_bench,
                 restore_value=["x_ptr"])
@triton.jit
def add_one(x_ptr, which_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=m) + 1, mask=m)
    tl.store(which_ptr, BLOCK)

# the interpreter turns Triton's disk cache off; the job asks for it, with the interpreter's kernel
# standing for the compiled one the cache key names (a stand-in: nothing compiles here)
import triton.runtime.autotuner as autotuner
from triton.runtime.interpreter import InterpretedFunction
autotuner.JITFunction, add_one.fn.cache_key = InterpretedFunction, "interpreted add_one"
add_one.cache_results = True
x = torch.zeros(256)
add_one[lambda meta: (triton.cdiv(256, meta["BLOCK"]),)](x, which, 256)
timings = {c.kwargs["BLOCK"]: t[0] for c, t in add_one.configs_timings.items()}
print(json.dumps({"pick": add_one.best_config.kwargs["BLOCK"], "timings": timings}))
"""


@needs_autotune_do_bench
def test_triton_disk_cache_readers_keep_the_writers_stable_pick(tmp_path):
    env = {"TRITON_CACHE_DIR": str(tmp_path / "triton"), "CLEANFLUSH_PICK": "stable", "CLEANFLUSH": "1"}
    job = tmp_path / "disk_job.py"
    job.write_text(DISK_JOB)

    def run(seed):
        full = {**environ_without_cleanflush(), "TRITON_INTERPRET": "1", "SEED": str(seed), **env}
        child = subprocess.run([sys.executable, str(job)], env=full, capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr[-3000:]
        return json.loads(child.stdout.strip().splitlines()[-1])

    writer = run(0)
    assert writer["pick"] == 16  # the stable pick, not the sweep's fastest
    measured = writer["timings"]
    assert min(measured, key=measured.get) == "32"  # what the job sees is what was measured
    (written,) = (tmp_path / "triton").rglob("*.autotune.json")
    in_file = {c["kwargs"]["BLOCK"]: t[0] for c, t in json.loads(written.read_text())["configs_timings"]}
    assert min(in_file, key=in_file.get) == 16 and in_file[32] == measured["32"]  # kept at the fastest's less a hair
    readers = [run(seed) for seed in (1, 2)]
    assert [r["pick"] for r in readers] == [16, 16]  # every reader keeps the writer's pick


# ---- what cleanflush status says of it --------------------------------------------------


def test_status_says_where_picks_are_agreed_and_what_the_pick_file_holds(tmp_path):
    from cleanflush.cli import status

    assert status.agreement_says({}).startswith("ranks keep their own picks")  # fastest: the store only when on
    assert status.agreement_says({"CLEANFLUSH_PICK": "stable"}).startswith("ranks of a torch.distributed job agree")
    assert status.agreement_says({"CLEANFLUSH_PICK_STORE": "on"}).startswith("ranks of a torch.distributed job agree")
    said = status.agreement_says({"CLEANFLUSH_PICK": "stable", "CLEANFLUSH_PICK_STORE": "off"})
    assert said.startswith("ranks keep their own picks") and said.endswith("CLEANFLUSH_PICK_FILE unset")
    assert status.agreement_says({"CLEANFLUSH": "0", "CLEANFLUSH_PICK": "stable"}).startswith("nothing agreed")
    picks = tmp_path / "picks.json"
    assert "(none written yet)" in status.agreement_says({"CLEANFLUSH_PICK_FILE": str(picks)})
    picks.write_text("{ torn")
    assert "unreadable: " in status.agreement_says({"CLEANFLUSH_PICK_FILE": str(picks)})
    hostile = {"format": "cleanflush picks", "version": 1, "entries": [{**kept().line(), "written": 0}]}
    picks.write_text(json.dumps(hostile).replace('"written": 0', '"written": 1' + "0" * 400))
    said = status.agreement_says({"CLEANFLUSH_PICK_FILE": str(picks)})  # one line, no traceback
    assert said.endswith("(unreadable: an entry has no written time or pid; its picks are not taken)")
    bad = status.agreement_says({"CLEANFLUSH_PICK_STORE": "sometimes"})
    assert bad.startswith("INVALID: CLEANFLUSH_PICK_STORE='sometimes' is not valid; use one of: auto, on, off")
    assert status.setting_problems({"CLEANFLUSH_PICK_STORE": "sometimes"}) == [
        bad[len("INVALID: ") :].split("; ranks")[0]
    ]


def test_status_of_a_folder_with_one_unreadable_file_counts_the_others_and_names_it(tmp_path, monkeypatch):
    from cleanflush.cli import status

    folder = tmp_path / "picks"
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(folder) + os.sep)
    _agree.write(kept())
    (folder / "picks-other-7.json").write_text("{ torn")
    said = status.agreement_says({"CLEANFLUSH_PICK_FILE": str(folder) + os.sep})
    assert said.endswith(
        "(1 decision(s) in 1 file(s); 1 unreadable, whose picks are not taken (picks-other-7.json: Expecting "
        "property name enclosed in double quotes: line 1 column 3 (char 2)))"
    )
    _agree.FILE.stamp = None  # another process: the readable file's pick is taken, as status says
    assert _agree.in_file(DECISION, HERE) == _agree.Agreed("BLOCK: 32", "the pick file", 0.99)


def test_a_pick_file_alone_turns_cleanflush_on_at_start_up(tmp_path):
    from .conftest import run_python

    code = "import torch, cleanflush; print(cleanflush.is_installed())"
    assert run_python(code, env={"CLEANFLUSH_PICK_FILE": str(tmp_path / "p.json")}).stdout.strip() == "True"
    out = run_python("import sys, torch; print('cleanflush' in sys.modules)")
    assert out.stdout.strip() == "False"  # the negative control: nothing set, nothing loaded


@needs_autotune_do_bench
def test_fresh_runs_keep_the_first_runs_picks_where_a_pruner_makes_configs_of_its_own(tmp_path):
    picks = tmp_path / "picks.json"
    runs = [fresh_run(tmp_path, seed, CLEANFLUSH_PICK_FILE=str(picks), PRUNER="1")[0] for seed in range(4)]
    assert all(run["picks"] == runs[0]["picks"] for run in runs)  # taken where the pick is stored
    assert set(runs[0]["timed"].values()) == {4}  # the first run tunes every config its pruner made
    assert all(set(run["timed"].values()) <= {0, 1} for run in runs[1:])  # later ones only the file's pick, if that
    control = [fresh_run(tmp_path, 10 + seed, CLEANFLUSH="1", PRUNER="1")[0]["picks"] for seed in range(4)]
    assert any(c != control[0] for c in control)  # the negative control: no file, each run its own


@needs_autotune_do_bench
def test_ranks_agree_through_the_store_where_the_pick_files_pick_is_no_config_their_pruner_makes(tmp_path):
    picks = tmp_path / "picks.json"
    fresh_run(tmp_path, 0, CLEANFLUSH_PICK_FILE=str(picks), PRUNER="1")
    # the same decisions, but picks that the pruner no longer makes (it made num_warps=2)
    picks.write_text(picks.read_text().replace("num_warps: 2", "num_warps: 3"))
    env = {"CLEANFLUSH_PICK_FILE": str(picks), "CLEANFLUSH_PICK_STORE": "on", "PRUNER": "1", "SEED": "1"}
    found, _, _ = torchrun(tmp_path, 4, env)
    assert sorted(found) == [0, 1, 2, 3] and alike(found) == {"64", "128", "192", "256"}  # the store's pick
    control, _, _ = torchrun(tmp_path, 4, {**env, "CLEANFLUSH_PICK_STORE": "off"})
    assert len(alike(control)) < 4  # the negative control: the file taken nowhere, each rank its own


# ---- what each hook names a decision by (#70's mutation sample, seed 20261207) ------------

KERNEL_SOURCE = """
import triton, triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (16, 32)], key=["n"])
@triton.jit
def add(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i) + ADDED)
"""


def autotuned(tmp_path, folder, added):
    """The kernel ``kern.add`` as a module of that name in ``folder`` defines it (a run of a job)."""
    pytest.importorskip("triton")
    path = tmp_path / folder / "kern.py"
    path.parent.mkdir()
    path.write_text(KERNEL_SOURCE.replace("ADDED", added))
    spec = importlib.util.spec_from_file_location("kern", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.add


def test_a_triton_decision_names_its_kernels_source_so_a_changed_kernel_is_tuned_again(tmp_path, monkeypatch, capsys):
    from cleanflush import _autotuner, _tunercache

    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    key = (256, "torch.float32")
    first = autotuned(tmp_path, "first", "1")
    decision = _autotuner.decision_of(_tunercache.cache_of(first), key)
    _agree.write(_agree.entry(decision, str(first.configs[1]), "stable", "write", {}))
    same = autotuned(tmp_path, "same", "1")  # the same source in a later run: the file's pick is taken
    assert key in _tunercache.cache_of(same) and same.cache[key] is same.configs[1]
    changed = autotuned(tmp_path, "changed", "2")  # the same kernel name, key and configs; another source
    assert key not in _tunercache.cache_of(changed)
    assert "kern.add (256, 'torch.float32') is tuned again here: the kernel's source changed" in capsys.readouterr().err


def test_a_tuner_whose_picks_cannot_be_seen_is_said_once_where_picks_are_agreed(tmp_path, monkeypatch):
    from cleanflush import _autotuner

    class Own(dict):
        pass

    def tuner(name):  # a library's tuner that keeps its picks in a mapping of its own, every key cached
        return types.SimpleNamespace(
            cache=Own({(256,): "BLOCK: 16"}), fn=types.SimpleNamespace(__module__="lib", __name__=name)
        )

    untuned = tuner("k")
    assert _autotuner._run(lambda: "ran", tuner("control"), (), {}) == "ran"  # no file, no store: nothing to say
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    said = "^cleanflush: lib.k keeps its picks in a Own, not a dict: agreeing on picks cannot see them"
    with pytest.warns(RuntimeWarning, match=said):
        assert _autotuner._run(lambda: "ran", untuned, (), {}) == "ran"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _autotuner._run(lambda: "ran", untuned, (), {}) == "ran"  # said once
    assert type(untuned.cache) is Own and not (tmp_path / "picks.json").exists()


def inductor_kernel(sweep, size_hints=None):
    from .test_pick import kernel_tuner

    tuner, launchers, timed = kernel_tuner(sweep, {1: 1.003, 8: 1.0})
    tuner.size_hints = size_hints or tuner.size_hints
    return tuner, launchers, timed


def test_inductors_kernel_configs_are_kept_in_the_pick_file_and_taken_for_the_same_kernel_and_sizes(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    tuner, launchers, _ = inductor_kernel({1: 1.004, 8: 1.0})  # 8 the fastest, 1 first within the band
    with cleanflush.pick("stable"):
        tuner.autotune_to_one_config()
    assert tuner.launchers == [launchers[1]]
    [entry] = json.loads((tmp_path / "picks.json").read_text())["entries"]
    assert entry["decision"]["kind"] == "inductor-kernel" and entry["decision"]["op"] == "triton_red_fused_mv_0"
    assert entry["decision"]["key"] == "{'x': 4096, 'r0_': 4096}" and entry["rule"] == "stable"
    assert entry["pick"] == str(launchers[1].config)
    later, launchers, timed = inductor_kernel({1: 1.5, 8: 1.0})  # a later run, where 8 is clearly faster
    later.autotune_to_one_config()
    assert later.launchers == [launchers[1]] and timed == [] and launchers[8].kernel.closed  # the file's, untimed
    other, launchers, timed = inductor_kernel({1: 1.5, 8: 1.0}, size_hints={"x": 2048, "r0_": 4096})
    other.autotune_to_one_config()  # the control: other sizes are another decision, tuned here
    assert other.launchers == [launchers[8]] and len(timed) == 2


class Choice:
    """An algorithm-selection choice as Inductor names one (``name`` with its running index)."""

    def __init__(self, name, description):
        self.name, self.description = name, description


class Node:
    """An input node: its size and dtype."""

    def __init__(self, *size):
        self.size = size

    def get_size(self):
        return list(self.size)

    def get_dtype(self):
        return "torch.bfloat16"


def selected(sweep, again, inputs, rule="fastest"):
    """Inductor's algorithm selection among three choices (its ``autotune`` as a stand-in with the
    installed one's parameters, the rule's wrapper around it): the timings it hands back, the
    choices, and how often a choice was timed again."""
    select = pytest.importorskip("torch._inductor.select_algorithm")
    from cleanflush import _inductor_pick

    choices = [Choice(f"triton_mm_{index}", f"BLOCK_M={m}") for index, m in ((3, 64), (4, 128))]
    choices.append(Choice("mkl_linear", ""))
    swept = dict(zip(choices, sweep))

    def autotune(self, name, input_nodes, layout, input_gen_fns, choices, hint_override=None, is_collective=False,
                 precompile_key=None):  # fmt: skip
        return dict(swept)

    real = list(inspect.signature(select.AlgorithmSelectorCache.autotune).parameters)
    assert list(inspect.signature(autotune).parameters) == real

    class Selector:
        timed_again = 0

        def benchmark(self, choices, input_nodes, layout, input_gen_fns):
            Selector.timed_again += 1
            return {c: dict(zip(swept, again))[c] for c in choices}

    me = Selector()
    kwargs = {"input_gen_fns": None, "choices": choices}
    with cleanflush.pick(rule):
        kept = _inductor_pick._autotune(autotune.__get__(me), me, ("mm", inputs, object()), kwargs)
    return kept, choices, Selector.timed_again


def test_inductors_algorithm_selection_is_kept_in_the_pick_file_and_taken_for_the_same_inputs(tmp_path, monkeypatch):
    from cleanflush import _inductor_pick

    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    inputs = [Node(64, 128), Node(128, 32)]
    kept, choices, timed_again = selected((1.004, 1.0, 1.5), (1.004, 1.0, 1.5), inputs, "stable")
    assert min(kept, key=kept.__getitem__) is choices[0] and timed_again == 4  # the stable pick: first within the band
    [entry] = json.loads((tmp_path / "picks.json").read_text())["entries"]
    assert entry["decision"]["kind"] == "inductor" and entry["decision"]["op"] == "mm"
    assert entry["decision"]["key"] == "64x128 bfloat16, 128x32 bfloat16" and entry["pick"] == "triton_mm BLOCK_M=64"
    assert entry["rule"] == "stable" and entry["timings_ms"]["triton_mm BLOCK_M=128"] == 1.0
    kept, choices, timed_again = selected((1.5, 1.0, 2.0), (), [Node(64, 128), Node(128, 32)])  # a later run
    assert min(kept, key=kept.__getitem__) is choices[0] and timed_again == 0  # the file's pick, in new choices
    assert _inductor_pick.agreed_in(kept) == _agree.FROM_FILE and kept[choices[1]] == 1.0
    kept, choices, _ = selected((1.5, 1.0, 2.0), (), [Node(32, 128), Node(128, 32)])  # the control: other inputs
    assert min(kept, key=kept.__getitem__) is choices[1] and _inductor_pick.agreed_in(kept) is None
    assert len(json.loads((tmp_path / "picks.json").read_text())["entries"]) == 2  # that decision kept too


# ---- agreement through the store, and decisions with one choice (#70's sample, seed 20261208) --


def test_a_pick_file_entry_for_a_triton_decision_as_written_before_is_taken(tmp_path, monkeypatch):
    """The pick file names a Triton decision's kind ``triton`` (as the decision lines do): a file
    an earlier run wrote is taken by a later one; the same entry of another kind is not."""
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    key = (256, "torch.float32")
    first = autotuned(tmp_path, "first", "1")
    labels = tuple(str(c) for c in first.configs)
    for kind, folder in (("inductor", "control"), ("triton", "later")):
        decision = _agree.Decision(kind, "kern.add", repr(key), labels, _agree.kernel_hash(first))
        _agree.write(_agree.entry(decision, labels[1], "stable", "write", {}))
        _agree.FILE.stamp = None  # another process
        later = autotuned(tmp_path, folder, "1")
        from cleanflush import _tunercache

        taken = key in _tunercache.cache_of(later) and later.cache[key] is later.configs[1]
        assert taken == (kind == "triton"), kind


def test_ranks_agree_on_inductors_algorithm_selection_through_the_store_without_a_pick_file(monkeypatch):
    from cleanflush import _inductor_pick

    cleanflush.pick_store(torch_distributed.HashStore())
    inputs = [Node(64, 128), Node(128, 32)]
    monkeypatch.setenv("RANK", "0")
    kept, choices, _ = selected((1.004, 1.0, 1.5), (1.004, 1.0, 1.5), inputs, "stable")
    assert min(kept, key=kept.__getitem__) is choices[0]  # rank 0's stable pick, published
    monkeypatch.setenv("RANK", "1")
    kept, choices, _ = selected((1.5, 1.0, 2.0), (1.5, 1.0, 2.0), inputs, "stable")  # 128 clearly faster here
    assert min(kept, key=kept.__getitem__) is choices[0] and _inductor_pick.agreed_in(kept) == "rank 0"
    monkeypatch.setenv("CLEANFLUSH_PICK_STORE", "off")  # the control: each rank its own pick
    kept, choices, _ = selected((1.5, 1.0, 2.0), (1.5, 1.0, 2.0), inputs, "stable")
    assert min(kept, key=kept.__getitem__) is choices[1] and _inductor_pick.agreed_in(kept) is None


def test_ranks_agree_on_inductors_kernel_configs_through_the_store_without_a_pick_file(monkeypatch):
    cleanflush.pick_store(torch_distributed.HashStore())
    monkeypatch.setenv("RANK", "0")
    tuner, launchers, _ = inductor_kernel({1: 1.004, 8: 1.0})
    with cleanflush.pick("stable"):
        tuner.autotune_to_one_config()
    assert tuner.launchers == [launchers[1]]  # rank 0's stable pick, published
    monkeypatch.setenv("RANK", "1")
    later, launchers, timed = inductor_kernel({1: 1.5, 8: 1.0})  # 8 clearly faster here
    with cleanflush.pick("stable"):
        later.autotune_to_one_config()
    assert later.launchers == [launchers[1]] and timed == []  # rank 0's, found before tuning
    monkeypatch.setenv("CLEANFLUSH_PICK_STORE", "off")  # the control: each rank tunes its own
    other, launchers, timed = inductor_kernel({1: 1.5, 8: 1.0})
    with cleanflush.pick("stable"):
        other.autotune_to_one_config()
    assert other.launchers == [launchers[8]] and len(timed) == 2


def test_an_algorithm_selection_of_one_choice_gets_no_stable_record_and_no_pick_file_entry(tmp_path, monkeypatch):
    """One choice: nothing to choose among, so nothing is kept for it (as Triton's one config)."""
    select = pytest.importorskip("torch._inductor.select_algorithm")
    from cleanflush import _inductor_pick

    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    params = list(inspect.signature(select.AlgorithmSelectorCache.autotune).parameters)

    def autotune(self, name, input_nodes, layout, input_gen_fns, choices, hint_override=None, is_collective=False,
                 precompile_key=None):  # fmt: skip
        return {c: 1.0 + i / 2 for i, c in enumerate(choices)}  # a clear winner: nothing timed again

    assert list(inspect.signature(autotune).parameters) == params
    selector = types.SimpleNamespace(benchmark=lambda choices, input_nodes, layout, input_gen_fns: {})
    inputs = [Node(64, 128), Node(128, 32)]
    for choices in ([Choice("mkl_linear", "")], [Choice("mkl_linear", ""), Choice("triton_mm_1", "BLOCK_M=64")]):
        call = {"input_gen_fns": None, "choices": choices}
        with cleanflush.pick("stable"):
            kept = _inductor_pick._autotune(autotune.__get__(selector), selector, ("mm", inputs, object()), call)
        assert (_inductor_pick.picked_in(kept) is None) == (len(choices) == 1), len(choices)
        entries = json.loads((tmp_path / "picks.json").read_text())["entries"] if len(choices) > 1 else []
        assert (tmp_path / "picks.json").exists() == (len(choices) > 1) and len(entries) == len(choices) - 1


def test_a_kernel_of_one_config_benchmarked_alone_gets_no_pick_file_entry(tmp_path, monkeypatch):
    """A compiled module's ``benchmark_all_configs`` (Inductor's ``--benchmark-kernels``) times
    every kernel, one config or more: a kernel of one config has no decision to keep."""
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    for sweep in ({8: 1.0}, {1: 1.5, 8: 1.0}):  # the second, the control: a decision, kept
        from .test_pick import kernel_tuner

        tuner, launchers, _ = kernel_tuner(sweep, {})
        timings = tuner.benchmark_all_configs()
        assert min(timings, key=timings.__getitem__) is launchers[8]
        written = (tmp_path / "picks.json").exists()
        assert written == (len(sweep) > 1), sweep


def test_a_pick_stored_with_nothing_timed_here_takes_the_one_another_rank_published(tmp_path, monkeypatch):
    """Triton's disk cache (``cache_results``) hands the tuner its stored pick with nothing timed
    through ``_bench``: where another rank published the decision's pick first, that config (one
    of the tuner's own) is kept."""
    from cleanflush import _autotuner, _tunercache

    cleanflush.pick_store(torch_distributed.HashStore())
    kernel = autotuned(tmp_path, "job", "1")
    cache = _tunercache.cache_of(kernel)
    for key, store in (((256, "torch.float32"), "on"), ((512, "torch.float32"), "off")):  # off: the control
        monkeypatch.setenv("CLEANFLUSH_PICK_STORE", store)
        monkeypatch.setenv("RANK", "0")
        assert _agree.publish(_autotuner.decision_of(cache, key), str(kernel.configs[1]), 1.0, True) is None
        monkeypatch.setenv("RANK", "1")
        with cleanflush.pick("stable"):
            cache[key] = kernel.configs[0]  # as a disk cache hit stores it
        assert (cache.data[key] is kernel.configs[1]) == (store == "on"), store


def test_a_tuner_that_names_no_configs_takes_the_published_pick_among_those_it_timed(monkeypatch, capsys):
    """A library's tuner that makes its configs per call (no ``configs`` of its own) and times
    them through ``_bench``: the pick another rank published is found among those it timed."""
    from cleanflush import _autotuner, _tunercache

    cleanflush.pick_store(torch_distributed.HashStore())
    tuner = types.SimpleNamespace(cache={}, fn=types.SimpleNamespace(__module__="lib", __name__="k"))
    cache = _tunercache.cache_of(tuner)
    for key, pick in (((256,), "BLOCK: 32"), ((512,), "BLOCK: 64")):  # 64 none it timed: the control
        monkeypatch.setenv("RANK", "0")
        assert _agree.publish(_autotuner.decision_of(cache, key), pick, 1.0, True) is None
        monkeypatch.setenv("RANK", "1")
        with cleanflush.pick("stable"):
            assert key not in cache  # published before this rank tuned, but nothing it can name yet
            for config, ms in (("BLOCK: 16", 1.0), ("BLOCK: 32", 1.5)):  # a clear winner: nothing timed again
                _autotuner._bench(lambda *args, config, ms=ms: ms, tuner, (), {"config": config})
            cache[key] = "BLOCK: 16"
        assert cache.data[key] == (pick if pick == "BLOCK: 32" else "BLOCK: 16"), pick
    said = [line for line in capsys.readouterr().err.splitlines() if "is none of the configs offered here" in line]
    assert said == [
        "cleanflush: the pick rank 0 gave for lib.k (512,) ('BLOCK: 64') is none of the configs offered here; "
        "this process keeps its own"
    ]


# ---- what a rank publishes and keeps of a Triton pick (#70's sample, seed 20261209) ----------


def test_a_triton_pick_is_published_with_the_time_its_sweep_measured(monkeypatch):
    """The first rank's pick goes to the job's store with the time this rank measured for it
    (``Agreed.ms``); a pick stored with nothing timed here is published with none."""
    from cleanflush import _autotuner, _tunercache

    cleanflush.pick_store(torch_distributed.HashStore())
    monkeypatch.setenv("RANK", "0")
    lib = types.SimpleNamespace(__module__="lib", __name__="k")
    tuner = types.SimpleNamespace(cache={}, configs=["BLOCK: 16", "BLOCK: 32"], fn=lib)
    cache = _tunercache.cache_of(tuner)
    with cleanflush.pick("stable"):
        assert (256,) not in cache
        for config, ms in (("BLOCK: 16", 1.5), ("BLOCK: 32", 1.25)):  # a clear winner: nothing timed again
            _autotuner._bench(lambda *args, config, ms=ms: ms, tuner, (), {"config": config})
        cache[(256,)] = "BLOCK: 32"
        cache[(512,)] = "BLOCK: 16"  # the control: as a disk cache hit stores it, nothing timed
        tuned, served = (_agree.published(_autotuner.decision_of(cache, key), True) for key in ((256,), (512,)))
    assert tuned == _agree.Agreed("BLOCK: 32", "rank 0", 1.25)
    assert served == _agree.Agreed("BLOCK: 16", "rank 0", None)


def test_a_key_another_rank_published_gets_no_timings_from_the_last_sweep_in_the_pick_file(tmp_path, monkeypatch):
    """``Autotuner.run`` sets ``configs_timings`` only where it tunes: a key taken at the lookup
    from another rank is kept in the pick file with no timings of this rank's, not with the
    tuner's last sweep's, which timed another key."""
    from cleanflush import _autotuner, _tunercache

    cleanflush.pick_store(torch_distributed.HashStore())
    monkeypatch.setenv("CLEANFLUSH_PICK_FILE", str(tmp_path / "picks.json"))
    lib = types.SimpleNamespace(__module__="lib", __name__="k")
    tuner = types.SimpleNamespace(cache={}, configs=["BLOCK: 16", "BLOCK: 32"], fn=lib)
    cache = _tunercache.cache_of(tuner)
    monkeypatch.setenv("RANK", "0")
    assert _agree.publish(_autotuner.decision_of(cache, (512,)), "BLOCK: 16", 2.0, True) is None
    monkeypatch.setenv("RANK", "1")

    def run(key, timings):  # Triton's run (3.7.1): a key not in the cache is tuned, its sweep's timings kept
        if key not in tuner.cache:
            tuner.configs_timings = timings
            tuner.cache[key] = min(timings, key=timings.get)

    with cleanflush.pick("stable"):
        _autotuner._run(run, tuner, ((256,), {"BLOCK: 16": 1.5, "BLOCK: 32": 1.25}), {})
        _autotuner._run(run, tuner, ((512,), {"BLOCK: 16": 9.0, "BLOCK: 32": 9.0}), {})  # rank 0's: not tuned
    entries = json.loads((tmp_path / "picks.json").read_text())["entries"]
    found = {e["decision"]["key"]: (e["pick"], e["timings_ms"]) for e in entries}
    tuned = ("BLOCK: 32", {"BLOCK: 16": 1.5, "BLOCK: 32": 1.25})
    assert found == {repr((256,)): tuned, repr((512,)): ("BLOCK: 16", {})}
