import pytest

from cleanflush import _state


@pytest.fixture(autouse=True)
def no_fallback():
    """A GPU test fails when cleanflush fell back anywhere in it: a read that failed (under
    capture, say) runs the stock write, which still times and counts like a flush."""
    yield
    assert not _state.STATE.warned, f"cleanflush warned: {sorted(_state.STATE.warned)}"
    assert not _state.STATE.read_unavailable, _state.STATE.read_unavailable
