"""The built wheel carries the autoload files at its root, next to the packages."""

import importlib.util
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_wheel_has_the_autoload_files_at_its_root(tmp_path):
    # Offline machines (the GPU box) have the build backend installed; elsewhere pip fetches it.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("hatchling") else []
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", *isolation, "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    wheel = next(tmp_path.glob("cleanflush-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        pth = zf.read("cleanflush.pth").decode()
        metadata = zf.read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert {
        "cleanflush.pth",
        "cleanflush.start",
        "_cleanflush_boot.py",
        "cleanflush/__init__.py",
        "cleanflush/py.typed",
    } <= names
    assert not any(n.startswith(("tests/", "benchmarks/", "matrix/")) for n in names)
    # one line, gated on the variables before anything but os is imported
    gate = (
        'import os; (os.environ.get("CLEANFLUSH", "").strip() or os.environ.get("CLEANFLUSH_PICK", "").strip() '
        'or os.environ.get("CLEANFLUSH_PICK_FILE", "").strip())'
    )
    assert pth.count("\n") == 1 and pth.startswith(gate)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names  # MIT wants it along
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    runtime = [line for line in requires if "extra ==" not in line]
    assert runtime == ["Requires-Dist: wrapt>=1.16"]  # never torch or triton


def test_the_version_is_written_once_in_pyproject_and_is_the_newest_release():
    import importlib.metadata
    import re

    import cleanflush

    declared = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared is not None
    assert cleanflush.__version__ == importlib.metadata.version("cleanflush") == declared[1]
    newest = re.search(r"^## \[(\d[^\]]*)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert newest is not None and newest[1] == declared[1]
    assert not re.search(r"__version__\s*=", (ROOT / "src/cleanflush/__init__.py").read_text())
    out = subprocess.run([sys.executable, "-m", "cleanflush", "-V"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["cleanflush", declared[1]]


def test_the_sdist_ships_the_package_its_tests_and_docs_but_no_repository_plumbing(tmp_path):
    if importlib.util.find_spec("build") is None:
        import pytest

        pytest.skip("needs the build frontend (pip install build)")
    isolation = ["--no-isolation"] if importlib.util.find_spec("hatchling") else []
    out = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", *isolation, "-o", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    [sdist] = tmp_path.glob("cleanflush-*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    assert {"src/cleanflush/__init__.py", "tests/conftest.py", "docs/cli.md", "benchmarks/startup.py"} <= names
    assert {"pyproject.toml", "README.md", "LICENSE"} <= names
    # (.gitignore goes along whatever pyproject says: hatchling force-includes it)
    plumbing = [n for n in names if n.startswith((".ci/", "tests/mutation/", "benchmarks/results/"))]
    assert plumbing == []
