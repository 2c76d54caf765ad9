"""Every GPU test finishes in a bounded time (docs/development.md, Tests).

* ``run_child``: each process a GPU test starts runs under a timeout; past it, the child and
  every process it started are killed and the test fails with the tails of the child's stdout
  and stderr (as it does on a non-zero exit).
* ``bounded``: the whole test runs under a wall-clock limit (``@pytest.mark.limit_s(N)``, else
  ``DEFAULT_LIMIT_S``): past it, the test fails where it stands, processes that cleanflush
  starts for it included (``subprocess.run`` kills its child when the wait is interrupted).  A
  test stuck in a call that never returns to Python (a hung kernel) cannot be interrupted:
  ``GRACE_S`` later, faulthandler prints every thread's stack and ends the run.

Plain Python: the CPU tests (tests/test_gpu_bounds.py) check both.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence

import pytest

DEFAULT_LIMIT_S = 300  # a GPU test that starts no fresh process takes well under a minute
GRACE_S = 60  # after the limit, for a test stuck outside Python: the run ends with every stack
TAIL = 3000  # characters of each stream a failure shows


def tail(output: str | bytes | None) -> str:
    """The last ``TAIL`` characters of a stream a child wrote (bytes where it timed out)."""
    if isinstance(output, bytes):
        output = output.decode(errors="replace")
    return (output or "")[-TAIL:]


def _said(what: str, stdout: str | bytes | None, stderr: str | bytes | None) -> str:
    return f"{what}\n--- its stdout, the end ---\n{tail(stdout)}\n--- its stderr, the end ---\n{tail(stderr)}"


class PastTheLimit(BaseException):
    """Raised in the main thread when a test's wall-clock limit is reached: a BaseException, as
    KeyboardInterrupt is, so that no ``except Exception`` that keeps a benchmark alive takes it."""


def run_child(
    args: Sequence[str], env: Mapping[str, str], timeout: float, cwd: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``args`` run to its end within ``timeout`` seconds, with exit code 0; otherwise the test
    fails with what the child wrote.  The child leads a process group of its own, so the
    workers it started (Inductor's compile pool) go with it."""
    name = " ".join(str(a) for a in args)[:200]
    with subprocess.Popen(
        list(args), env=dict(env), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    ) as child:
        try:
            stdout, stderr = child.communicate(timeout=timeout)
        except (subprocess.TimeoutExpired, PastTheLimit, KeyboardInterrupt) as stop:  # nothing of it runs on
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            try:
                stdout, stderr = child.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # a worker of its own session holds the pipes
                stdout, stderr = b"", b""
            if isinstance(stop, subprocess.TimeoutExpired):
                pytest.fail(_said(f"{name}: ran past {timeout:g} s and was killed", stdout, stderr), pytrace=False)
            if isinstance(stop, PastTheLimit):
                raise PastTheLimit(_said(f"{stop}, in {name} (killed)", stdout, stderr)) from None
            raise
    out, err = stdout.decode(errors="replace"), stderr.decode(errors="replace")
    if child.returncode != 0:
        pytest.fail(_said(f"{name}: exited {child.returncode}", out, err), pytrace=False)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


@contextlib.contextmanager
def bounded(limit_s: float, what: str) -> Iterator[None]:
    """Run the block within ``limit_s`` seconds of wall time (main thread only, POSIX)."""

    def stop(signum: int, frame: object) -> None:
        raise PastTheLimit(f"{what} ran past its limit of {limit_s:g} s")

    before = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    faulthandler.dump_traceback_later(limit_s + GRACE_S, exit=True, file=sys.__stderr__)
    try:
        yield
    except PastTheLimit as exc:
        pytest.fail(str(exc), pytrace=True)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
        faulthandler.cancel_dump_traceback_later()
