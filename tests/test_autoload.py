"""Import orders and the CLEANFLUSH switch, each in a fresh interpreter."""

import pytest

from .conftest import run_python

pytest.importorskip("triton")

PROBE = """
import triton
cls = triton.backends.backends["nvidia"].driver
print(type(vars(cls)["clear_cache"]).__name__)
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
        """
        import triton, triton.testing
        cls = triton.backends.backends["nvidia"].driver
        before = vars(cls)["clear_cache"]
        import cleanflush
        after = vars(cls)["clear_cache"]
        print(type(before).__name__, type(after).__name__, after.__wrapped__ is before)
        """
    )
    assert child.stdout.split() == ["function", "FunctionWrapper", "True"], child.stderr


def test_no_import_and_no_variable_leaves_triton_stock():
    out, _ = probe({})  # PROBE imports cleanflush only after reading the class
    assert out[0] == "function"


@pytest.mark.parametrize("value, policy", [("1", "write-read"), ("on", "write-read"), ("read", "read"), ("write-read", "write-read"), ("write", "write")])
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


def test_startup_with_variable_imports_neither_torch_nor_triton():
    child = run_python("import sys; print(sorted(m for m in ('torch', 'triton', 'cleanflush') if m in sys.modules))",
                       {"CLEANFLUSH": "1"})
    assert child.stdout.strip() == "['cleanflush']", child.stderr


def test_autoload_file_is_installed():
    child = run_python("import site, os; print(any(os.path.exists(os.path.join(d, 'cleanflush.pth')) "
                       "for d in site.getsitepackages()))")
    assert child.stdout.strip() == "True"
