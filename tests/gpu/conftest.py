import os

import pytest

import cleanflush
from cleanflush import _state

from .bounds import DEFAULT_LIMIT_S, bounded

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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "limit_s(seconds): a GPU test's wall-clock limit (tests/gpu/bounds.py)")


@pytest.fixture(autouse=True)
def within_its_limit(request):
    """Every GPU test ends within its limit: ``@pytest.mark.limit_s(N)``, else DEFAULT_LIMIT_S."""
    marker = request.node.get_closest_marker("limit_s")
    with bounded(marker.args[0] if marker else DEFAULT_LIMIT_S, request.node.nodeid):
        yield
