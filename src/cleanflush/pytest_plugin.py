"""pytest entry for cleanflush, enabled explicitly (never auto-loaded)::

    pytest -p cleanflush.pytest_plugin                 # or, in a conftest.py:
    pytest_plugins = ["cleanflush.pytest_plugin"]

Enabling it installs cleanflush in the test process (its children follow through
``CLEANFLUSH``), unless ``CLEANFLUSH=0``: then nothing is patched and every test runs
stock.  Then, the innermost choice wins:

* ``--cleanflush=POLICY``: the default policy for the whole run; ``--cleanflush-pick=RULE``:
  the pick rule of every autotuner in the run (``fastest``, ``stable``), children included;
* ``@pytest.mark.cleanflush("read")`` (on a test, class or module): that policy;
* the ``cleanflush_policy`` fixture, parametrized indirectly: the test body runs inside
  ``cleanflush.policy(param)`` and gets its name; an A/B run of the same benchmark::

      @pytest.mark.parametrize("cleanflush_policy", ["write", "write-read"], indirect=True)
      def test_gemm(cleanflush_policy, benchmark): ...

A bad policy name or marker is a usage error naming the valid ones.  A run leaves the
process as it found it: the variables ``CLEANFLUSH`` and ``CLEANFLUSH_PICK``, the defaults,
and, where the run is what installed cleanflush, not installed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest

import cleanflush

from . import _env, _pick, _policy
from ._blocks import Choice
from ._state import STATE
from ._targets import INSTALL


def _imported_the_package() -> bool:
    """Whether importing this plugin is what imported cleanflush (``pytest.main`` in a process
    that had not): Python imports a package just before its submodule, so then every module
    between the two in ``sys.modules`` (which keeps insertion order) is cleanflush's own or
    the standard library's, which its import pulled in; any other means the process went on
    after importing cleanflush itself (pytest's own plugins load before ours)."""
    names = list(sys.modules)
    between = names[names.index("cleanflush") + 1 : names.index(__name__)]
    return all(n.startswith("cleanflush.") or n.partition(".")[0] in sys.stdlib_module_names for n in between)


# cleanflush installed itself as this plugin was imported: the first run in the process
# found it so, and ends as the process was before that import
_INSTALLED_BY_LOADING = STATE.installed and _imported_the_package()

FORMS = f"@pytest.mark.cleanflush(POLICY) with POLICY one of {', '.join(_policy.POLICIES)}"


def _checked(choice: Choice) -> Callable[[str], str]:
    """An option's type: the name ``choice`` stands for, else a one-line usage error naming the valid ones."""

    def check(text: str) -> str:
        try:
            return choice.check(text)
        except ValueError as exc:  # pytest turns this into a one-line usage error
            raise pytest.UsageError(str(exc)) from None

    return check


def _help_text(text: str) -> str:
    """``text`` as an option's help: pytest %-formats it as argparse does, so a ``%`` in a
    name built into it is doubled."""
    return text.replace("%", "%%")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--cleanflush",
        metavar="POLICY",
        type=_checked(_policy.POLICY),
        default=None,
        help=_help_text(f"default cleanflush policy for this run: {', '.join(_policy.POLICIES)}"),
    )
    parser.addoption(
        "--cleanflush-pick",
        metavar="RULE",
        type=_checked(_pick.PICK),
        default=None,
        help=_help_text(f"how autotuners pick among near-ties in this run: {', '.join(_pick.PICKS)}"),
    )


class _BeforeRun(NamedTuple):
    """What a run found, put back at its end: a second pytest.main in the process starts as
    the first did, and the process goes on as it was."""

    policy: str
    policy_environ: str | None
    rule: str
    rule_environ: str | None
    uninstall: bool  # the run installed cleanflush: its end uninstalls it


_BEFORE_RUN = pytest.StashKey[_BeforeRun]()


def _before_run() -> _BeforeRun:
    global _INSTALLED_BY_LOADING
    by_loading, _INSTALLED_BY_LOADING = _INSTALLED_BY_LOADING, False  # only the first run's
    if by_loading:  # as before the import: what the install found, and installed only if asked at start-up
        return _BeforeRun(
            _policy.default(), INSTALL.env_before, _pick.PICK.default, INSTALL.pick_before, STATE.source == "import"
        )
    return _BeforeRun(
        _policy.default(),
        _env.value(_env.POLICY_VAR),
        _pick.PICK.default,
        _env.value(_env.PICK_VAR),
        not STATE.installed,
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cleanflush(policy): run this test under that cleanflush flush policy")
    config.stash[_BEFORE_RUN] = _before_run()
    installed = cleanflush.install(policy=config.getoption("cleanflush"))
    rule = config.getoption("cleanflush_pick")
    if rule is not None and installed:  # the run's rule, for its children too
        _pick.PICK.set_default(rule)
        _pick.PICK.export(True, rule)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _BEFORE_RUN not in config.stash:
        return
    before = config.stash[_BEFORE_RUN]
    if before.uninstall:
        cleanflush.uninstall()
    _policy.set_default(before.policy)
    _policy.export(cleanflush.is_installed(), before.policy_environ)
    _pick.PICK.set_default(before.rule)
    _pick.PICK.export(cleanflush.is_installed(), before.rule_environ)


def _marked(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("cleanflush")
    if marker is None:
        return None
    if len(marker.args) != 1 or marker.kwargs or not isinstance(marker.args[0], str):
        raise pytest.UsageError(f"{item.nodeid}: use {FORMS}")
    try:
        return _policy.check(marker.args[0])
    except ValueError as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc}") from None


def _parameter(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    if callspec is None or "cleanflush_policy" not in callspec.params:
        return None
    value = callspec.params["cleanflush_policy"]
    try:
        return _policy.check(value)
    except ValueError:
        raise pytest.UsageError(
            f"{item.nodeid}: the cleanflush_policy parameter {value!r} is not a policy; "
            f"valid: {', '.join(_policy.POLICIES)}"
        ) from None


def chosen(item: pytest.Item) -> str | None:
    """The policy a test runs under: its parameter, else its marker (None: the run's default)."""
    return _parameter(item) or _marked(item)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:  # every misuse is a usage error before any test runs
        _marked(item)
        _parameter(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[Any]:
    name = chosen(item)
    if name is None:
        yield
        return
    with cleanflush.policy(name):
        yield


@pytest.fixture
def cleanflush_policy(request: pytest.FixtureRequest) -> str:
    """The policy the test body runs under: the indirect parameter, else the test's
    ``cleanflush`` marker, else the run's default."""
    return chosen(request.node) or cleanflush.current_policy()
