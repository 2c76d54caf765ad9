"""On a CUDA GPU, with part of L2 set aside for persisting lines and a window over a one-row
GEMV's weight: cleanflush's write-read resets the set-aside (the limit reads 0 after it),
fails nowhere, and gives the limit back at uninstall; after it the weight is as cold as after
a plain read with no window.  The measurement is benchmarks/persist.py's, made in a fresh
process (the set-aside is a setting of the process's CUDA context: none leaks into the other
tests), which gets ``TIMEOUT_S`` and fails with its output past it.

Whether the stock flush leaves such a weight warm is the study's question, not asserted here:
on an H100 the window's weight was no faster than cold after any flush, the stock flush's own
write-back penalty on top (benchmarks/results/h100/persist.json; docs/limits.md).
Run: pytest -m gpu -s tests/gpu/test_persist_gpu.py"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 300  # the child takes well under a minute on an H100 (imports, a warm-up, 20 do_bench calls)
COLD = 0.93  # cold again: at least this share (do_bench after a clean flush runs within a few % of the plain read)


def _text(out):
    return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")


def child(code, timeout=TIMEOUT_S):
    """``code`` in a fresh interpreter at the repository root (no CLEANFLUSH variable): its
    stdout as JSON; its output when it fails or runs past ``timeout``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANFLUSH")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the child ran past {timeout} s; its output:\n{_text(exc.stdout)}\n{_text(exc.stderr)}")
    assert out.returncode == 0, f"the child failed:\n{out.stdout}\n{out.stderr}"
    assert "cleanflush:" not in out.stderr, out.stderr  # a fallback or a failed check is said there
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def record():
    found = child("import json\nfrom benchmarks.persist import measure\nprint(json.dumps(measure()))")
    if "skip" in found:
        pytest.skip(found["skip"])
    print(json.dumps({k: v for k, v in found.items() if k != "rounds_us"}, indent=1))
    return found


def test_cleanflushs_write_read_leaves_it_cold_and_the_set_aside_given_back_at_uninstall(record):
    us = record["us"]
    assert us["window, write-read"] >= COLD * us["no window"], us
    assert record["limit_after_write_read"] == 0  # the reset ran: the set-aside is gone
    assert record["resets"] >= 1 and record["binding"] is not None
    assert record["status"] == []  # nothing failed, nothing fell back
    assert record["given_back"]


def test_the_negative_control_keeps_the_set_aside(record):
    # the same write-read with the reset turned off: the limit must still read what was set,
    # or the reset above is not what emptied it
    assert record["limit_without_the_reset"] == record["max_persisting"]
