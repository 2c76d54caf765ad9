"""The command line in fresh processes: status, run, exit codes, --json, -OO."""

import argparse
import json
import os
import pathlib
import subprocess
import sys

import pytest

from cleanflush import _registry

from .conftest import environ_without_cleanflush, run_python
from .triton_layout import STATUS_ROW, needs_driver_clear_cache

pytest.importorskip("triton")


def triton_version():
    import importlib.metadata

    return importlib.metadata.version("triton")


def cli(args, env=None, extra=()):
    child_env = environ_without_cleanflush()
    child_env.update(env or {})
    return subprocess.run(
        [sys.executable, *extra, "-m", "cleanflush", *args], env=child_env, capture_output=True, text=True, timeout=300
    )


def test_status_says_what_a_program_started_here_gets():
    out = cli(["status"])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    env_line = next(line for line in lines if line.startswith("environment"))
    assert "CLEANFLUSH is unset" in env_line and "stock flush unless they import cleanflush" in env_line
    assert any(line.startswith("autoload") and "cleanflush.pth" in line for line in lines)
    row = next(line for line in lines if line.startswith(STATUS_ROW))
    assert row.split()[1:3] == [triton_version(), "patched"]


@pytest.mark.parametrize(
    "value, says",
    [
        ("1", "flushes with write-read"),
        ("read", "flushes with read"),
        ("0", "off, even for programs that import cleanflush"),
    ],
)
def test_status_reads_the_shell_variable_not_its_own_import(value, says):
    out = cli(["status", "--json"], {"CLEANFLUSH": value})
    data = json.loads(out.stdout)
    assert data["schema"] == 2
    assert data["environment"]["CLEANFLUSH"] == value  # not what the CLI's import wrote
    assert says in data["programs_get"]
    row = {t["target"]: t for t in data["targets"]}[STATUS_ROW]
    if value == "0":  # off for every program started here; what would be patched stays in the detail
        assert (row["state"], row["patched"]) == ("off", False)
        assert row["detail"].startswith("CLEANFLUSH=0 keeps it stock (with cleanflush on: patched, ")
    else:
        assert row["state"] == "patched"


def test_status_check_exit_codes(tmp_path):
    assert cli(["status", "--check"]).returncode == 0
    bad = cli(["status", "--check"], {"CLEANFLUSH": "fast"})
    assert bad.returncode == 1 and "check: FAIL" in bad.stdout and "'fast'" in bad.stdout
    disabled = cli(["status", "--check"], {"CLEANFLUSH_DISABLE": "tritn"})
    assert disabled.returncode == 1 and "unknown targets tritn" in disabled.stdout
    # limited to named targets: a harness installed and patched when imported passes; one that
    # is not installed, or disabled, fails; a name that is no target is a usage error
    assert cli(["status", "--check", "triton,inductor"]).returncode == 0
    absent = cli(["status", "--check", "triton,kernelbench"])
    assert absent.returncode == 1 and "kernelbench: absent: kernelbench is not installed" in absent.stdout
    off = cli(["status", "--check", "triton"], {"CLEANFLUSH_DISABLE": "triton"})
    assert off.returncode == 1 and "triton: disabled" in off.stdout
    typo = cli(["status", "--check", "tritn,inductr"])
    assert typo.returncode == 2 and "unknown targets tritn, inductr; valid: triton, inductor" in typo.stderr
    # nothing to patch at all: a CI gate must see it
    broken = run_python(
        "import sys; sys.modules['torch'] = None; sys.modules['triton'] = None\n"
        "from cleanflush.__main__ import main; sys.exit(main(['status', '--check']))"
    )
    assert broken.returncode == 1 and "triton.testing: failed: installed, but the import failed" in broken.stdout


def test_status_check_fails_where_nothing_can_be_patched():
    from cleanflush.cli import status

    row = {"name": "triton", "target": "triton", "state": "absent", "detail": "triton is not installed"}
    data = {"setting_problems": [], "targets": [row]}
    assert status.problems(data) == ["no benchmarker here can be patched (is torch or triton installed?)"]
    assert status.problems({**data, "targets": [{**row, "state": "pending"}]}) == []
    assert status.problems(data, ["triton"]) == ["triton: absent: triton is not installed"]
    unknown = "CLEANFLUSH_DISABLE names unknown targets x (ignored); valid targets: " + ", ".join(_registry.NAMES)
    assert status.setting_problems({"CLEANFLUSH_DISABLE": "x"}) == [unknown]
    patched = {**data, "setting_problems": [unknown], "targets": [{**row, "state": "patched"}]}
    assert status.problems(patched) == [unknown]  # in its own words


def test_json_means_the_same_in_every_command(tmp_path):
    to_stdout = cli(["status", "--json"])
    assert json.loads(to_stdout.stdout)["cleanflush"]
    assert to_stdout.stderr == ""  # the record says all the table does: it is not repeated on stderr
    checked = cli(["status", "--json", "--check"], {"CLEANFLUSH_PICK_FLOOR": "half"})
    assert checked.returncode == 1 and json.loads(checked.stdout)["problems"]
    assert checked.stderr.startswith("check: FAIL\n  - CLEANFLUSH_PICK_FLOOR='half'")  # the check's verdict alone
    assert checked.stderr.count("\n") == 2
    path = tmp_path / "status.json"
    to_file = cli(["status", "--json", str(path)])
    assert "environment" in to_file.stdout and json.loads(path.read_text())["schema"] == 2
    for bad in (tmp_path / "no" / "such.json", tmp_path):  # checked before any work: usage error
        refused = cli(["status", "--json", str(bad)])
        assert refused.returncode == 2 and refused.stdout == "" and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith(f"cleanflush status: cannot write --json {str(bad)!r}: ")


def test_run_validates_the_policy_before_starting():
    out = cli(["run", "--policy", "fast", "--", sys.executable, "-c", "print('started')"])
    assert out.returncode == 2 and "started" not in out.stdout
    assert "write-read, read, write" in out.stderr


@needs_driver_clear_cache
def test_run_starts_the_command_patched_with_the_policy(tmp_path):
    report = tmp_path / "r.jsonl"
    code = (
        "import os, torch, triton, cleanflush\n"
        "d = object.__new__(triton.backends.backends['nvidia'].driver)\n"
        "d.clear_cache(torch.zeros(16, dtype=torch.int32))\n"
        "print(os.environ['CLEANFLUSH'], cleanflush.current_policy()); raise SystemExit(7)"
    )
    out = cli(["run", "--policy", "Read", "--report", str(report), "--", sys.executable, "-c", code])
    assert out.returncode == 7, out.stderr  # the command's own exit code
    assert out.stdout.split() == ["read", "read"]
    assert json.loads(report.read_text())["flushes"] == {"triton | read": 1}


def test_run_without_a_command_or_with_a_missing_one():
    assert cli(["run"]).returncode == 2
    missing = cli(["run", "--", "no-such-command-here"])
    assert missing.returncode == 127 and missing.stderr.count("\n") == 1


def test_run_disable_reaches_the_child():
    code = "import os; print(os.environ['CLEANFLUSH_DISABLE'])"
    out = cli(["run", "--disable", "inductor", "--", sys.executable, "-c", code])
    assert out.stdout.strip() == "inductor"
    assert cli(["run", "--disable", "bogus", "--", sys.executable, "-c", "pass"]).returncode == 2


def test_run_keeps_the_environment_and_says_each_refusal_in_one_line(tmp_path):
    code = "import os; print(os.environ['KEPT'], os.environ['CLEANFLUSH_DISABLE'])"
    out = cli(["run", "--disable", "triton,inductor", "--", sys.executable, "-c", code], env={"KEPT": "yes"})
    assert out.stdout.split() == ["yes", "inductor,triton"], out.stderr
    bogus = cli(["run", "--disable", "bogus,inductor", "--", sys.executable, "-c", "pass"])
    assert bogus.returncode == 2
    assert bogus.stderr.splitlines()[-1] == (
        "cleanflush run: error: argument --disable: unknown targets bogus; valid targets: " + ", ".join(_registry.NAMES)
    )
    folder = cli(["run", "--report", str(tmp_path), "--", sys.executable, "-c", "pass"])
    assert (folder.returncode, folder.stdout) == (2, "")
    assert folder.stderr == f"cleanflush run: cannot write --report {str(tmp_path)!r}: it is a directory\n"
    missing = cli(["run", "--", "no-such-command-here"])
    assert missing.stderr == "cleanflush run: cannot start 'no-such-command-here': No such file or directory\n"
    not_executable = tmp_path / "script"
    not_executable.write_text("echo started\n")
    denied = cli(["run", "--", str(not_executable)])
    assert denied.returncode == 126 and "started" not in denied.stdout
    assert denied.stderr == f"cleanflush run: cannot start {str(not_executable)!r}: Permission denied\n"


def test_unknown_command_is_a_usage_error():
    out = cli(["frobnicate"])
    assert out.returncode == 2 and "invalid choice" in out.stderr


def test_help_says_what_each_option_takes():
    verify = " ".join(cli(["verify", "--help"]).stdout.split())  # argparse wraps to the terminal
    assert "weight shape N,K (or NxK) of F.linear(x[1,K], W[N,K])" in verify
    assert "llama-3.1-8b: 4096x4096 6144x4096" in verify  # the preset's shapes, one space apart
    for command in ("status", "verify", "ab"):
        assert "the full record as JSON: alone, on stdout" in " ".join(cli([command, "--help"]).stdout.split())
    top = " ".join(cli(["--help"]).stdout.split())
    assert "ab run a command with the stock flush and with a clean one; show which autotuning" in top
    assert "verify time a one-row GEMM stock vs patched on this GPU and say whether the patch took effect" in top
    assert "run run a command with cleanflush on, in it and every Python child" in top
    status = cli(["status", "--help"]).stdout
    assert "[--check [TARGETS]]" in status
    status = " ".join(status.split())
    assert "[--check [TARGETS]] What a Python program started from this shell would get: the policy" in status
    assert "--check [TARGETS] exit 1 when the settings are invalid or a target cannot be patched; TARGETS (" in status
    assert "--keep DIR keep each run's decisions" in " ".join(cli(["ab", "--help"]).stdout.split())
    run = " ".join(cli(["run", "--help"]).stdout.split())
    assert "comma-separated targets to keep stock: triton, inductor, tritonbench," in run
    assert "--rounds ROUNDS interleaved rounds (default 5)" in verify
    assert (
        "--controls also time deliberately broken flushes, which must be judged FAIL, next to write-read and "
        "read, which must PASS: shows that the verdict means something here"
    ) in verify
    assert "CUDA device index, indices like 0,2, or all: one row per device, one after another (default 0)" in verify
    assert "--disable TARGETS comma-separated targets to keep stock" in run
    assert run.startswith(
        "usage: cleanflush run [--policy P] [--pick RULE] [--report FILE] [--disable TARGETS] -- COMMAND"
    )
    ab = " ".join(cli(["ab", "--help"]).stdout.split())
    assert "--figure PNG draw the comparison (needs matplotlib) " in ab
    assert (
        "(RUNS times each, interleaved), each run with fresh private Triton and Inductor caches so that it "
        "really tunes; record every autotuning decision"
    ) in ab


def test_json_on_stdout_is_indented_for_people_too():
    out = cli(["status", "--json"]).stdout
    assert out.startswith('{\n  "') and json.loads(out)


def test_optimized_mode_and_version():
    out = cli(["--help"], extra=("-OO",))
    assert out.returncode == 0 and "cold and clean L2" in out.stdout
    assert cli(["-V"]).stdout.startswith("cleanflush ")


def test_version_long_form_and_no_command(capsys):
    from cleanflush.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0
    assert main([]) == 2  # no command: the help, which lists them, on stderr
    out, err = capsys.readouterr()
    assert out.startswith("cleanflush ") and err.startswith("usage: cleanflush") and "verify" in err


def test_ctrl_c_in_a_command_says_so_on_stderr(monkeypatch, capsys):
    from cleanflush import cli as cli_module

    def interrupted(args, parser):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module.COMMANDS["status"], "main", interrupted)
    assert cli_module.main(["status"]) == 130
    assert capsys.readouterr() == ("", "cleanflush status: interrupted\n")


def test_ab_without_a_command_is_a_usage_error(capsys):
    from cleanflush.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["ab"])
    assert stopped.value.code == 2 and "ab needs a command after --" in capsys.readouterr().err


def test_json_in_a_file_is_indented_too(tmp_path):
    from cleanflush.cli import _output

    path = tmp_path / "r.json"
    _output.emit({"a": [1]}, "", str(path))
    assert path.read_text() == '{\n  "a": [\n    1\n  ]\n}\n'  # a text file ends its last line


@needs_driver_clear_cache
def test_report_file_records_each_process_that_flushed(tmp_path):
    report = tmp_path / "report.jsonl"
    code = """
    import os, torch, triton
    driver = object.__new__(triton.backends.backends["nvidia"].driver)
    cache = torch.zeros(16, dtype=torch.int32)
    for _ in range(3):
        driver.clear_cache(cache)
    """
    pids = []
    for value in ("read", "0"):
        child = run_python(
            code + "print(os.getpid())",
            {"CLEANFLUSH": value, "CLEANFLUSH_REPORT": str(report), "CUDA_VISIBLE_DEVICES": "3"},
        )
        assert child.returncode == 0, child.stderr
        pids.append(int(child.stdout.split()[-1]))
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    assert len(lines) == 1  # the CLEANFLUSH=0 process patched nothing and wrote nothing
    line = lines[0]
    assert line["flushes"] == {"triton | read": 3}
    assert line["source"] == "autoload" and line["env_at_start"] == "read"
    assert (line["pid"], line["ppid"]) == (pids[0], os.getpid())
    assert line["argv"] == ["-c"] and line["cuda_visible_devices"] == "3"
    assert STATUS_ROW in line["patched"]
    assert line["patched"] == sorted(line["patched"])
    assert set(line) == {
        "pid",
        "ppid",
        "argv",
        "source",
        "env_at_start",
        "default_policy",
        "cuda_visible_devices",
        "flushes",
        "patched",
    }


@needs_driver_clear_cache
def test_an_unwritable_report_says_why_on_stderr(tmp_path):
    report = tmp_path / "no" / "such" / "dir.jsonl"
    code = """
    import torch, triton
    driver = object.__new__(triton.backends.backends["nvidia"].driver)
    driver.clear_cache(torch.zeros(16, dtype=torch.int32))
    """
    child = run_python(code, {"CLEANFLUSH": "1", "CLEANFLUSH_REPORT": str(report)})
    assert child.returncode == 0
    assert f"cleanflush: could not write CLEANFLUSH_REPORT={str(report)!r}" in child.stderr


WITHOUT_TORCH = """
import sys
sys.modules["torch"] = None   # import torch / import triton now raise ImportError
sys.modules["triton"] = None
from cleanflush.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_status_and_verify_without_torch_or_triton():
    env = {k: v for k, v in os.environ.items() if k != "CLEANFLUSH"}

    def run(*args):
        return subprocess.run(
            [sys.executable, "-c", WITHOUT_TORCH, *args], capture_output=True, text=True, timeout=120, env=env
        )

    status = run("status")
    assert status.returncode == 0, status.stderr
    assert " failed   installed, but the import failed: ModuleNotFoundError" in status.stdout
    assert "before 3.0" not in status.stdout
    assert "Traceback" not in status.stderr
    verify = run("verify")
    assert verify.returncode == 3  # cannot run here
    assert verify.stderr.strip() == "cleanflush verify: cannot run here: torch is not installed"


# Every path and option a command needs is checked before any work starts; --json alone is
# parseable JSON on stdout; a closed pipe ends quietly.

MARK = "import pathlib, sys; pathlib.Path(sys.argv[1]).touch(); print('job output')"


def ab(tmp_path, *options, env=None):
    """`cleanflush ab OPTIONS -- a job that leaves a mark`: (the process, whether the job ran)."""
    mark = tmp_path / "ran"
    out = cli(["ab", *options, "--", sys.executable, "-c", MARK, str(mark)], env)
    return out, mark.exists()


@pytest.mark.parametrize(
    "options, says",
    [
        (["--json", "/no/such/dir/ab.json"], "cannot write --json '/no/such/dir/ab.json': no directory '/no/such/dir'"),
        (["--json", "."], "cannot write --json '.': it is a directory"),
        (["--keep", __file__], "is a file, not a directory"),
        (["--figure", "/no/such/dir/ab.png"], "cannot write --figure"),
    ],
)
def test_ab_checks_its_paths_before_any_run(tmp_path, options, says):
    out, ran = ab(tmp_path, *options)
    assert (out.returncode, ran) == (2, False)
    assert out.stderr.strip().endswith(says.split(": ", 1)[-1]) or says in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_ab_figure_without_matplotlib_is_a_usage_error_before_any_run(tmp_path):
    pytest.importorskip("triton")
    job = f"open({str(tmp_path / 'ran')!r}, 'w')"
    code = (
        "import sys; sys.modules['matplotlib'] = None  # not installed\n"
        "from cleanflush.cli import main\n"
        f"sys.exit(main(['ab', '--figure', {str(tmp_path / 'ab.png')!r}, '--', sys.executable, '-c', {job!r}]))"
    )
    out = run_python(code)
    assert out.returncode == 2 and not (tmp_path / "ran").exists() and "--figure needs matplotlib" in out.stderr


def test_ab_policy_offers_only_the_clean_ones():
    out = cli(["ab", "--policy", "write", "--", "true"])
    assert out.returncode == 2 and "use write-read or read" in out.stderr and "write, " not in out.stderr
    assert "valid policies: write-read, read, write" in cli(["ab", "--policy", "fast", "--", "true"]).stderr


def test_ab_json_alone_is_parseable_and_the_jobs_output_goes_to_stderr(tmp_path):
    out, ran = ab(tmp_path, "--json")
    assert ran and out.returncode == 0, out.stderr
    record = json.loads(out.stdout)  # nothing but the record on stdout
    assert record["schema"] and "job output" in out.stderr
    without = cli(["ab", "--", sys.executable, "-c", "print('job output')"])
    assert without.stdout.startswith("job output")  # the job's own output, where it always goes


def test_ab_says_when_there_is_no_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    out, _ = ab(tmp_path)
    lines = [line for line in out.stderr.splitlines() if "no CUDA device here" in line]
    assert len(lines) == 1 and lines[0].startswith("cleanflush ab: ")


def test_ab_draws_its_figure_where_it_is_asked_to(tmp_path, monkeypatch, capfd):
    # in this process: the figure as a recorder
    pytest.importorskip("matplotlib")
    from cleanflush.__main__ import main
    from cleanflush._ab import figure as _ab_figure

    drawn = []
    monkeypatch.setattr(_ab_figure, "draw", lambda result, path: drawn.append(path))
    path = str(tmp_path / "ab.png")
    code = main(["ab", "--runs", "1", "--json", "--figure", path, "--", sys.executable, "-c", "pass"])
    out, err = capfd.readouterr()  # the job runs with this process's descriptors
    assert code == 0, err
    assert drawn == [path] and json.loads(out)["figure"] == path


def test_ab_called_where_its_output_is_captured_still_runs_the_job(tmp_path, capsys):
    from cleanflush.__main__ import main

    mark = tmp_path / "ran"
    assert main(["ab", "--runs", "1", "--", sys.executable, "-c", MARK, str(mark)]) == 0
    assert mark.exists() and "cannot start" not in capsys.readouterr().err


def test_ab_asks_torch_whether_there_is_a_gpu(monkeypatch):
    torch = pytest.importorskip("torch")
    from cleanflush.cli import ab as ab_cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert ab_cli._cuda_here() is True
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ab_cli._cuda_here() == "no CUDA device here (torch.cuda.is_available() is False)"


def test_a_closed_pipe_ends_quietly():
    shell = f"{sys.executable} -m cleanflush status | head -1"
    env = environ_without_cleanflush()
    out = subprocess.run(["bash", "-o", "pipefail", "-c", shell], env=env, capture_output=True, text=True, timeout=300)
    assert out.stdout.startswith("cleanflush ") and out.stdout.count("\n") == 1
    assert out.stderr == "" and out.returncode == 0


def test_run_with_an_empty_command_is_a_usage_error():
    out = cli(["run", "--", ""])
    assert out.returncode == 2 and "needs a command after --" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.harness
def test_status_check_passes_for_an_installed_harness_patched_when_imported():
    pytest.importorskip("flashinfer")
    out = cli(["status", "--check", "flashinfer,tilelang"])
    assert out.returncode == 0, out.stdout
    rows = [line for line in out.stdout.splitlines() if line.startswith(("flashinfer.", "tilelang."))]
    assert rows and all(" pending " in row for row in rows)


def _subcommands():
    """The commands of ``cleanflush``: ``.choices`` each one's own parser by name (what
    ``cleanflush COMMAND --help`` prints), ``._choices_actions`` their lines in ``--help``."""
    from cleanflush.cli import build_parser

    [sub] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub


def _commands():
    return _subcommands().choices


def test_every_option_of_every_command_says_what_it_does():
    for name, parser in _commands().items():
        for action in parser._actions:
            assert action.help, (name, action.option_strings)  # a bare flag in --help tells nothing


def test_verify_help_states_its_default_dtype_and_names_every_preset():
    from cleanflush._verify.measure import PRESETS

    options = {o: a for a in _commands()["verify"]._actions for o in a.option_strings}
    assert options["--dtype"].help == f"(default {options['--dtype'].default})"
    assert options["--preset"].help.startswith("a named set of shapes: ")
    assert all(f"{name}: " in options["--preset"].help for name in PRESETS)


def test_run_help_says_the_children_are_patched_and_its_own_exit_codes():
    run = _commands()["run"]
    assert run.epilog.endswith("2 usage error, 126 COMMAND cannot be run, 127 COMMAND not found")
    assert "every Python process it starts is patched from its first import of torch or triton." in run.description


def test_the_command_reference_says_what_each_commands_help_says():
    """docs/cli.md, written from the commands' help, and the commands have not drifted apart."""
    page = (pathlib.Path(__file__).parents[1] / "docs" / "cli.md").read_text()
    sub = _subcommands()
    summaries = {a.dest: a.help for a in sub._choices_actions}  # the lines of `cleanflush --help`
    for name, parser in sub.choices.items():
        section = page.split(f"## `cleanflush {name}`\n", 1)[1].split("\n## ", 1)[0]
        assert section.startswith(f"\nIn `cleanflush --help`: {summaries[name]}.\n"), name
        assert (parser.usage is None) == ("```" not in section), name
        if parser.usage:
            assert f"```\n{parser.usage}\n```" in section
        assert (parser.description or "") in section and section.rstrip().endswith(parser.epilog)
        for action in parser._actions:
            if action.option_strings and "-h" not in action.option_strings and action.help != argparse.SUPPRESS:
                option = ", ".join(action.option_strings) + (f" {action.metavar}" if action.metavar else "")
                said = action.help % {"default": action.default} if "%" in action.help else action.help
                assert f"| `{option}` | {said} |" in section, (name, option)


def test_bare_cleanflush_lists_its_commands():
    out = cli([])
    assert out.returncode == 2 and out.stdout == ""
    listed = [line.split()[0] for line in out.stderr.splitlines() if line.startswith("    ") and line[4] != " "]
    assert listed == ["status", "run", "ab", "audit", "verify"] and "exit codes:" in out.stderr


def test_status_says_each_pick_rule_and_check_fails_on_an_invalid_one():
    from cleanflush.cli import status

    assert status.pick_rule_says(None) == "CLEANFLUSH_PICK is unset: autotuners keep their own pick (fastest)"
    assert status.pick_rule_says("fastest") == "CLEANFLUSH_PICK=fastest: autotuners keep their own pick"
    stable = status.pick_rule_says(" Stable ")
    assert stable.startswith("CLEANFLUSH_PICK= Stable : Triton @autotune kernels and Inductor's algorithm selection")
    assert "its floor 1%;" in stable and stable.endswith("timed again for 25 ms")  # the defaults
    assert "at least 2.5 steps of the 32 ns event timer where the timings are single readings" in stable
    tuned = status.pick_rule_says("stable", "0.5", "FULL")
    assert "its floor 0.5%;" in tuned and tuned.endswith("timed again for as long as the autotuner's own timings")
    for floor, again in (("half", None), (None, "soon")):  # said whatever the rule: pick() selects stable in code
        invalid = status.pick_rule_says("fastest", floor, again)
        assert invalid.startswith("INVALID: CLEANFLUSH_PICK_"), invalid
    bad = status.pick_rule_says("fastes")
    assert bad.startswith("INVALID: ") and "stable" in bad
    every = status.pick_rule_says("fastes", "half", "soon")  # the row names each invalid one
    assert [p.split("=")[0] for p in every.removeprefix("INVALID: ").split(" | ")] == list(status.PICK_SETTINGS)
    row = {"name": "triton", "target": "triton", "state": "patched", "detail": ""}
    found = status.setting_problems({"CLEANFLUSH_PICK": "fastes"})
    data = {"setting_problems": found, "targets": [row]}
    assert status.problems(data) == [bad.removeprefix("INVALID: ")]
    assert status.setting_problems({"CLEANFLUSH_PICK": "stable"}) == []  # the control


def test_run_takes_its_command_with_or_without_the_double_dash():
    from cleanflush.cli import run

    parser = argparse.ArgumentParser()
    for given in (["python", "-c", "pass"], ["--", "python", "-c", "pass"]):
        assert run.command_of(argparse.Namespace(command=given, name="run"), parser) == ["python", "-c", "pass"]


def test_a_closed_stdout_is_pointed_at_the_null_device(tmp_path, monkeypatch):
    from cleanflush.cli import _output

    with open(tmp_path / "out", "w") as target:
        monkeypatch.setattr(sys, "stdout", target)
        _output.quiet_broken_pipe()
        os.write(target.fileno(), b"written after the reader left")
    assert (tmp_path / "out").read_text() == ""


def test_a_whole_file_is_written_beside_its_place_then_renamed(tmp_path, monkeypatch):
    from cleanflush.cli import _output

    elsewhere = tmp_path / "tmp"
    elsewhere.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(elsewhere))  # the temporary folder: on another disk, say
    moved = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: moved.append(os.path.dirname(a)) or real_replace(a, b))
    _output.write_whole(str(tmp_path / "record.json"), "{}")
    assert moved == [str(tmp_path)] and (tmp_path / "record.json").read_text() == "{}"


def test_every_help_survives_any_name(monkeypatch):
    """Help strings built from names: argparse %-formats help, so a name with % in it would
    crash --help unless it is escaped; every command's help shows the name as it is."""
    from cleanflush import _pick, _policies
    from cleanflush.cli import build_parser

    odd = "within-2%"
    monkeypatch.setattr(_policies, "POLICIES", (*_policies.POLICIES, odd))
    monkeypatch.setattr(_pick, "PICKS", (*_pick.PICKS, odd))
    monkeypatch.setattr(_registry, "NAMES", (*_registry.NAMES, odd))
    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    shown = {name: " ".join(command.format_help().split()) for name, command in commands.choices.items()}
    assert parser.format_help()
    assert shown["run"].count(odd) == 3  # --policy, --pick, --disable
    assert odd in shown["status"]  # --check's targets


def test_the_top_level_help_names_every_exit_code_a_command_has():
    import re

    from cleanflush.cli import build_parser

    parser = build_parser()
    [commands] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    codes = {int(c) for command in commands.choices.values() for c in re.findall(r"\b\d{1,3}\b", command.epilog)}
    top = " ".join(parser.format_help().split())
    named = {int(c) for c in re.findall(r"\b\d{1,3}\b", top.split("exit codes:", 1)[1])}
    assert codes >= {0, 1, 2, 3, 126, 127, 129, 130, 143} and codes <= named, codes - named
