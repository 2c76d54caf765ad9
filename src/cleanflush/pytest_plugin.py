"""pytest entry for cleanflush, enabled explicitly (never auto-loaded)::

    pytest -p cleanflush.pytest_plugin                 # or, in a conftest.py:
    pytest_plugins = ["cleanflush.pytest_plugin"]

Enabling it installs cleanflush in the test process (its children follow through
``CLEANFLUSH``). Then:

* ``--cleanflush=POLICY``: the default policy for the whole run.
* ``@pytest.mark.cleanflush("read")``: one test runs under that policy.
* the ``cleanflush_policy`` fixture: the test body runs inside ``cleanflush.policy(...)``
  and gets its name; parametrize it for an A/B run of the same benchmark::

      @pytest.mark.parametrize("cleanflush_policy", ["write", "write-read"], indirect=True)
      def test_gemm(cleanflush_policy, benchmark): ...
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

import cleanflush

from . import _policy


def _policy_option(text: str) -> str:
    try:
        return _policy.check(text)
    except ValueError as exc:  # pytest turns this into a one-line usage error
        raise pytest.UsageError(str(exc)) from None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cleanflush", metavar="POLICY", type=_policy_option, default=None,
                     help=f"default cleanflush policy for this run: {', '.join(_policy.POLICIES)}")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cleanflush(policy): run this test under that cleanflush flush policy")
    cleanflush.install(policy=config.getoption("cleanflush"))


def _marked(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("cleanflush")
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.kwargs:
        raise pytest.UsageError(f"{item.nodeid}: use @pytest.mark.cleanflush(POLICY) with one of "
                                f"{', '.join(_policy.POLICIES)}")
    return _policy.check(marker.args[0])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[Any]:
    name = _marked(item)
    if name is None:
        yield
        return
    with cleanflush.policy(name):
        yield


@pytest.fixture
def cleanflush_policy(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test body runs under this policy: the indirect parameter, else the test's
    ``cleanflush`` marker, else the run's default."""
    name = getattr(request, "param", None) or _marked(request.node) or cleanflush.current_policy()
    with cleanflush.policy(name) as active:
        yield active
