from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import cleanflush
from cleanflush import _policy, _state

pytest_plugins = ["pytester"]
if "mutmut" in sys.modules:  # a mutation run: let the children see the mutants (docs/development.md)
    pytest_plugins.append("tests.mutation.plugin")

# Tests that read the source text (layout rules): under mutmut that text holds every mutant.
reads_the_source = pytest.mark.skipif("mutmut" in sys.modules, reason="reads src/, which holds the mutants here")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fresh_install():
    """Every test starts as right after `import cleanflush`: installed, default policy,
    no counts, no warnings given yet, no status rows but install's, no read buffer; and
    leaves no policy block open behind it."""
    cleanflush.uninstall()
    # as if the process had started without the variable: a test that set it (to "0", say)
    # would otherwise become what the next install restores on uninstall
    os.environ.pop("CLEANFLUSH", None)
    _state.reset()
    cleanflush.install()
    if "mutmut" in sys.modules:
        from tests.mutation.plugin import forget_hits_so_far

        forget_hits_so_far()
    yield
    assert not _policy.open_blocks(), "the test left a cleanflush.policy block open"


# What a user sets; the mutation run's own CLEANFLUSH_MUTMUT_HITS must reach every child.
USER_VARIABLES = (
    "CLEANFLUSH",
    "CLEANFLUSH_DISABLE",
    "CLEANFLUSH_REPORT",
    "CLEANFLUSH_DECISIONS",
    "CLEANFLUSH_PICK",
    "CLEANFLUSH_PICK_FLOOR",
    "CLEANFLUSH_PICK_AGAIN_MS",
    "CLEANFLUSH_PICK_STORE",
    "CLEANFLUSH_PICK_FILE",
    "CLEANFLUSH_AUDIT",
)


def environ_without_cleanflush() -> dict[str, str]:
    """This process's environment less every variable a user sets for cleanflush."""
    return {k: v for k, v in os.environ.items() if k not in USER_VARIABLES}


def run_python(
    code: str, env: dict[str, str | None] | None = None, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter; ``env`` entries set to None are removed."""
    child_env = environ_without_cleanflush()
    for key, value in (env or {}).items():
        if value is None:
            child_env.pop(key, None)
        else:
            child_env[key] = value
    return subprocess.run(
        [sys.executable, *args, "-c", textwrap.dedent(code)],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def write_stand_ins(root, files: dict[str, str]) -> None:
    """Write each harness stand-in file (path -> source) under ``root``, with an
    ``__init__.py`` in every package folder on its way that has none yet."""
    for path, body in files.items():
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        for parent in file.relative_to(root).parents:
            if str(parent) != ".":
                (root / parent / "__init__.py").touch()  # touch keeps a file's text
        file.write_text(textwrap.dedent(body))
