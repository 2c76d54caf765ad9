"""`cleanflush audit`: the recorder in a real job (Triton's interpreter, CPU tensors; gemlite's
own kernels and table where gemlite is installed), the judging by stand-in timers written here,
the checks before anything runs, and the corrected tables read back by each library's loader.

The GPU side (the pricing process, both timers) is tests/gpu/test_audit_gpu.py."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from cleanflush import _tunercache
from cleanflush._audit import judge, libraries, run, served, tables
from cleanflush._audit.report import format_report

from .conftest import environ_without_cleanflush
from .triton_layout import needs_autotune_do_bench

# A kernel with six configs, in a module of its own (a kernel of __main__ cannot be made again).
KERNEL = """
import torch, triton, triton.language as tl

CONFIGS = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32, 64) for w in (1, 2)]
BEST = CONFIGS[3]  # BLOCK 32, 2 warps: the fastest, by the stand-in timers of tests/test_audit.py


@triton.autotune(configs=CONFIGS, key=["n"])
@triton.jit
def scale_add(x, out, n, scale, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) * scale + 2, mask=m)


def call(kernel, n):
    x = torch.arange(n, dtype=torch.float32)
    out = torch.empty(n)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, 3.0)
    return out
"""

# The job: a table preloaded into the kernel's cache, as a library that ships one does; the
# entry for n=200 planted wrong (its config is not the fastest); n=100 called three times.
JOB = """
import sys
sys.path.insert(0, {here!r})
import tablekernel as k

TYPES = ("torch.float32", "torch.float32")
k.scale_add.cache.update({{(100, *TYPES): k.BEST, (200, *TYPES): k.CONFIGS[0], (300, *TYPES): k.BEST}})
for n in (100, 200, 300, 100, 100):
    k.call(k.scale_add, n)
"""


def write_job(tmp_path, kernel=KERNEL, job=JOB):
    (tmp_path / "tablekernel.py").write_text(textwrap.dedent(kernel))
    (tmp_path / "job.py").write_text(textwrap.dedent(job.format(here=str(tmp_path))))
    return [sys.executable, str(tmp_path / "job.py")]


def spread(us, share=0.004):
    return {"us": us, "low": us * (1 - share / 2), "high": us * (1 + share / 2), "rounds": [us] * 5}


# The stand-in timers: each config's time from what it is, two ways (no code of the audit's).
def kernel_us(config, best):
    return 10.0 * (1.0 if config == best else 1.08)


def graph_us(config, best):
    return 11.5 + (0.0 if config == best else 0.75)


def stand_in_pricer(cupti=kernel_us, graph=graph_us, seen=None):
    """The pricing process's stand-in: each entry's call loaded (``_calls.Call``) and launched under
    every config it offers (the call can be made again), the clean pick the fastest by
    ``cupti``, both configs priced by each stand-in timer."""

    def price(wanted, calls_folder, work):
        import torch

        from cleanflush._calls import Call

        found = []
        for w in wanted:
            call = Call.load(os.path.join(calls_folder, w["file"]), torch.device("cpu"))
            for label in w["offered"]:
                call.launch(label, tuning_hooks=False)()
            best = next(c for c in call.tuner.configs if c.kwargs == {"BLOCK": 32} and c.num_warps == 2)
            clean = min(w["offered"], key=lambda label: cupti(call.config(label), best))
            labels = {w["shipped"], clean}
            prices = {
                "cupti": {label: spread(cupti(call.config(label), best)) for label in labels},
                "graph": {label: spread(graph(call.config(label), best)) for label in labels},
            }
            found.append({"id": w["id"], "clean": clean, "leaders": w["offered"], "prices": prices, "seconds": {}})
            if seen is not None:
                seen.append(w)
        return found

    return price


@pytest.fixture
def interpreter(monkeypatch, tmp_path):
    """Triton's interpreter for the job, and its kernel's module importable here (the stand-in
    pricing loads the recorded calls in this process)."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("tablekernel", None)


def audited(result):
    return {entry["key"].split(",")[0].strip("("): entry for entry in result["entries"]}


def test_a_preloaded_table_with_one_entry_planted_wrong_is_named_wrong_and_the_others_right(tmp_path, interpreter):
    command = write_job(tmp_path)
    result, code = run.run(command, keep=str(tmp_path / "work"), pricer=stand_in_pricer())
    assert code == 0 and result["problems"] == [] and result["skipped_lines"] == []
    found = audited(result)
    assert {n: e["class"] for n, e in found.items()} == {"100": "right", "200": "wrong", "300": "right"}
    wrong = found["200"]
    assert wrong["source"] == "preloaded" and wrong["shipped"].startswith("BLOCK: 16, num_warps: 1")
    assert wrong["clean"].startswith("BLOCK: 32, num_warps: 2")
    assert wrong["ratio"] == pytest.approx({"cupti": 1.08, "graph": 12.25 / 11.5})
    assert wrong["cost_us"] == pytest.approx(0.75) and wrong["calls"] == 1  # the smaller of the timers' costs
    assert found["100"]["reason"] == "the clean re-tune kept the shipped config" and found["100"]["calls"] == 3
    assert result["headline"]["classes"] == {"wrong": 1, "undecided": 0, "right": 2, "not auditable": 0}
    assert result["headline"]["cost_us_per_call"] == pytest.approx(0.75)
    text = format_report(result)
    assert "wrong: 1 of 3" in text and "costs 0.75 us a call" in text
    # what every entry offered: the kernel's whole search (no pruner), in its order
    lines, _ = run.read_served(str(tmp_path / "work" / "served.jsonl"))
    assert [len(line["offered"]) for line in lines] == [6, 6, 6]


def test_the_shipped_config_is_wrong_only_where_both_timers_say_so(tmp_path, interpreter):
    command = write_job(tmp_path)

    def faster_by_the_graph(config, best):  # the second timer disagrees: the planted config is faster
        return 11.5 - (0.0 if config == best else 0.75)

    def alike_by_the_graph(config, best):  # the second timer finds them within the floor
        return 11.5 + (0.0 if config == best else 0.1)

    for graph, said in ((faster_by_the_graph, "undecided"), (alike_by_the_graph, "right"), (graph_us, "wrong")):
        work = tmp_path / f"work-{said}"
        result, _ = run.run(command, keep=str(work), pricer=stand_in_pricer(graph=graph))
        assert audited(result)["200"]["class"] == said
    assert (
        "the timers disagree: cupti +8.0%"
        in audited(run.run(command, pricer=stand_in_pricer(graph=faster_by_the_graph))[0])["200"]["reason"]
    )


def test_the_judge_needs_both_timers_beyond_the_noise_and_the_floor():
    def line(shipped="s"):
        return {
            "op": "m.k",
            "key": "(1,)",
            "source": "preloaded",
            "shipped": shipped,
            "offered": ["s", "c"],
            "call": {"file": "f"},
        }

    def priced(cupti, graph, noise=0.004):
        return {
            "id": 0,
            "clean": "c",
            "prices": {
                "cupti": {"s": spread(cupti, noise), "c": spread(10.0, noise)},
                "graph": {"s": spread(graph, noise), "c": spread(10.0, noise)},
            },
        }

    assert judge.judge(line(), priced(10.5, 10.5), 4)["class"] == "wrong"
    assert judge.judge(line(), priced(10.5, 10.5), 4)["cost_job_us"] == pytest.approx(2.0)
    assert judge.judge(line(), priced(10.5, 10.1), 4)["class"] == "right"  # +1% by one: under the floor
    assert judge.judge(line(), priced(10.5, 10.5, noise=0.06), 4)["class"] == "right"  # within the noise
    assert judge.judge(line(), priced(10.5, 10.5), 4, min_effect=0.06)["class"] == "right"  # under a 6% floor
    assert judge.judge(line(), priced(10.5, 9.5), 4)["class"] == "undecided"
    assert judge.judge(line(), priced(9.5, 9.5), 4)["class"] == "right"  # the shipped config is faster
    assert judge.judge(line("c"), priced(10.5, 10.5) | {"clean": "c"}, 4)["class"] == "right"
    unpriced = judge.judge(line(), {"id": 0, "error": "RuntimeError: no"}, None)
    assert (unpriced["class"], unpriced["reason"]) == ("not auditable", "it could not be priced: RuntimeError: no")


def test_an_entry_whose_call_cannot_be_made_again_says_why_in_one_line(tmp_path, interpreter):
    main_job = (
        KERNEL + "\nscale_add.cache[(100, 'torch.float32', 'torch.float32')] = CONFIGS[0]\ncall(scale_add, 100)\n"
    )
    (tmp_path / "job.py").write_text(textwrap.dedent(main_job))
    seen = []
    result, code = run.run([sys.executable, str(tmp_path / "job.py")], pricer=stand_in_pricer(seen=seen))
    [entry] = result["entries"]
    assert code == 0 and seen == []  # nothing to price: the pricing process is never asked
    assert entry["class"] == "not auditable" and "\n" not in entry["reason"]
    assert entry["reason"] == (
        "its call cannot be made again: its kernel is defined in __main__ (or nowhere importable): it cannot be "
        "made again elsewhere"
    )


def test_a_job_that_fails_is_exit_code_1_and_what_it_served_before_is_audited(tmp_path, interpreter):
    command = write_job(tmp_path, job=JOB + "\nraise SystemExit(3)\n")
    result, code = run.run(command, pricer=stand_in_pricer())
    assert (code, result["code"], result["headline"]["entries"]) == (1, 3, 3)


# The recorder's other ways in: a key stored with no config timed (Triton's disk cache, whose
# reader needs a GPU even to hash its key: stored through the door here as its reader stores it).


def test_a_key_stored_with_no_config_timed_is_served_from_the_disk_cache(tmp_path, interpreter, monkeypatch):
    write_job(tmp_path)
    import tablekernel

    tuner = tablekernel.scale_add
    cache = _tunercache.cache_of(tuner)
    tuner.cache_results = True
    args = (__import__("torch").arange(4.0), __import__("torch").empty(4), 4, 3.0)
    seen = served.watch(tuner, cache, args, {})
    key = (4, "torch.float32", "torch.float32")
    cache[key] = tablekernel.CONFIGS[5]  # as check_disk_cache stores the file's pick: no _bench before
    monkeypatch.setenv("CLEANFLUSH_AUDIT", str(tmp_path / "served.jsonl"))
    assert served.served(seen, [key], args, {}, None, str(tmp_path)) == {key}
    [line] = run.read_served(str(tmp_path / "served.jsonl"))[0]
    assert (line["source"], line["tuning_key"]) == ("disk cache", [4, "torch.float32", "torch.float32"])
    # the negative control: a key stored after a sweep timed its configs is tuned, not served
    seen = served.watch(tuner, cache, args, {})
    cache.timed += 6
    cache[(5, "torch.float32", "torch.float32")] = tablekernel.CONFIGS[1]
    assert served.served(seen, [(5, "torch.float32", "torch.float32")], args, {}, None, str(tmp_path)) == set()


# Tables: what is refused before anything runs, and what is read and written.


def audit_cli(args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "cleanflush", "audit", *args],
        env={**environ_without_cleanflush(), **(env or {})},
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


JOB_THAT_MARKS = ["--", sys.executable, "-c", "open('ran', 'w').close()"]


@pytest.mark.parametrize("made", ["link", "file"])
def test_a_cache_folder_that_is_a_link_or_cannot_be_read_is_one_line_and_nothing_runs(tmp_path, made):
    real = tmp_path / "real-cache"
    real.mkdir()
    cache = tmp_path / "cache"
    if made == "link":
        cache.symlink_to(real)
    else:
        cache.write_text("not a folder")
    out = audit_cli(["--write", str(tmp_path / "out"), *JOB_THAT_MARKS], {"TRITON_CACHE_DIR": str(cache)}, tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    said = {"link": "is a link: the audit never reads or writes through one", "file": "cannot be read"}[made]
    assert out.stderr.count("\n") == 1 and said in out.stderr and out.stderr.startswith("cleanflush audit: ")
    assert sorted(os.listdir(tmp_path)) == ["cache", "real-cache"] and os.listdir(real) == []


@pytest.mark.parametrize(
    "write, said",
    [
        ("link", "is a link: the audit never writes through one"),
        ("full", "is not empty: name a new or empty folder"),
        ("file", "is a file: name a new or empty folder"),
    ],
)
def test_write_refuses_a_link_a_file_or_a_folder_that_holds_anything_before_the_job(tmp_path, write, said):
    target = tmp_path / "out"
    if write == "link":
        (tmp_path / "elsewhere").mkdir()
        target.symlink_to(tmp_path / "elsewhere")
    elif write == "full":
        target.mkdir()
        (target / "h100.json").write_text("{}")
    else:
        target.write_text("")
    out = audit_cli(["--write", str(target), *JOB_THAT_MARKS], {"TRITON_CACHE_DIR": str(tmp_path / "c")}, tmp_path)
    assert out.returncode == 2 and said in out.stderr and out.stderr.count("\n") == 1
    assert not (tmp_path / "ran").exists()


GEMLITE_ENTRY = {
    "family": "GEMV_REVSPLITK",
    "signature": "(1, 256, 256, 128, 8, 104)",
    "config": {"BLOCK_SIZE_M": 1, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 16, "A_load_order": 0, "dot_prod_mode": 0,
               "num_warps": 1, "num_ctas": 1, "num_stages": 1},
}  # fmt: skip
CLEAN_SPEC = {
    "kwargs": {"BLOCK_SIZE_M": 1, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 8, "A_load_order": 0, "dot_prod_mode": 0,
               "EVEN_K": True, "EVEN_N": True},
    "num_warps": 1, "num_stages": 2, "num_ctas": 1, "maxnreg": None,
}  # fmt: skip


def gemlite_pair(cls="wrong", table="gemlite-table-1.json"):
    """A gemlite entry as the recorder writes it and the judge classes it."""
    line = {
        "kind": "served", "op": "gemlite.triton_kernels.gemv_revsplitK_kernels.gemv_INT_revsplitK_kernel",
        "key": "(1, 256, 256, 128, 8, 104, 0)", "source": "gemlite", "shipped": "shipped",
        "offered": ["shipped", "clean"],
        "specs": {"clean": CLEAN_SPEC}, "call": {"file": "x.pt"}, "device": "NVIDIA H200", "entry": GEMLITE_ENTRY,
        "table": table,
    }  # fmt: skip
    return {"class": cls, "op": line["op"], "key": line["key"], "source": "gemlite", "shipped": "shipped",
            "clean": "clean", "reason": ""}, line  # fmt: skip


@pytest.mark.parametrize(
    "text, said",
    [
        ('{"GEMV_REVSPLITK": {"(1, 256, 2', "is torn or not JSON"),
        ('{"GEMV_REVSPLITK": {"__import__(\'os\')": {}}}', "is not a signature like (1, 4096, 4096, 128, 8, 104)"),
        ('{"GEMV_REVSPLITK": {"(1, 2)": {"num_warps": [1]}}}', "is not a mapping of names to numbers"),
        ("[" * 100000 + "]" * 100000, "is torn or not JSON"),
        ("[]", "not a mapping of kernel families but a JSON list"),
    ],
)
def test_a_torn_or_hostile_table_is_one_line_its_entries_not_priced_and_nothing_written(tmp_path, text, said):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    (work / "gemlite-table-1.json").write_text(text)
    entry, line = gemlite_pair()
    problems = []
    unread = run.unreadable_tables([line], str(work), problems)
    [why] = problems
    assert said in why and "\n" not in why and unread == {"gemlite-table-1.json": f"its table cannot be read: {why}"}
    assert tables.write_corrected([(entry, line)], str(work), str(out), []) == [] and not out.exists()


def test_a_table_that_is_a_link_is_never_read_through_it(tmp_path):
    (tmp_path / "elsewhere.json").write_text(json.dumps({"GEMV_REVSPLITK": {}}))
    (tmp_path / "gemlite-table-1.json").symlink_to(tmp_path / "elsewhere.json")
    problems = []
    run.unreadable_tables([gemlite_pair()[1]], str(tmp_path), problems)
    assert problems == [f"{tmp_path / 'gemlite-table-1.json'} is a link: the audit never reads a table through one"]
    assert run.unreadable_tables([gemlite_pair(table="../elsewhere.json")[1]], str(tmp_path), []) != {}


# gemlite's loader, written here from its source (mobiusml/gemlite 0.6.0.post2, gemlite/core.py
# ``load_config`` and gemv_revsplitK_kernels.py ``kernel_config_pruner``): the file's families merged
# into the table, and the entry of a call's signature turned into the config the pruner offers.
def gemlite_loads(path, table, family, signature, k=256, n=256, split_k=2):
    with open(path) as f:
        for name, entries in json.load(f).items():
            table.setdefault(name, {}).update(entries)
    config = copy.deepcopy(table[family][signature])
    options = {name: config.pop(name) for name in ("num_stages", "num_warps")}
    config.pop("num_ctas", 1)
    for name in ("num_buffers_warp_spec", "num_consumer_groups", "reg_dec_producer", "reg_inc_consumer"):
        config.pop(name, None)
    config["EVEN_K"] = k % (config["BLOCK_SIZE_K"] * split_k) == 0
    config["EVEN_N"] = n % config["BLOCK_SIZE_N"] == 0
    return config, options


def written_gemlite(tmp_path, pairs):
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    shipped = {
        "GEMV_REVSPLITK": {
            GEMLITE_ENTRY["signature"]: GEMLITE_ENTRY["config"],
            "(1, 512, 256, 128, 8, 104)": GEMLITE_ENTRY["config"],
        },
        "GEMM": {},
    }
    (work / "gemlite-table-1.json").write_text(json.dumps(shipped))
    before = (work / "gemlite-table-1.json").read_bytes()
    written = tables.write_corrected(pairs, str(work), str(out), [])
    assert (work / "gemlite-table-1.json").read_bytes() == before  # the table read is never touched
    return written, out / "gemlite.json", shipped


def test_write_replaces_only_the_wrong_entries_and_gemlites_loader_gives_the_clean_pick(tmp_path):
    wrong, line = gemlite_pair()
    undecided, other = gemlite_pair("undecided")
    other["entry"] = {**GEMLITE_ENTRY, "signature": "(1, 512, 256, 128, 8, 104)"}
    written, path, shipped = written_gemlite(tmp_path, [(wrong, line), (undecided, other)])
    assert [(w["path"], w["library"], w["replaced"]) for w in written] == [(str(path), "gemlite", 1)]
    assert wrong["written"] == str(path) and "written" not in undecided
    config, options = gemlite_loads(path, {"GEMV_REVSPLITK": {}}, "GEMV_REVSPLITK", GEMLITE_ENTRY["signature"])
    assert (config, options) == (CLEAN_SPEC["kwargs"], {"num_warps": 1, "num_stages": 2})
    assert json.loads(path.read_text())["GEMV_REVSPLITK"]["(1, 512, 256, 128, 8, 104)"] == GEMLITE_ENTRY["config"]
    loaded = json.loads(path.read_text())
    assert {f: len(e) for f, e in loaded.items()} == {f: len(e) for f, e in shipped.items()}  # nothing else changed


GEMLITE_STUB = """
import torch
from triton.runtime import driver

class Props:
    name = "NVIDIA H200"; major = 9; minor = 0; multi_processor_count = 132; total_memory = 1 << 37

torch.cuda.get_device_properties = lambda *a, **k: Props()
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)

class Target:
    backend = "cuda"; arch = 90; warp_size = 32

class Utils:
    def get_device_properties(self, device):
        return {"max_shared_mem": 232448}

class Stub:  # the GPU gemlite asks about as it is imported, and a do_bench that runs the call once
    utils = Utils()
    def get_current_target(self):
        return Target()
    def get_current_device(self):
        return 0
    def get_benchmarker(self):
        def bench(fn, quantiles=None, **kwargs):
            fn()
            return [0.01, 0.01, 0.01]
        return bench

driver.set_active(Stub())
"""  # fmt: skip
needs_gemlite = pytest.mark.skipif(
    importlib.util.find_spec("gemlite") is None or importlib.util.find_spec("tqdm") is None,
    reason="gemlite is not installed (pip install --no-deps gemlite==0.6.0.post2 tqdm)",
)


@needs_gemlite
def test_gemlites_own_loader_and_pruner_read_the_corrected_table_back(tmp_path):
    wrong, line = gemlite_pair()
    _, path, _ = written_gemlite(tmp_path, [(wrong, line)])
    (tmp_path / "stubgpu.py").write_text(GEMLITE_STUB)
    check = f"""
import json, sys
sys.path.insert(0, {str(tmp_path)!r})
import stubgpu, gemlite
from gemlite.triton_kernels import gemv_revsplitK_kernels as g
gemlite.reset_config()
assert gemlite.load_config({str(path)!r})
nargs = dict(M=1, N=256, K=256, group_size=128, elements_per_sample=8, type_id=104, use_prehook=False)
[config] = list(g.kernel_config_pruner(g.gemv_INT_revsplitK_kernel.configs, nargs))
print(json.dumps([config.kwargs, config.num_warps, config.num_stages]))
"""
    child = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, env=environ_without_cleanflush()
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert json.loads(child.stdout.splitlines()[-1]) == [CLEAN_SPEC["kwargs"], 1, 2]


GEMLITE_JOB = """
import sys
sys.path.insert(0, {here!r})
import stubgpu, torch, gemlite
from gemlite import DType, GemLiteLinear

mode, table = sys.argv[1], sys.argv[2]
gemlite.reset_config()
if mode == "serve":
    assert gemlite.load_config(table)
for n in (256, 512):
    layer = GemLiteLinear(4, group_size=128, in_features=256, out_features=n, input_dtype=DType.FP16,
                          output_dtype=DType.FP16)
    torch.manual_seed(0)
    layer.pack(torch.randint(0, 16, (n, 256), dtype=torch.uint8), torch.rand(n, 2, dtype=torch.float16) * 0.01,
               torch.full((n, 2), 7.0, dtype=torch.float16), None)
    x = torch.randn(1, 256, dtype=torch.float16)
    for _ in range(2):
        layer(x)
if mode == "tune":
    gemlite.cache_config(table)
"""  # fmt: skip


@needs_gemlite
def test_gemlites_table_served_through_its_pruner_is_audited_and_corrected_in_its_own_format(tmp_path, interpreter):
    (tmp_path / "stubgpu.py").write_text(GEMLITE_STUB)
    (tmp_path / "job.py").write_text(textwrap.dedent(GEMLITE_JOB.format(here=str(tmp_path))))
    table = tmp_path / "tuned.json"
    # the table, as gemlite writes one: its own tuning (stand-in do_bench), its own cache_config
    tuned = subprocess.run(
        [sys.executable, str(tmp_path / "job.py"), "tune", str(table)],
        env={**environ_without_cleanflush(), "TRITON_INTERPRET": "1"},
    )
    assert tuned.returncode == 0 and json.loads(table.read_text())["GEMV_REVSPLITK"]
    seen = []

    def pricer(wanted, calls, work):
        seen.extend(wanted)
        return [
            {
                "id": w["id"],
                "clean": w["offered"][-1],
                "leaders": w["offered"],
                "prices": {t: {w["shipped"]: spread(11.0), w["offered"][-1]: spread(10.0)} for t in ("cupti", "graph")},
            }
            for w in wanted
        ]

    result, code = run.run(
        [sys.executable, str(tmp_path / "job.py"), "serve", str(table)],
        keep=str(tmp_path / "work"),
        write=str(tmp_path / "out"),
        pricer=pricer,
    )
    assert code == 0 and result["tuned_here"] == 0 and len(seen) == 2
    assert {e["source"] for e in result["entries"]} == {"gemlite"}
    assert all(
        e["provenance"] == "a gemlite table the job loaded itself (none gemlite ships holds it)"
        for e in result["entries"]
    )
    # what each entry offered: gemlite's own search for the call, its table hidden (its 17 NVIDIA configs, pruned)
    assert all(len(w["offered"]) > 10 and w["shipped"] in w["offered"] for w in seen)
    [written] = result["written"]
    with open(written["path"]) as f:
        corrected = json.load(f)["GEMV_REVSPLITK"]
    lines, _ = run.read_served(str(tmp_path / "work" / "served.jsonl"))
    for line, w in zip(lines, seen):
        spec = line["specs"][w["offered"][-1]]
        assert corrected[line["entry"]["signature"]] == {
            **spec["kwargs"],
            "num_ctas": 1,
            "num_warps": spec["num_warps"],
            "num_stages": spec["num_stages"],
        }


def test_an_entry_from_a_table_tuned_on_another_gpu_says_so(tmp_path):
    shipped = {"h100": {"GEMV_REVSPLITK": {GEMLITE_ENTRY["signature"]: GEMLITE_ENTRY["config"]}}, "a100": {}}
    _, line = gemlite_pair()
    said = tables.provenance(line, shipped, libraries.GEMLITE)
    assert said == ("gemlite's h100.json, tuned on another GPU than this NVIDIA H200", True)
    line["device"] = "NVIDIA H100 80GB HBM3"  # gemlite's own rule: the name holds "h100"
    assert tables.provenance(line, shipped, libraries.GEMLITE) == ("gemlite's table for this GPU (h100.json)", False)
    line["entry"] = {**GEMLITE_ENTRY, "config": {**GEMLITE_ENTRY["config"], "num_warps": 4}}  # not the shipped one
    assert tables.provenance(line, shipped, libraries.GEMLITE)[1] is False


def test_the_tables_a_library_ships_are_read_checked_and_a_torn_one_is_said(tmp_path):
    good = {"GEMV_REVSPLITK": {GEMLITE_ENTRY["signature"]: GEMLITE_ENTRY["config"]}}
    (tmp_path / "h100.json").write_text(json.dumps(good))
    (tmp_path / "a100.json").write_text('{"GEMM": {"(1, 2')
    problems = []
    assert tables.shipped_tables(str(tmp_path), libraries.GEMLITE, problems) == {"h100": good}
    assert problems == [
        f"{tmp_path / 'a100.json'} is torn or not JSON (Unterminated string starting at: line 1 column 11 (char 10))"
    ]


@needs_gemlite
def test_every_table_gemlite_ships_is_a_gemlite_table_to_the_check():
    folder = os.path.join(os.path.dirname(importlib.util.find_spec("gemlite").origin), "configs")
    problems = []
    found = tables.shipped_tables(folder, libraries.GEMLITE, problems)
    assert problems == [] and "h100" in found and len(found["h100"]["GEMV_REVSPLITK"]) == 54


def test_a_pruner_that_offers_one_config_with_no_library_record_is_not_auditable():
    line = {"op": "m.k", "key": "(1,)", "source": "pruner", "shipped": "s", "offered": ["s"], "call": {"file": "f"}}
    assert run.to_price([line]) == []
    said = judge.judge(line, None, None)
    assert said["class"] == "not auditable" and said["reason"].startswith("its pruner offered one config")


def test_write_keeps_the_clean_pick_in_triton_disk_cache_as_tritons_own_reader_reads_it(tmp_path):
    import builtins

    import triton

    from cleanflush._calls import config_spec

    configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 32) for w in (1, 2)]
    key = [4, "torch.float32", "torch.float32"]
    cache, out = tmp_path / "cache", tmp_path / "out"

    def put(folder, with_key, timings):  # as Autotuner.check_disk_cache writes the file (triton 3.7.1)
        (cache / folder).mkdir(parents=True)
        pairs = [(c.__dict__, t) for c, t in zip(configs, timings)]
        (cache / folder / "scale_add.autotune.json").write_text(json.dumps({"key": with_key, "configs_timings": pairs}))

    put("a1", key, [[0.010, 0.01, 0.01], [0.012] * 3, [0.011] * 3, [0.013] * 3])  # the shipped pick: configs[0]
    put("b2", [8, "torch.float32", "torch.float32"], [[0.010] * 3] * 4)  # another key: never touched
    before = {p: p.read_bytes() for p in cache.rglob("*.json")}
    line = {"op": "tablekernel.scale_add", "key": repr(tuple(key)), "source": "disk cache", "shipped": str(configs[0]),
            "offered": [str(c) for c in configs], "specs": {str(c): config_spec(c) for c in configs},
            "call": {"file": "x.pt"}, "tuning_key": key, "cache_dir": str(cache)}  # fmt: skip
    entry = {"class": "wrong", "op": line["op"], "key": line["key"], "source": "disk cache", "shipped": line["shipped"],
             "clean": str(configs[3]), "reason": ""}  # fmt: skip
    [written] = tables.write_corrected([(entry, line)], str(tmp_path / "work"), str(out), [])
    assert written["path"] == str(out / "triton-cache" / "a1" / "scale_add.autotune.json") == entry["written"]
    assert {p: p.read_bytes() for p in cache.rglob("*.json")} == before and not (out / "triton-cache" / "b2").exists()
    with open(written["path"]) as f:  # read back as check_disk_cache reads it
        timings = {triton.Config(**config): timing for config, timing in json.load(f)["configs_timings"]}
    assert str(builtins.min(timings, key=timings.get)) == str(configs[3])
    assert sorted(t[0] for t in timings.values())[1] == 0.010  # every other timing as it was


def test_the_real_pricing_process_without_a_gpu_says_so_for_each_entry_and_the_json_is_whole(tmp_path, interpreter):
    command = write_job(tmp_path, job=JOB + "\nprint('the job speaks')\n")
    out = audit_cli(["--json", "--", *command], {"TRITON_INTERPRET": "1"}, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    record = json.loads(out.stdout)
    assert "the job speaks" in out.stderr and "the job speaks" not in out.stdout  # stdout is the record's
    assert [e["class"] for e in record["entries"]] == ["not auditable"] * 3
    assert {e["reason"] for e in record["entries"]} == {"it could not be priced: the pricing process failed (exit 1)"}
    assert (
        "cleanflush audit: no CUDA device here" in out.stderr
        and "cleanflush audit: re-tuning and pricing 3" in out.stderr
    )


def test_the_graph_timer_streams_its_copies_from_memory_and_the_search_is_cut_to_its_leaders():
    from cleanflush._audit import graph, price

    assert graph.copies_for(8 << 20, 50 << 20) == 25  # 4 x L2 over 8 MiB calls
    assert graph.copies_for(512 << 20, 50 << 20) == 2  # at least two: no launch reads what the last one left
    assert graph.copies_for(1024, 50 << 20) == graph.MOST_COPIES
    assert graph.copies_for(6 << 30, 50 << 20) == 2 and graph.copies_for(3 << 30, 50 << 20) == 2
    swept = {"a": 5.0, "b": 4.0, "c": 9.0, "d": 4.5}
    assert price._leaders(["a", "b", "c", "d"], swept, 2) == ["b", "d"]  # the fastest two, in the autotuner's order
    assert price._leaders(["a", "b", "c", "d"], swept, 8) == ["a", "b", "c", "d"]


def test_the_graph_timer_replays_every_graph_untimed_before_its_first_timed_round(monkeypatch):
    import torch

    from cleanflush._audit import graph

    seen = []  # what the GPU was asked to do, in order

    class Graph:
        def __init__(self, label):
            self.label = label

        def replay(self):
            seen.append(("replay", self.label))

    class Event:
        def __init__(self, enable_timing=False):
            pass

        def record(self):
            seen.append(("timed",))

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 1.0

    class Call:
        args, kwargs = [], {}

        def launch(self, label, tuning_hooks):
            return lambda: None

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: type("P", (), {"L2_cache_size": 50 << 20}))
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    labels = iter(["shipped", "clean"])
    monkeypatch.setattr(graph, "_captured", lambda launches: Graph(next(labels)))
    monkeypatch.setattr(graph, "WARM_UP_S", 0.02)
    prices, _ = graph.graph_prices(Call(), ["shipped", "clean"], rounds=3)
    before = seen[: seen.index(("timed",))]
    assert set(before) == {("replay", "shipped"), ("replay", "clean")}  # both warmed, untimed
    assert before.count(("replay", "shipped")) >= 2  # more than one round: warmed for a while, not once
    assert len(prices["shipped"]["rounds"]) == 3  # the warm-up adds no timed round
    monkeypatch.setattr(graph, "warm_up", lambda graphs, seconds=0.0: 0)  # the negative control: no warm-up
    seen.clear()
    labels = iter(["shipped", "clean"])
    graph.graph_prices(Call(), ["shipped", "clean"], rounds=3)
    assert seen[0] == ("timed",)


TUNED_KERNEL = (
    KERNEL
    + """

def bench(kernel_call, quantiles=None, **kw):  # a stand-in timer: the interpreter has no GPU to time on
    kernel_call()
    return [1.0, 1.0, 1.0]


@triton.autotune(configs=CONFIGS, key=["n"], do_bench=bench)
@triton.jit
def tuned_add(x, out, n, scale, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + scale, mask=m)
"""
)


@needs_autotune_do_bench
def test_a_key_the_job_tunes_itself_is_counted_not_audited(tmp_path, interpreter):
    job = JOB + "\nk.call(k.tuned_add, 100)\n"
    command = write_job(tmp_path, kernel=TUNED_KERNEL, job=job)
    result, code = run.run(command, keep=str(tmp_path / "work"), pricer=stand_in_pricer())
    assert code == 0 and result["tuned_here"] == 1 and result["headline"]["entries"] == 3
    assert {e["op"] for e in result["entries"]} == {"tablekernel.scale_add"}
    assert audited(result)["100"]["calls"] == 3  # the other kernel's call with the same n is its own
    assert os.listdir(tmp_path / "work" / "calls") and len(os.listdir(tmp_path / "work" / "calls")) == 3  # none for it
    assert "1 decision(s) it tuned itself (not audited)" in format_report(result)


def test_a_torn_or_hostile_recorder_line_is_skipped_with_why_and_the_others_kept(tmp_path):
    good = {"kind": "served", "op": "m.k", "key": "(1,)", "source": "preloaded", "shipped": "s", "offered": ["s"],
            "specs": {"s": {"kwargs": {}}}, "call": {"file": "f.pt"}, "device": None}  # fmt: skip
    lines = [
        json.dumps(good),
        json.dumps({**good, "key": "(2,)", "entry": {"family": 3}}),
        json.dumps({**good, "key": "(3,)", "specs": {"s": "import os"}}),
        '{"kind": "served", "op": "m.k", "ke',
        json.dumps({**good, "key": "(1,)", "shipped": "another process's"}),  # the same key again: the first kept
    ]
    (tmp_path / "served.jsonl").write_text("\n".join(lines) + "\n")
    found, bad = run.read_served(str(tmp_path / "served.jsonl"))
    assert found == [good]
    assert [line.split(": skipped, ")[1] for line in bad] == [
        "its table entry is not a family, a signature and a config",
        "its specs are not configs",
        "Invalid control character at: line 1 column 36 (char 35)",  # torn: its string ends at the newline
    ]
