"""The contract every target of the registry keeps, in the manner of ddtrace's
tests/contrib/patch.py: in fresh interpreters, with warnings as errors,

* imported before and after cleanflush: every point the target patches is patched, over the
  stock object, and its status rows say "patched";
* install/uninstall cycles: uninstall puts back the exact stock objects (rows "off"), a
  second install wraps once, over the stock object;
* ``CLEANFLUSH_DISABLE=<name>``: nothing of it is touched, every row says "disabled";
* a patch that raises half way: the import still works, the stock objects are back, one
  line says why, the row says "failed";
* status before the import: "pending" where its package is installed, "absent" where not.

The real packages where they install (torch, triton; flashinfer-python and tilelang in the
harness tests), the stand-ins of tests/standins.py for the git-only harnesses.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from cleanflush import _registry

from . import standins
from .conftest import run_python, write_stand_ins

HARNESS = pytest.mark.harness


@dataclass(frozen=True)
class Spec:
    modules: tuple[str, ...]  # importing these applies the target
    points: str  # the body of points(): {label: object} of everything it patches, when loaded
    package: str | None = None  # the real package it needs; None: the stand-ins
    marks: tuple[pytest.MarkDecorator, ...] = ()


def attributes(*pairs: str) -> str:
    """points() over "module:Owner.attr" (or "module:attr") strings, read with vars()."""
    return f"""
    out = {{}}
    for spec in {pairs!r}:
        module, _, path = spec.partition(":")
        owner = sys.modules.get(module)
        *owners, attr = path.split(".")
        for name in owners:
            owner = vars(owner).get(name) if owner is not None else None
        if owner is not None and attr in vars(owner):
            out[spec] = vars(owner)[attr]
    return out
"""


TRITON = """
    out = {}
    import triton.backends
    classes = [b.driver for b in triton.backends.backends.values()]
    for module, name in (("triton.backends.nvidia.driver", "CudaDriver"), ("triton.backends.amd.driver", "HIPDriver")):
        if module in sys.modules:
            classes.append(getattr(sys.modules[module], name))
    for cls in classes:
        for attr in ("clear_cache", "get_empty_cache_for_benchmark"):
            if attr in vars(cls):
                out[f"{cls.__module__}.{cls.__qualname__}.{attr}@{id(cls)}"] = vars(cls)[attr]
    if not out:  # triton 3.0-3.1: no flush method on a driver; do_bench zeroes its own buffer
        out["triton.testing.do_bench"] = vars(sys.modules["triton.testing"])["do_bench"]
    return out
"""
SPECS = {
    "triton": Spec(("triton.testing",), TRITON, "triton"),
    "inductor": Spec(
        ("torch._inductor.runtime.benchmarking", "torch._inductor.utils"),
        attributes(
            "torch._inductor.runtime.benchmarking:InductorBenchmarker.benchmark_gpu",
            "torch._inductor.runtime.benchmarking:InductorBenchmarker.get_event_pairs",
            "torch._inductor.runtime.benchmarking:TorchProfilerBenchmarker.benchmark_gpu",
            "torch._inductor.utils:_do_bench_using_profiling",
            "torch.autograd.profiler:record_function.__enter__",
        ),
        "torch",
    ),
    "tritonbench": Spec(
        ("tritonbench.components.do_bench.run",),
        attributes("tritonbench.components.do_bench.run:_is_cache_clear_kernel"),
    ),
    "tilelang": Spec(
        ("tilelang.profiler.bench",),
        attributes(*(f"tilelang.profiler.bench:_bench_with_{kind}" for kind in ("cuda_events", "cupti", "cudagraph"))),
        "tilelang",
        (HARNESS,),
    ),
    "flashinfer": Spec(
        ("flashinfer.testing",),
        attributes(
            *(
                f"{module}:{name}"
                for module in ("flashinfer.testing.utils", "flashinfer.testing")
                for name in ("bench_gpu_time_with_cuda_event", "bench_gpu_time_with_cupti")
            )
        ),
        "flashinfer",
        (HARNESS,),
    ),
    "deep-gemm": Spec(
        ("deep_gemm.testing",), attributes("deep_gemm.testing.bench:bench_kineto", "deep_gemm.testing:bench_kineto")
    ),
    "sglang": Spec(("sglang.srt.bench_utils",), attributes("sglang.srt.bench_utils:bench_kineto")),
    "kernelbench": Spec(("kernelbench.timing",), attributes("kernelbench.timing:clear_l2_cache")),
    "sol-execbench": Spec(
        ("sol_execbench.core.bench.timing",), attributes("sol_execbench.core.bench.timing:_clear_cache")
    ),
    "deep-ep": Spec(("deep_ep.utils.testing",), attributes("deep_ep.utils.testing:flush_l2_cache")),
    "cute-dsl": Spec(("cutlass.testing",), attributes("cutlass.testing:cuda_driver"), "cutlass", (HARNESS,)),
    "gpu-mode": Spec(("utils",), attributes("utils:clear_l2_cache", "utils:clear_l2_cache_large")),
    "tilegym": Spec(("bench_utils",), attributes("bench_utils:profile_with_l2flush")),
    "thunderkittens": Spec(("common",), attributes("common:benchmark_l2_clear")),
}
SCRIPTS = {"gpu-mode", "tilegym", "thunderkittens"}  # a script's own modules: no package to find


def test_every_target_of_the_registry_has_a_contract():
    assert set(SPECS) == set(_registry.NAMES)


# a target without a spec fails the test above alone, not the collection of every contract test
TARGETS = [pytest.param(name, marks=SPECS[name].marks) for name in _registry.NAMES if name in SPECS]

PRELUDE = """
import importlib, json, sys
sys.path.insert(0, STAND_INS)
NAME, MODULES = {name!r}, {modules!r}
def points():
{points}
def load():
    for module in MODULES:
        importlib.import_module(module)
def rows():
    import cleanflush
    return [[r.target, r.state, r.detail] for r in cleanflush.status() if r.name == NAME]
"""


def child(tmp_path, name, body, env=None):
    spec = SPECS[name]
    if spec.package:
        pytest.importorskip(spec.package)
    write_stand_ins(tmp_path, standins.ALL)
    code = (
        PRELUDE.format(name=name, modules=spec.modules, points=spec.points.strip("\n")).replace(
            "STAND_INS", repr(str(tmp_path))
        )
        + body
    )
    # warnings are errors, but the harness packages' own deprecations are not ours to fix
    out = run_python(code, env, args=("-W", "error", "-W", "ignore::DeprecationWarning"))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1]), out.stderr


CYCLES = """
stock = {}
if FIRST == "target":
    load()
    stock = points()
import cleanflush
if FIRST == "cleanflush":
    load()
first = points()
first_rows = rows()
cleanflush.uninstall()
if not stock:
    stock = points()
cycles = []
for _ in range(2):
    cleanflush.uninstall(); cleanflush.uninstall()
    restored = points()
    off_rows = rows()
    cleanflush.install(); cleanflush.install()
    again = points()
    cycles.append({
        "restored": all(restored[k] is stock[k] for k in stock) and set(restored) == set(stock),
        "once": all(getattr(again[k], "__wrapped__", None) is stock[k] for k in stock),
        "same": all(again[k] is first[k] for k in first),
    })
print(json.dumps({"points": sorted(first), "changed": [k for k in first if first[k] is not stock[k]],
                  "rows": first_rows, "off_rows": off_rows, "cycles": cycles}))
"""


@pytest.mark.parametrize("first", ["target", "cleanflush"])
@pytest.mark.parametrize("name", TARGETS)
def test_both_import_orders_patch_and_cycles_restore_exactly(tmp_path, name, first):
    out, stderr = child(tmp_path, name, f"FIRST = {first!r}\n" + CYCLES)
    assert out["points"], "the import loaded nothing to patch"
    assert sorted(out["changed"]) == out["points"]  # every point is ours now
    assert out["rows"] and all(state == "patched" for _, state, _ in out["rows"]), out["rows"]
    assert {state for _, state, _ in out["off_rows"]} == {"off"}
    assert out["cycles"] == [{"restored": True, "once": True, "same": True}] * 2
    assert "cleanflush" not in stderr, stderr


DISABLED = """
load()
stock = points()
import cleanflush
after = points()
print(json.dumps({"untouched": all(after[k] is stock[k] for k in stock) and bool(stock), "rows": rows()}))
"""


@pytest.mark.parametrize("name", TARGETS)
def test_disabled_by_name_nothing_is_touched_and_status_says_so(tmp_path, name):
    out, stderr = child(tmp_path, name, DISABLED, {"CLEANFLUSH_DISABLE": f"kernelbench,{name}", "CLEANFLUSH": "1"})
    assert out["untouched"]
    assert out["rows"] and {state for _, state, _ in out["rows"]} == {"disabled"}
    assert all(detail == "disabled by CLEANFLUSH_DISABLE; stock flush kept" for _, _, detail in out["rows"])
    assert "cleanflush" not in stderr, stderr


FAILING = """
load()
stock = points()
import importlib, cleanflush
cleanflush.uninstall()
patch = importlib.import_module(cleanflush._registry.BY_NAME[NAME].module)
real_apply = patch.apply
def apply():
    real_apply()  # patches everything, then fails: the generic code must undo it
    raise RuntimeError("a layout nobody expected")
patch.apply = apply
cleanflush.install()
after = points()
print(json.dumps({"restored": all(after[k] is stock[k] for k in stock) and bool(stock), "rows": rows()}))
"""


def proton_rows():
    import triton.testing

    names = [n for n in ("do_bench_proton", "do_bench_cudagraph_proton") if hasattr(triton.testing, n)]
    return ["triton.testing." + " / ".join(names)] if names else []


@pytest.mark.parametrize("name", TARGETS)
def test_a_patch_that_fails_half_way_leaves_the_stock_objects_and_says_why_once(tmp_path, name):
    out, stderr = child(tmp_path, name, FAILING)
    assert out["restored"]
    (site, state, detail), *derived = out["rows"]
    assert (site, state) == (_registry.BY_NAME[name].title, "failed")
    # rows computed from another target's state stay: Inductor's TritonBenchmarker flushes through
    # triton, and Proton's helpers (triton 3.8+) through triton's driver
    expected = {"inductor": ["TritonBenchmarker.benchmark_gpu"], "triton": proton_rows()}.get(name, [])
    assert [row[0] for row in derived] == expected
    assert detail == (f"could not patch {name} (RuntimeError('a layout nobody expected')); its stock flush is kept")
    lines = [line for line in stderr.splitlines() if "cleanflush" in line]
    assert len(lines) == 1 and detail in lines[0] and "warnings are errors" in lines[0], stderr


BEFORE = """
import cleanflush
before = rows()
load()
print(json.dumps({"before": before, "loaded": any(m in sys.modules for m in MODULES)}))
"""


@pytest.mark.parametrize("name", TARGETS)
def test_status_of_a_disabled_target_before_the_import(tmp_path, name):
    out, _ = child(tmp_path, name, BEFORE, {"CLEANFLUSH_DISABLE": name})
    target = _registry.BY_NAME[name]
    expected = (
        ("disabled", "disabled by CLEANFLUSH_DISABLE; stays stock when imported")
        if SPECS[name].package or name in SCRIPTS
        else ("absent", f"{target.distributions[0]} is not installed")
    )
    assert out["before"] == [[target.title, *expected]]


@pytest.mark.parametrize("name", TARGETS)
def test_status_before_the_import(tmp_path, name):
    out, _ = child(tmp_path, name, BEFORE)
    target = _registry.BY_NAME[name]
    if name in SCRIPTS:
        expected = ("pending", f"a script's own module: patched when a script imports {SPECS[name].modules[0]}")
    elif SPECS[name].package:
        expected = ("pending", "not imported yet; patched when it is")
    else:
        expected = ("absent", f"{target.distributions[0]} is not installed")  # stand-ins are not installed
    assert out["before"] == [[target.title, *expected]]


FAKE_TARGET = """
from cleanflush import _registry

fake = _registry.Target("fastbench", "fastbench", ("fastbench",), ("fastbench",), "fastbench:apply", "fastbench:revert")
_registry.TARGETS += (fake,)
_registry.NAMES += (fake.name,)
_registry.BY_NAME[fake.name] = fake
"""


def test_a_target_without_a_spec_fails_one_test_not_the_collection(pytester):
    """A harness added to the registry before its spec: the test that every target has one
    fails, and every other contract test still runs (none is made for the new target)."""
    pytester.makepyfile(fake_target=FAKE_TARGET)
    here = __file__
    args = ("-p", "fake_target", "-p", "no:cacheprovider", here)
    listed = pytester.runpytest_subprocess(*args, "--collect-only", "-q")
    assert listed.ret == pytest.ExitCode.OK, listed.stdout.str()[-2000:]
    collected = [line for line in listed.stdout.lines if "::" in line]
    assert collected and not [line for line in collected if "fastbench" in line]
    ran = pytester.runpytest_subprocess(*args, "-k", "every_target_of_the_registry_has_a_contract")
    ran.assert_outcomes(failed=1)
    ran.stdout.fnmatch_lines(["*fastbench*"])  # the failure names it
    control = pytester.runpytest_subprocess("-p", "no:cacheprovider", here, "--collect-only", "-q")
    assert len([line for line in control.stdout.lines if "::" in line]) == len(collected)
