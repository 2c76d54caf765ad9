"""Import orders and the CLEANFLUSH switch, each in a fresh interpreter."""

import json
from pathlib import Path

import pytest

from .conftest import run_python
from .triton_layout import FLUSH_SITE

ROOT = Path(__file__).resolve().parent.parent

pytest.importorskip("triton")

IMPORT, OWNER, ATTRIBUTE = FLUSH_SITE  # where this triton flushes
PROBE = f"""
{IMPORT}
print(type(vars({OWNER})[{ATTRIBUTE!r}]).__name__)
import cleanflush
print(cleanflush.current_policy() if cleanflush.is_installed() else "off")
"""


def probe(env, prefix=""):
    child = run_python(prefix + PROBE, env)
    assert child.returncode == 0, child.stderr
    return child.stdout.split(), child.stderr


def test_cleanflush_imported_first():
    out, _ = probe({}, "import cleanflush\n")
    assert out == ["FunctionWrapper", "write-read"]


def test_triton_imported_first():
    child = run_python(
        f"""
        import triton, triton.testing
        before = vars({OWNER})[{ATTRIBUTE!r}]
        import cleanflush
        after = vars({OWNER})[{ATTRIBUTE!r}]
        print(type(before).__name__, type(after).__name__, after.__wrapped__ is before)
        """
    )
    assert child.stdout.split() == ["function", "FunctionWrapper", "True"], child.stderr


def test_no_import_and_no_variable_leaves_triton_stock():
    out, _ = probe({})  # PROBE imports cleanflush only after reading the class
    assert out[0] == "function"


@pytest.mark.parametrize(
    "value, policy",
    [("1", "write-read"), ("on", "write-read"), ("read", "read"), ("write-read", "write-read"), ("write", "write")],
)
def test_variable_alone_patches_without_import(value, policy):
    out, _ = probe({"CLEANFLUSH": value})
    assert out == ["FunctionWrapper", policy]


@pytest.mark.parametrize("value", ["0", "off"])
def test_variable_off_disables_even_the_import(value):
    out, _ = probe({"CLEANFLUSH": value}, "import cleanflush\n")
    assert out == ["function", "off"]


def test_bad_value_warns_one_line_and_stays_stock():
    out, err = probe({"CLEANFLUSH": "fast"}, "import cleanflush\n")
    assert out == ["function", "off"]
    lines = [line for line in err.splitlines() if "cleanflush" in line]
    assert len(lines) == 1
    assert "'fast'" in lines[0] and "write-read, read, write" in lines[0]


def test_startup_imports_nothing_when_unset():
    child = run_python("pass", {}, args=("-X", "importtime"))
    imported = [line.rsplit("|", 1)[-1].strip() for line in child.stderr.splitlines() if "|" in line]
    assert imported, child.stderr  # importtime did report
    assert not [m for m in imported if m.startswith(("cleanflush", "_cleanflush_boot", "wrapt"))]


LAZY = """
import sys
def loaded():
    return sorted(m for m in ("_cleanflush_boot", "cleanflush", "wrapt", "torch", "triton") if m in sys.modules)
print(loaded())
import json, os  # anything but torch or triton: nothing wakes
print(loaded())
import {first}
print(loaded())
import cleanflush
cls = sys.modules["triton"].backends.backends["nvidia"].driver if "triton" in sys.modules else None
print(cleanflush.is_installed(), cleanflush._state.STATE.source)
"""


@pytest.mark.parametrize("value", ["1", "write-read", "read", "write", "yes"])
@pytest.mark.parametrize("first", ["triton", "torch"])
def test_autoload_waits_for_torch_or_triton(value, first):
    child = run_python(LAZY.format(first=first), {"CLEANFLUSH": value})
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    assert lines[0] == lines[1] == "['_cleanflush_boot']"  # neither cleanflush nor wrapt yet
    assert "'cleanflush'" in lines[2] and "'wrapt'" in lines[2]  # woken by the first import
    assert lines[3] == "True autoload"


@pytest.mark.parametrize("value, booted", [("0", True), ("off", True), (" OFF ", True), ("no", True), ("", False)])
def test_off_values_import_nothing_but_the_start_up_hook(value, booted):
    # unset or empty: not even the hook; set to an off value: the stdlib-only hook, which holds
    # the one list of off values, reads it and installs nothing (benchmarks/startup.py: its cost)
    child = run_python(
        "import sys; print(sorted(m for m in ('_cleanflush_boot', 'cleanflush', 'wrapt') if m in sys.modules)); "
        "print(any(getattr(f, '__name__', '') == '_WakeOnImport' for f in sys.meta_path))",
        {"CLEANFLUSH": value},
    )
    imported, waiting = child.stdout.splitlines()
    assert imported == ("['_cleanflush_boot']" if booted else "[]"), child.stderr
    assert waiting == "False"  # nothing waits for torch or triton


def test_patched_right_after_the_import_that_woke_it():
    child = run_python(
        f"import triton.testing\nprint(type(vars({OWNER})[{ATTRIBUTE!r}]).__name__)", {"CLEANFLUSH": "1"}
    )
    assert child.stdout.strip() == "FunctionWrapper", child.stderr


def test_the_off_values_are_written_once():
    # the boot module reads them before cleanflush can be imported; the parser takes its list,
    # and the .pth line keeps none of its own (it only asks whether the variable is set)
    import ast

    import _cleanflush_boot
    from cleanflush import _env

    pth = (ROOT / "src" / "cleanflush.pth").read_text()
    assert [node for node in ast.walk(ast.parse(pth)) if isinstance(node, (ast.Tuple, ast.List, ast.Set))] == []
    assert _env.OFF is _cleanflush_boot.OFF and "off" in _env.OFF


def test_the_autoload_wakes_at_every_target_trigger():
    import _cleanflush_boot
    from cleanflush import _registry

    triggers = {module.split(".")[0] for target in _registry.TARGETS for module in target.triggers}
    assert triggers == _cleanflush_boot.TRIGGERS


def test_a_left_behind_autoload_file_says_one_line():
    # an editable checkout deleted: the .pth stays in site-packages, its module is gone
    child = run_python("print('ran')", {"CLEANFLUSH": "1", "PYTHONPATH": None}, args=("-S",))
    assert child.stdout == "ran\n"  # -S: no .pth ran; below, the line itself, without its module
    pth = (ROOT / "src" / "cleanflush.pth").read_text()
    # twice, as in a venv whose lib64 links to lib: Python runs the site-packages' .pth lines again
    line = f"exec(compile({pth!r}, 'cleanflush.pth', 'exec'))\n"
    code = "import sys; sys.modules['_cleanflush_boot'] = None\n" + line * 2 + "print('ran')"
    child = run_python(code, {"CLEANFLUSH": "1"})
    assert child.returncode == 0 and child.stdout == "ran\n"
    assert child.stderr.count("\n") == 1 and "left without its module _cleanflush_boot" in child.stderr


def test_autoload_file_is_installed():
    child = run_python(
        "import site, os; print(any(os.path.exists(os.path.join(d, 'cleanflush.pth')) for d in site.getsitepackages()))"
    )
    assert child.stdout.strip() == "True"


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
    testing = sys.modules.get("triton.testing")
    if testing is not None and backends and not any(k.startswith("triton ") for k in out):
        out["triton.testing.do_bench"] = vars(testing)["do_bench"]  # 3.0-3.1: the flush is inline there
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


AUTOLOAD = (
    POINTS
    + """
import importlib, json
importlib.import_module(MODULE)
now = points()
print(json.dumps({"patched": bool(now) and all(wrapped(v) for v in now.values()),
                  "cleanflush": "cleanflush" in sys.modules}))
"""
)


@pytest.mark.parametrize(
    "value, patched",
    [
        (None, False),
        ("0", False),
        ("off", False),
        ("1", True),
        ("on", True),
        ("read", True),
        ("write-read", True),
        ("write", True),
        ("bogus", False),
    ],
)
@pytest.mark.parametrize("module", ["triton.testing", "torch._inductor.runtime.benchmarking"])
def test_autoload_under_every_value(module, value, patched):
    child = run_python(f"MODULE = {module!r}\n" + AUTOLOAD, {"CLEANFLUSH": value}, args=("-W", "error"))
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout)
    assert out["patched"] is patched, (out, child.stderr)
    complaints = [line for line in child.stderr.splitlines() if "cleanflush" in line]
    assert len(complaints) == (1 if value == "bogus" else 0), child.stderr


def test_a_harness_that_imports_torch_itself_is_patched_when_it_wakes_the_autoload(tmp_path):
    # kernelbench/timing.py starts with `import torch`: waking at torch, its hook would fire
    # on the half-made module and find nothing to patch
    from .conftest import write_stand_ins
    from .standins import MODULE_FUNCTIONS

    write_stand_ins(tmp_path, MODULE_FUNCTIONS)
    child = run_python(
        f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n"
        "import kernelbench.timing as t\nprint(type(vars(t)['clear_l2_cache']).__name__)",
        {"CLEANFLUSH": "1"},
    )
    assert child.stdout.strip() == "FunctionWrapper", child.stderr
