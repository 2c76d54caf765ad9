import os

import pytest

import cleanflush
from cleanflush import _state

# Some GPU tests trace kernels with torch's profiler.  Kineto leaves CUPTI attached after a
# profiler session unless TEARDOWN_CUPTI=1 (pytorch/pytorch#144455), which slows every later
# launch: timing tests that ran after a profiling test read do_bench at +62% under both
# flushes.  Read by Kineto when a profiling session ends.
os.environ.setdefault("TEARDOWN_CUPTI", "1")


@pytest.fixture(autouse=True)
def no_fallback():
    """A GPU test fails when cleanflush fell back anywhere in it: a read that failed (under
    capture, say) runs the stock write, which still times and counts like a flush."""
    yield
    assert not _state.STATE.warned, f"cleanflush warned: {sorted(_state.STATE.warned)}"
    fell_back = [row for row in cleanflush.status() if row.name == "cleanflush"]  # the flush's own rows
    assert not fell_back, fell_back
