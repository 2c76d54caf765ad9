"""The explicit pytest entry: -p cleanflush.pytest_plugin, in a separate pytest run."""

import json

import pytest

import cleanflush
from cleanflush import pytest_plugin

from .triton_layout import needs_driver_clear_cache

pytest.importorskip("triton")

BODY = """
import pytest, torch, triton, cleanflush

def flush_ran():
    before = cleanflush.flush_counts()
    d = object.__new__(triton.backends.backends["nvidia"].driver)
    d.clear_cache(torch.zeros(16, dtype=torch.int32))
    after = cleanflush.flush_counts()
    return [p for (t, p), n in after.items() if n != before.get((t, p), 0)]

def test_default():
    assert flush_ran() == [DEFAULT]

@pytest.mark.cleanflush("write")
def test_marked():
    assert flush_ran() == ["write"]

@pytest.mark.parametrize("cleanflush_policy", ["write", "read"], indirect=True)
def test_ab(cleanflush_policy, request):
    assert cleanflush_policy == request.node.callspec.params["cleanflush_policy"]
    assert flush_ran() == [cleanflush_policy]

@pytest.mark.cleanflush("read")
def test_fixture_follows_the_marker(cleanflush_policy):
    assert cleanflush_policy == "read" and flush_ran() == ["read"]

def test_after_blocks_the_default_is_back():
    assert cleanflush.current_policy() == DEFAULT
"""


def run(pytester, default, *args):
    pytester.makepyfile(test_bench=BODY.replace("DEFAULT", repr(default)))
    return pytester.runpytest_subprocess("-p", "cleanflush.pytest_plugin", "-p", "no:cacheprovider", *args)


@needs_driver_clear_cache
def test_marker_fixture_and_default(pytester):
    result = run(pytester, "write-read")
    result.assert_outcomes(passed=6)


@needs_driver_clear_cache
def test_option_sets_the_run_default(pytester):
    result = run(pytester, "read", "--cleanflush", "READ")
    result.assert_outcomes(passed=6)


def test_bad_option_is_a_usage_error_naming_the_policies(pytester):
    result = run(pytester, "read", "--cleanflush", "fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'fast'*write-read, read, write*"])


def test_not_loaded_without_being_asked(pytester):
    pytester.makepyfile(test_plain="import sys\ndef test_x():\n    assert 'cleanflush' not in sys.modules\n")
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_cleanflush_0_keeps_the_plugin_off(pytester, monkeypatch):
    monkeypatch.setenv("CLEANFLUSH", "0")
    pytester.makepyfile(
        test_off="""
        import cleanflush
        def test_off():
            assert not cleanflush.is_installed() and cleanflush.current_policy() == "write"
        """
    )
    result = pytester.runpytest_subprocess("-p", "cleanflush.pytest_plugin", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "marker",
    ['cleanflush("fast")', "cleanflush()", 'cleanflush("read", "write")', "cleanflush(3)", 'cleanflush(policy="read")'],
)
def test_a_misused_marker_is_a_usage_error_before_any_test(pytester, marker):
    pytester.makepyfile(
        test_marked=f"""
        import pytest
        def test_first():
            pass
        @pytest.mark.{marker}
        def test_marked():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "cleanflush.pytest_plugin", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.assert_outcomes()  # nothing ran, not even the test before it
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1 and "test_marked" in errors[0] and "write-read, read, write" in errors[0]
    if marker != 'cleanflush("fast")':  # a marker of the wrong shape is shown the forms it takes
        assert f"use {pytest_plugin.FORMS}" in errors[0]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_an_indirect_parameter_that_is_no_policy_is_a_usage_error(pytester):
    pytester.makepyfile(
        test_param="""
        import pytest
        @pytest.mark.parametrize("cleanflush_policy", ["read", ""], indirect=True)
        def test_ab(cleanflush_policy):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "cleanflush.pytest_plugin", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cleanflush_policy parameter '' is not a policy; valid: write-read, read, write*"])


@needs_driver_clear_cache
def test_the_innermost_choice_wins(pytester):
    pytester.makepyfile(
        test_precedence=BODY.split("def test_default")[0]
        + """
pytestmark = pytest.mark.cleanflush("read")

@pytest.mark.parametrize("cleanflush_policy", ["write", "write-read"], indirect=True)
def test_the_parameter_over_the_module_marker(cleanflush_policy):
    assert cleanflush_policy != "read" and flush_ran() == [cleanflush_policy]

def test_the_module_marker_over_the_option():
    assert flush_ran() == ["read"]

@pytest.mark.cleanflush("write")
def test_the_test_marker_over_the_module_marker(cleanflush_policy):
    assert cleanflush_policy == "write" and flush_ran() == ["write"]
"""
    )
    result = pytester.runpytest_subprocess(
        "-p", "cleanflush.pytest_plugin", "-p", "no:cacheprovider", "--cleanflush", "write"
    )
    result.assert_outcomes(passed=4)


def test_the_option_and_the_marker_are_in_pytests_help(pytester):
    found = pytester.runpytest_subprocess("-p", "cleanflush.pytest_plugin", "--help")
    shown = " ".join(found.stdout.str().split())  # pytest wraps the help at the terminal's width
    policies, rules = ", ".join(cleanflush.POLICIES), ", ".join(cleanflush.PICKS)
    assert f"--cleanflush=POLICY default cleanflush policy for this run: {policies}" in shown
    assert f"--cleanflush-pick=RULE how autotuners pick among near-ties in this run: {rules}" in shown
    found = pytester.runpytest_subprocess("-p", "cleanflush.pytest_plugin", "--markers")
    found.stdout.fnmatch_lines(["@pytest.mark.cleanflush(policy): run this test under that cleanflush flush policy"])


def test_a_run_with_a_policy_leaves_no_trace_for_the_next_run_in_the_process(tmp_path):
    # pytest.main twice in one process: the second run has the default policy, and after each
    # run os.environ is as it was
    (tmp_path / "test_policy_seen.py").write_text(
        "import cleanflush\n\ndef test_policy():\n    print('POLICY', cleanflush.current_policy())\n"
    )
    script = f"""
import json, os, sys, pytest, cleanflush
def environ():  # the outer run's PYTEST_CURRENT_TEST is the inner run's to set and clear
    return {{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}}
before = environ()
args = ["-q", "-s", "-p", "no:cacheprovider", "-p", "cleanflush.pytest_plugin",
        {str(tmp_path / "test_policy_seen.py")!r}]
first = pytest.main(["--cleanflush=read", *args])
after_first = environ()
second = pytest.main(args)
after_second = environ()
print("RESULT", json.dumps([first, second, after_first == before, after_second == before, cleanflush.current_policy()]))
"""
    from .conftest import run_python

    out = run_python(script, {"CLEANFLUSH": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    seen = [line.split()[-1] for line in out.stdout.splitlines() if "POLICY" in line and "print" not in line]
    [result] = [line for line in out.stdout.splitlines() if line.startswith("RESULT")]
    assert json.loads(result[len("RESULT ") :]) == [0, 0, True, True, "write-read"]
    assert seen == ["read", "write-read"]


@pytest.mark.parametrize(
    ("start", "before_pytest"),
    [
        ({}, ""),  # pytest.main in a process that never imported cleanflush: the plugin's load imports it
        ({}, "import torch"),  # torch first, cleanflush still only the plugin's
        ({"CLEANFLUSH": "1"}, ""),  # asked for at start-up: the plugin's load is its autoload
        ({"CLEANFLUSH_PICK": "stable"}, ""),
        ({}, "import cleanflush"),  # the process's own import: installed before the run
        ({"CLEANFLUSH": "0"}, ""),
    ],
)
def test_the_environment_after_a_run_is_as_before_it(tmp_path, start, before_pytest):
    """A run puts back every variable it found.  A run whose loading imported cleanflush
    uninstalls it at its end, unless the process asked for it at start-up (CLEANFLUSH or
    CLEANFLUSH_PICK set: it would be installed at the first import of torch, and the start-up
    hook has woken already); one that found cleanflush installed leaves it installed."""
    (tmp_path / "test_seen.py").write_text(
        "import cleanflush\n\ndef test_seen():\n"
        "    print('SEEN', cleanflush.current_policy(), cleanflush.current_pick())\n"
    )
    script = f"""
import json, os, sys, pytest
{before_pytest}
def state():
    installed = "cleanflush" in sys.modules and sys.modules["cleanflush"].is_installed()
    # the outer run's PYTEST_CURRENT_TEST is the inner run's to set and clear
    return [{{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}}, installed]
args = ["-q", "-s", "-p", "no:cacheprovider", "-p", "cleanflush.pytest_plugin", {str(tmp_path / "test_seen.py")!r}]
before = state()
first = pytest.main(["--cleanflush=read", "--cleanflush-pick=stable", *args])
after_first = state()
second = pytest.main(args)
after_second = state()
print("RESULT", json.dumps([first, second, after_first[0] == before[0], after_second[0] == before[0],
                           before[1], after_first[1], after_second[1]]))
"""
    from .conftest import run_python

    out = run_python(script, start)
    assert out.returncode == 0, out.stderr[-2000:]
    [result] = [line for line in out.stdout.splitlines() if line.startswith("RESULT")]
    found = json.loads(result[len("RESULT ") :])
    first, second, *as_before, installed_before, installed_after, installed_at_end = found
    assert (first, second) == (0, 0)
    assert as_before == [True, True], out.stdout
    assert installed_before == (before_pytest == "import cleanflush")
    asked_at_start = start.get("CLEANFLUSH", "1") != "0" and bool(start)
    assert installed_after == installed_at_end == (installed_before or asked_at_start)
    seen = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("SEEN")]
    off = start.get("CLEANFLUSH") == "0"
    rule = start.get("CLEANFLUSH_PICK", "fastest")  # the second run's, from the environment
    assert seen == ([["write", "fastest"]] * 2 if off else [["read", "stable"], ["write-read", rule]])


def test_the_help_survives_any_name(pytester, monkeypatch):
    """pytest %-formats option help as argparse does: a name with % in it is escaped."""
    from cleanflush import _pick, _policy

    odd = "within-2%"
    monkeypatch.setattr(_policy, "POLICIES", (*_policy.POLICIES, odd))
    monkeypatch.setattr(_pick, "PICKS", (*_pick.PICKS, odd))
    found = pytester.runpytest_inprocess("-p", "cleanflush.pytest_plugin", "--help")
    assert found.ret == 0, found.stderr.str()
    assert " ".join(found.stdout.str().split()).count(odd) == 2
