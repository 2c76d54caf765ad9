"""On a CUDA GPU: a one-row GEMV whose weight sits in a persisting L2 window (the limit at its
most, hit ratio 1) stays warm through the stock flush, and through a write-read whose reset
of persisting L2 is turned off (the negative control: a write and a read alone do not evict
persisting lines); after cleanflush's write-read it is as cold as after a plain read with
no window at all.  The measurement is benchmarks/persist.py's, made in a fresh process (the
set-aside is a setting of the process's CUDA context: none leaks into the other tests),
which gets ``TIMEOUT_S`` and fails with its output past it.
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
WARM = 0.85  # "clearly faster": a warm weight's GEMV at most this share of the cold one's time
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


def test_the_stock_flush_leaves_a_persisting_weight_warm(record):
    us = record["us"]
    assert us["window, stock flush"] <= WARM * us["no window"], us


def test_negative_control_a_write_read_without_the_reset_leaves_it_warm(record):
    # what cleanflush's flush was before the reset: it would pass the cold check below only by luck
    us = record["us"]
    assert us["window, write-read without the reset"] <= WARM * us["no window"], us


def test_cleanflushs_write_read_leaves_it_cold_and_the_set_aside_given_back_at_uninstall(record):
    us = record["us"]
    assert us["window, write-read"] >= COLD * us["no window"], us
    assert us["window, write-read"] >= us["window, stock flush"] / WARM, us
    assert record["limit_after_write_read"] == 0
    assert record["resets"] >= 1 and record["binding"] is not None
    assert record["status"] == []  # nothing failed, nothing fell back
    assert record["given_back"]
