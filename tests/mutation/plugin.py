"""Lets mutmut see what the tests' child interpreters do (loaded by tests/conftest.py only
under mutmut; see docs/development.md, "Mutation testing").

A quarter of the suite starts fresh interpreters (autoload, CLI, import orders, reports).
Out of the box those children import the editable install in src/, not mutmut's mutated
copy, and mutmut credits a test only with the functions its own process reached.  So:

* every child gets ``PYTHONPATH=<this folder>:<mutants/src>``: the mutated copy comes
  before the editable install, and ``sitecustomize.py`` here is loaded in the child;
* mutmut's active mutant reaches the child through ``MUTANT_UNDER_TEST`` (mutmut writes it
  into ``os.environ``, and every child environment in the suite is a copy of it);
* in mutmut's "stats" pass, the child writes each function it reaches to a file in
  ``CLEANFLUSH_MUTMUT_HITS`` as it happens (an at-exit write would lose the functions that
  run at exit, such as the report writer), and this plugin credits them to the test that
  started the child before mutmut's own teardown hook reads its list;
* what the autouse fixture reaches while setting a test up (install, uninstall, resets) is
  not credited to the test: every test runs it, so crediting it would run the whole suite
  for each mutant of ``install()``.  Those mutants are judged by the tests that call them
  on purpose: in their body, in a child, or in a fixture of their own (an earlier version
  dropped every setup hit, and so never ran a harness patch's ``apply`` mutants against the
  tests whose fixture installs it).
"""

from __future__ import annotations

import os
import pathlib
import tempfile

import pytest

HERE = pathlib.Path(__file__).resolve().parent
HITS_VAR = "CLEANFLUSH_MUTMUT_HITS"


def pytest_configure(config: pytest.Config) -> None:
    import cleanflush

    # the folder this process's mutated copy came from: mutants/src under mutmut, which runs
    # pytest from inside mutants/, and wherever PYTHONPATH put it when the GPU-only mutants
    # run elsewhere (docs/development.md)
    mutated = pathlib.Path(cleanflush.__file__).resolve().parents[1]
    paths = [str(HERE), str(mutated), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    os.environ.setdefault(HITS_VAR, tempfile.mkdtemp(prefix="cleanflush-mutmut-"))


def forget_hits_so_far() -> None:
    """Called by the autouse fixture once it has set a test up: what it reached is not
    credited to the test.  A test's own fixtures, which run after it (a harness stand-in
    that installs cleanflush again), are credited: they are part of what the test checks."""
    from mutmut.state import state

    state()._stats.clear()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    from mutmut.state import state

    hits = pathlib.Path(os.environ[HITS_VAR])
    for path in hits.glob("*.txt"):
        state()._stats.update(line for line in path.read_text().splitlines() if line)
        path.unlink()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fastest tests first, by the durations of mutmut's stats pass: mutmut stops a mutant's
    run at its first failing test (``-x``), and a test that starts an interpreter takes
    seconds where most take milliseconds.  The order does not change what fails: the
    fixtures reset all state between tests (tests/conftest.py)."""
    stats = pathlib.Path("mutmut-stats.json")  # mutmut runs pytest from inside mutants/
    if not stats.exists():
        return  # the stats pass itself
    import json

    duration = json.loads(stats.read_text()).get("duration_by_test", {})
    items.sort(key=lambda item: duration.get(item.nodeid, 0.0))
