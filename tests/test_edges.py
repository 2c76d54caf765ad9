"""The commands at their edges, as a new user or a hostile tester meets them: closed streams,
paths that only look writable, odd option values, decision lines no recorder writes, a
folder two runs share.  A clear error is one line on stderr, no traceback, exit code 2."""

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

from cleanflush import _ab
from cleanflush._ab import compare as _ab_compare
from cleanflush._ab import report as _ab_report

from .conftest import environ_without_cleanflush

pytest.importorskip("triton")


def cli(args, env=None, cwd=None, close_stdout=False, close_stderr=False):
    """``cleanflush ARGS``, its streams captured, or closed (``>&-``, ``2>&-``) as asked."""
    child_env = environ_without_cleanflush()
    child_env.update(env or {})
    closed = [fd for fd, close in ((1, close_stdout), (2, close_stderr)) if close]
    return subprocess.run(
        [sys.executable, "-m", "cleanflush", *args],
        env=child_env,
        cwd=cwd,
        stdout=None if close_stdout else subprocess.PIPE,
        stderr=None if close_stderr else subprocess.PIPE,
        text=True,
        timeout=300,
        preexec_fn=(lambda: [os.close(fd) for fd in closed]) if closed else None,
    )


def usage_error(out):
    lines = out.stderr.strip().splitlines()
    return out.returncode == 2 and "Traceback" not in out.stderr and lines


# Closed stdout (`>&-`): the normal exit code, and ab still runs its job


@pytest.mark.parametrize("args, code", [(["status"], 0), (["verify"], 3)])
def test_a_command_with_its_stdout_closed_ends_as_it_would_have(args, code):
    out = cli(args, close_stdout=True)
    assert out.returncode == code and "Traceback" not in out.stderr, out.stderr


def test_ab_with_its_stdout_closed_still_runs_the_job(tmp_path):
    job = f"open({str(tmp_path / 'ran')!r}, 'a').write('x')"
    out = cli(["ab", "--runs", "1", "--", sys.executable, "-c", job], close_stdout=True)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    assert (tmp_path / "ran").read_text() == "xx"  # stock and clean
    # the job's own output had nowhere to go: it does not turn up on stderr instead
    out = cli(["ab", "--runs", "1", "--", sys.executable, "-c", "print('the job says')"], close_stdout=True)
    assert out.returncode == 0 and "the job says" not in out.stderr, out.stderr


def test_ab_with_json_on_stdout_and_stderr_closed_keeps_stdout_the_record():
    job = [sys.executable, "-c", "print('the job says')"]
    out = cli(["ab", "--runs", "1", "--json", "--", *job], close_stderr=True)
    assert out.returncode == 0
    assert json.loads(out.stdout)["runs"] == 1  # the record alone: the job's output is not in it


# status --json: the record alone on stdout, whatever an import prints


def test_status_json_is_the_record_alone_though_an_import_prints(monkeypatch, capfd, tmp_path):
    from cleanflush import _registry
    from cleanflush.cli import main, status

    (tmp_path / "banner_module.py").write_text(
        "import os\nprint('banner of a harness')\nos.write(1, b'banner from C\\n')\n"  # Python's print, and below it
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    harness = _registry.Target(
        "banner", "banner", ("pytest",), ("banner_module",), "x:apply", "x:revert", probe=("banner_module",)
    )
    monkeypatch.setattr(status._registry, "TARGETS", (harness,))  # what status imports to probe
    try:
        assert main(["status", "--json"]) == 0
    finally:
        sys.modules.pop("banner_module", None)
    out, err = capfd.readouterr()
    assert json.loads(out)["schema"] == 2 and "banner of a harness" in err and "banner from C" in err


# Options that name nothing, or a path that only looks writable


@pytest.mark.parametrize(
    "args, says",
    [
        (["status", "--check", ""], "--check takes target names"),
        (["status", "--json", ""], "--json needs a path"),
        (["status", "--json", "/dev/full"], "not a regular file"),
        (["status", "--json", "/proc/cleanflush-status.json"], "cannot write --json"),
        (["verify", "--device", "¹"], "expected a device index"),
        (["ab", "--runs", "²", "--", "true"], "expected a positive integer"),
        (["run", "--report", "/proc/cleanflush-report.jsonl", "--", "true"], "cannot write --report"),
    ],
)
def test_an_option_that_names_nothing_usable_is_a_usage_error(args, says):
    out = cli(args)
    assert usage_error(out) and says in out.stderr, (out.returncode, out.stderr)


def test_a_command_error_shows_that_commands_usage():
    out = cli(["status", "--check", ""])
    assert out.stderr.startswith("usage: cleanflush status") and out.returncode == 2


@pytest.mark.parametrize("command", ["status", "run", "ab", "verify"])
def test_every_commands_help_lists_its_exit_codes(command):
    assert "exit codes:" in cli([command, "--help"]).stdout


def test_a_record_that_cannot_be_written_at_the_end_is_kept_and_said(tmp_path, monkeypatch, capsys):
    from cleanflush.cli import _output

    def full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_output, "write_whole", full)
    _output.emit({"a": float("inf"), "b": [1.0, float("nan")]}, "text", str(tmp_path / "r.json"), "cleanflush ab")
    err = capsys.readouterr().err
    assert "could not write --json" in err and "No space left on device" in err
    elsewhere = err.strip().rsplit("the record is in ", 1)[1]
    assert elsewhere.endswith(".json") and os.path.dirname(elsewhere) == tempfile.gettempdir()
    with open(elsewhere) as f:
        assert json.load(f) == {"a": None, "b": [1.0, None]}  # always JSON
    os.unlink(elsewhere)


# ab's --keep, --json and --figure, checked before the first run


def test_ab_refuses_a_keep_folder_with_a_file_where_a_run_goes(tmp_path):
    (tmp_path / "run1-write").write_text("mine")
    out = cli(["ab", "--keep", str(tmp_path), "--", sys.executable, "-c", "pass"])
    assert usage_error(out) and "holds a file where run 1's folder goes" in out.stderr
    assert (tmp_path / "run1-write").read_text() == "mine"


def test_ab_refuses_a_file_where_its_last_run_goes(tmp_path):
    (tmp_path / "run2-write-read").write_text("mine")
    out = cli(["ab", "--runs", "1", "--keep", str(tmp_path), "--", sys.executable, "-c", "pass"])
    assert usage_error(out) and "holds a file where run 2's folder goes" in out.stderr


def test_a_second_ab_on_the_same_keep_folder_refuses(tmp_path):
    fd = os.open(tmp_path / ".cleanflush-ab.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a first ab, running
    try:
        out = cli(["ab", "--keep", str(tmp_path), "--", sys.executable, "-c", "pass"])
    finally:
        os.close(fd)
    assert usage_error(out) and "another cleanflush ab is using --keep" in out.stderr


def test_a_relative_keep_records_a_job_that_changes_directory(tmp_path):
    job = textwrap.dedent(
        """
        import os
        os.chdir("/")
        from cleanflush import _decisions
        _decisions.write({"kind": "triton", "op": "k", "key": "(1,)", "timings_ms": {"a": 1.0}, "winner": "a"})
        """
    )
    out = cli(["ab", "--runs", "1", "--keep", "kept", "--json", "-", "--", sys.executable, "-c", job], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["comparison"]["decisions"]) == 1


def test_ab_json_and_figure_cannot_be_one_file(tmp_path):
    pytest.importorskip("matplotlib")
    same = str(tmp_path / "out.png")
    out = cli(["ab", "--json", same, "--figure", same, "--", "true"])
    assert usage_error(out) and "name the same file" in out.stderr


def test_ab_refuses_a_figure_matplotlib_cannot_write_before_any_run(tmp_path):
    pytest.importorskip("matplotlib")
    job = f"open({str(tmp_path / 'ran')!r}, 'a').write('x')"
    out = cli(["ab", "--figure", str(tmp_path / "f.xyz"), "--", sys.executable, "-c", job])
    assert usage_error(out) and "not xyz" in out.stderr
    from matplotlib.figure import Figure

    kinds = ", ".join(sorted(Figure().canvas.get_supported_filetypes()))  # matplotlib's own list
    assert f"matplotlib writes {kinds}, not xyz" in out.stderr
    assert not (tmp_path / "ran").exists()


# Decision lines no recorder writes; a job's odd arguments and its end


@pytest.mark.parametrize(
    "timing",
    ["1" + "0" * 400, "1e300", "1e-300", "-2.0", "true"],
    ids=["400 digits", "1e300", "1e-300", "negative", "a bool"],
)
def test_a_decision_line_with_a_timing_out_of_range_is_named_and_skipped(tmp_path, timing):
    path = tmp_path / "decisions.jsonl"
    good = '{"kind": "triton", "op": "k", "key": "(1,)", "timings_ms": {"a": 1.0, "b": 2.0}, "winner": "a"}\n'
    path.write_text(good + good.replace('"b": 2.0', f'"b": {timing}'))
    found, bad = _ab.read_decisions(str(path))
    assert len(found) == 1 and len(bad) == 1 and bad[0].startswith(f"{path}:2: skipped, ")


def test_a_directory_where_the_decisions_file_goes_is_named(tmp_path):
    (tmp_path / "decisions.jsonl").mkdir()
    assert _ab.read_decisions(str(tmp_path / "decisions.jsonl")) == (
        [],
        [f"{tmp_path / 'decisions.jsonl'}: skipped, a directory where the decisions file should be"],
    )


def test_a_skipped_line_keeps_its_number_and_reason_whatever_the_path():
    long = "/tmp/" + "x" * 500 + "/decisions.jsonl"
    said = _ab.skipped(long, 12, "Expecting value: line 1 column 1 (char 0)")
    assert len(said) <= 300 and ":12: skipped, Expecting value: line 1 column 1 (char 0)" in said


def test_the_report_quotes_the_command_and_says_which_signal_killed_a_run():
    result = {
        "command": ["python", "tune.py", "--name", "a b", "\udcff"],
        "policy": "write-read",
        "runs": 1,
        "runs_compared": 1,
        "interrupted": False,
        "run_codes": [{"index": 1, "policy": "write", "code": -9}],
        "skipped_lines": [],
        "not_patched": [],
        "comparison": _ab_compare.compare([[]], [[]]),
    }
    text = _ab_report.format_report(result)
    assert text.splitlines()[0] == "cleanflush ab: python tune.py --name 'a b' '\\xff'"
    assert "run 1 (write) killed by SIGKILL" in text
    text.encode("utf-8")  # prints on any UTF-8 terminal


def test_ab_says_its_clean_side_is_not_patched_where_the_disable_variable_names_it(tmp_path):
    out = cli(["ab", "--runs", "1", "--", sys.executable, "-c", "pass"], {"CLEANFLUSH_DISABLE": "triton,inductor"})
    assert "the clean side is not patched: stock against stock" in out.stdout, out.stderr


# run: CLEANFLUSH as the shell has it


def test_run_keeps_off_what_the_shell_switched_off():
    out = cli(["run", "--", sys.executable, "-c", "import os; print(os.environ['CLEANFLUSH'])"], {"CLEANFLUSH": "0"})
    assert out.stdout.strip() == "0"
    program = sys.executable
    assert out.stderr.splitlines() == [
        f"cleanflush run: CLEANFLUSH=0 is off for {program} and its children too (unset it to run with a policy)"
    ]


@pytest.mark.parametrize("form", ["python -m cleanflush", "the cleanflush script"])
def test_run_says_the_policy_the_child_gets_where_the_shells_value_is_not_one_in_one_line(form):
    program = [sys.executable, "-c", "import os; print(os.environ['CLEANFLUSH'])"]
    if form == "python -m cleanflush":
        out = cli(["run", "--", *program], {"CLEANFLUSH": "wirte-read"})
    else:
        script = shutil.which("cleanflush", path=os.path.dirname(sys.executable))
        if script is None:
            pytest.skip("no cleanflush script beside this python")
        env = {**environ_without_cleanflush(), "CLEANFLUSH": "wirte-read"}
        out = subprocess.run([script, "run", "--", *program], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "write-read"
    [line] = out.stderr.splitlines()  # not also "this process keeps its stock L2 flush", about the CLI itself
    assert line.startswith("cleanflush run: CLEANFLUSH='wirte-read' is not valid") and line.endswith(
        "runs with write-read (--policy)"
    )


def test_a_program_that_imports_cleanflush_still_says_an_invalid_value():
    out = subprocess.run(
        [sys.executable, "-c", "import cleanflush"],
        env={**environ_without_cleanflush(), "CLEANFLUSH": "wirte-read"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "this process keeps its stock L2 flush" in out.stderr


# A signal handler that opens a policy block while this thread is inside one

SIGNAL_IN_A_BLOCK = """
import signal, os, cleanflush
from cleanflush import _blocks

seen, fired = [], []
def handler(signum, frame):
    with cleanflush.policy("write"):
        seen.append(cleanflush.current_policy())

signal.signal(signal.SIGUSR1, handler)
export = _blocks._env.export
def export_then_signal(name, value):  # the signal lands while the block holds the lock
    export(name, value)
    if not fired:
        fired.append(True)
        os.kill(os.getpid(), signal.SIGUSR1)
_blocks._env.export = export_then_signal
with cleanflush.policy("read"):
    inside = cleanflush.current_policy()
print(seen, inside, cleanflush.current_policy())
"""


def test_a_signal_handler_opens_a_policy_block_inside_one_without_a_deadlock():
    from .conftest import run_python

    child = run_python(SIGNAL_IN_A_BLOCK)
    assert child.returncode == 0 and child.stdout.split() == ["['write']", "read", "write-read"], child.stderr
