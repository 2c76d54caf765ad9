"""The bounds every GPU test runs under (tests/gpu/bounds.py), checked on the CPU: a child past
its timeout is killed with the processes it started, and the test fails with what it wrote; a
test past its limit fails where it stands."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from .gpu.bounds import bounded, run_child

# A child that says something on each stream, starts a grandchild that would outlive it, then
# never ends on its own: the grandchild writes its pid to a file first.
HANGS = """
import subprocess, sys, time
print("started", flush=True)
print("working on it", file=sys.stderr, flush=True)
worker = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
subprocess.Popen([sys.executable, "-c", worker, sys.argv[1]])
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (killed, not yet reaped by its parent, init here) counts as gone
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_child_past_its_timeout_is_killed_with_its_workers_and_the_test_says_what_it_wrote(tmp_path):
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as failed:
        run_child([sys.executable, "-c", HANGS, str(pidfile)], os.environ, timeout=5)
    assert time.monotonic() - started < 30
    message = str(failed.value)
    assert "ran past 5 s and was killed" in message
    assert "started" in message and "working on it" in message  # the child's stdout and stderr
    for _ in range(50):  # the grandchild had time to write its pid; the group's kill took it too
        if pidfile.exists() and pidfile.read_text():
            break
        time.sleep(0.1)
    grandchild = int(pidfile.read_text())
    for _ in range(50):
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild)


def test_a_child_that_fails_fails_the_test_with_its_output():
    with pytest.raises(pytest.fail.Exception) as failed:
        run_child([sys.executable, "-c", "import sys; print('out'); sys.exit('the reason')"], os.environ, timeout=60)
    assert "exited 1" in str(failed.value) and "the reason" in str(failed.value) and "out" in str(failed.value)
    done = run_child([sys.executable, "-c", "print('fine')"], os.environ, timeout=60)  # the control
    assert done.returncode == 0 and done.stdout == "fine\n"


def test_a_test_past_its_limit_fails_where_it_stands_even_inside_a_broad_except():
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="the block ran past its limit of 1 s"), bounded(1, "the block"):
        try:
            time.sleep(30)
        except Exception:  # what keeps a benchmark alive does not keep a test past its limit
            pass
        time.sleep(30)
    assert time.monotonic() - started < 10


def test_a_child_running_at_the_limit_is_killed_and_said(tmp_path):
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as stopped, bounded(2, "the test"):
        run_child([sys.executable, "-c", HANGS, str(tmp_path / "pid")], os.environ, timeout=60)
    assert time.monotonic() - started < 30
    message = str(stopped.value)
    assert "the test ran past its limit of 2 s" in message and "(killed)" in message and "started" in message


def test_within_its_limit_nothing_is_left_armed():
    before = signal.getsignal(signal.SIGALRM)
    with bounded(5, "quick"):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before
