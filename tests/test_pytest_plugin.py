"""The explicit pytest entry: -p cleanflush.pytest_plugin, in a separate pytest run."""

import pytest

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
def test_ab(cleanflush_policy):
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


def test_marker_fixture_and_default(pytester):
    result = run(pytester, "write-read")
    result.assert_outcomes(passed=6)


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
