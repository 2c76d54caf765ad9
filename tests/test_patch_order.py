"""The patch-order suite, in the manner of ddtrace's tests/contrib/patch.py: for every module
whose import patches something, in fresh interpreters with warnings as errors: import before
and after cleanflush, install/uninstall cycles with the exact objects restored, and the
autoload under every CLEANFLUSH value."""

import json

import pytest

from .conftest import run_python

pytest.importorskip("triton")
pytest.importorskip("torch._inductor.runtime.benchmarking")

TARGET_MODULES = [
    "triton",
    "triton.testing",
    "triton.backends.nvidia.driver",
    "torch._inductor.runtime.benchmarking",
    "torch._inductor.utils",
]

POINTS = """
import sys
def points():
    '''Every attribute cleanflush may patch that is loaded now: label -> the object there.'''
    out = {}
    backends = getattr(sys.modules.get("triton.backends"), "backends", None) or {}
    for name, backend in backends.items():
        for attr in ("clear_cache", "get_empty_cache_for_benchmark"):
            if attr in vars(backend.driver):
                out[f"triton {name}.{attr}"] = vars(backend.driver)[attr]
    bench = getattr(sys.modules.get("torch._inductor.runtime.benchmarking"), "InductorBenchmarker", None)
    if bench is not None:
        for attr in ("benchmark_gpu", "get_event_pairs"):
            out[f"InductorBenchmarker.{attr}"] = vars(bench)[attr]
    utils = sys.modules.get("torch._inductor.utils")
    region = getattr(utils, "_DO_BENCH_PROFILE_EVENT_NAME", None)
    if utils is not None and region and "_do_bench_using_profiling" in vars(utils):
        out["utils._do_bench_using_profiling"] = vars(utils)["_do_bench_using_profiling"]
    return out
def wrapped(obj):
    return type(obj).__name__ == "FunctionWrapper"
"""

ORDER = POINTS + """
import importlib, json
stock = {}
if FIRST == "target":
    importlib.import_module(MODULE)
    stock = points()
import cleanflush
if FIRST == "cleanflush":
    importlib.import_module(MODULE)
now = points()
if not stock:
    stock = {k: getattr(v, "__wrapped__", v) for k, v in now.items()}
result = {"points": sorted(now), "patched": all(wrapped(v) for v in now.values()),
          "wrapping_stock": all(now[k].__wrapped__ is stock[k] for k in now if wrapped(now[k]))}
cycles = []
for _ in range(3):
    cleanflush.uninstall(); cleanflush.uninstall()
    restored = all(v is stock[k] for k, v in points().items())
    cleanflush.install(); cleanflush.install()
    once = all(wrapped(v) and v.__wrapped__ is stock[k] for k, v in points().items())
    cycles.append([restored, once])
cleanflush.uninstall()
result["cycles"] = cycles
result["final_restore"] = all(v is stock[k] for k, v in points().items())
print(json.dumps(result))
"""


def run_order(module, first):
    child = run_python(f"MODULE, FIRST = {module!r}, {first!r}\n" + ORDER, args=("-W", "error"))
    assert child.returncode == 0, child.stderr[-3000:]
    assert "Warning" not in child.stderr, child.stderr
    return json.loads(child.stdout)


@pytest.mark.parametrize("first", ["target", "cleanflush"])
@pytest.mark.parametrize("module", TARGET_MODULES)
def test_import_order_cycles_and_exact_restore(module, first):
    out = run_order(module, first)
    assert out["points"], "the import loaded nothing to patch"
    assert out["patched"] and out["wrapping_stock"], out
    assert out["cycles"] == [[True, True]] * 3, out
    assert out["final_restore"], out


AUTOLOAD = POINTS + """
import importlib, json
importlib.import_module(MODULE)
now = points()
print(json.dumps({"patched": bool(now) and all(wrapped(v) for v in now.values()),
                  "cleanflush": "cleanflush" in sys.modules}))
"""


@pytest.mark.parametrize("value, patched", [
    (None, False), ("0", False), ("off", False), ("1", True), ("on", True),
    ("read", True), ("write-read", True), ("write", True), ("bogus", False),
])
@pytest.mark.parametrize("module", ["triton.testing", "torch._inductor.runtime.benchmarking"])
def test_autoload_under_every_value(module, value, patched):
    child = run_python(f"MODULE = {module!r}\n" + AUTOLOAD, {"CLEANFLUSH": value}, args=("-W", "error"))
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout)
    assert out["patched"] is patched, (out, child.stderr)
    complaints = [line for line in child.stderr.splitlines() if "cleanflush" in line]
    assert len(complaints) == (1 if value == "bogus" else 0), child.stderr
