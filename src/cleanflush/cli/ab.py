"""``cleanflush ab -- COMMAND``: the user's own job, stock and clean, compared (``_ab``)."""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import os
import subprocess
import sys

from .. import _ab, _env, _pick, _policies
from .._ab import folders
from .._ab.compare import MIN_EFFECT
from .._ab.report import format_report
from ._output import EXIT_USAGE, emit, json_option, output_problem, text_stream
from .run import command_of, policy_name

CLEAN = tuple(p.name for p in _policies.BY_NAME.values() if p.reads)


def clean_policy(text: str) -> str:
    name = policy_name(text)
    if name not in CLEAN:
        raise argparse.ArgumentTypeError(f"ab compares the stock flush with a clean one: use {' or '.join(CLEAN)}")
    return name


def positive(text: str) -> int:
    value = int(text) if text.isascii() and text.isdigit() else 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


# More runs a side than this are hours of a real job, and nothing a comparison needs: refused at once
# rather than found out as memory grows.
MAX_RUNS = 50


def runs_count(text: str) -> int:
    value = positive(text)
    if value > MAX_RUNS:
        raise argparse.ArgumentTypeError(f"at most {MAX_RUNS} runs a side, got {value}")
    return value


def percent(text: str) -> float:
    """A percentage from 0 to 100, as a fraction."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        value = -1.0
    if not 0 <= value <= 100 or not text.strip().rstrip("%").replace(".", "", 1).isdigit():
        raise argparse.ArgumentTypeError(f"expected a percentage from 0 to 100, e.g. 2 or 0.5; got {text!r}")
    return value / 100


COMPARE_HELP = (
    "flush (default): the stock flush against the clean one; pick: two pick rules (--rules), both under the "
    "clean flush, their picks priced side by side"
)


def rules_pair(text: str) -> tuple[str, str]:
    """Two different pick rules, comma-separated."""
    names = [name.strip() for name in text.split(",")]
    valid = ", ".join(_pick.PICK.names)
    if len(names) != 2:
        raise argparse.ArgumentTypeError(f"expected two pick rules, comma-separated (valid: {valid}); got {text!r}")
    try:
        first, second = (_pick.PICK.check(name) for name in names)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if first == second:
        raise argparse.ArgumentTypeError(f"{first} twice: ab compares two different pick rules (valid: {valid})")
    return first, second


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    ab = commands.add_parser(
        "ab",
        help="run a command with the stock flush and with a clean one; show which autotuning "
        "decisions the dirty flush changed and what that costs the compiled program",
        description="Run COMMAND with the stock flush and with a clean policy (RUNS times each, interleaved), "
        "each run with fresh private Triton and Inductor caches so that it really tunes; record "
        "every autotuning decision (Triton's Autotuner, Inductor's max-autotune), workers included; "
        "say how reproducible each side's tuning is, which decisions the dirty flush changed beyond "
        "the clean runs' own spread and what the stock pick costs, and time the programs Inductor "
        "compiled in each run against each other, end to end.  With --compare pick: two pick rules instead (--rules, "
        "default the autotuners' own pick against the stable rule), both under the clean policy, each rule's "
        "agreement across runs and ranks and what its picks cost.",
        usage="cleanflush ab [--compare flush|pick] [--rules A,B] [--policy P] [--runs N] [--min-effect PCT] "
        "[--figure PNG] [--json [PATH]] [--keep DIR] -- COMMAND [ARGS...]",
        epilog="exit codes: 0 every run succeeded, 1 a run of the command failed, 2 usage error, 130 interrupted "
        "(143 terminated, 129 hung up)",
    )
    _add_compared(ab)
    ab.add_argument(
        "--policy",
        type=clean_policy,
        default=_policies.DEFAULT_POLICY,
        help=f"the clean side: {' or '.join(CLEAN)} (default {_policies.DEFAULT_POLICY})",
    )
    ab.add_argument(
        "--runs",
        type=runs_count,
        default=_ab.RUNS,
        help=f"runs of each side, interleaved, {MAX_RUNS} at most (default {_ab.RUNS}: one run cannot tell a "
        "change from noise)",
    )
    ab.add_argument(
        "--min-effect",
        type=percent,
        default=MIN_EFFECT,
        metavar="PCT",
        help="the practical floor: a stock pick at most PCT%% slower than the clean one is negligible "
        f"(default {100 * MIN_EFFECT:g}%%)",
    )
    ab.add_argument("--figure", metavar="PNG", help="draw the comparison (needs matplotlib)")
    ab.add_argument(
        "--keep",
        metavar="DIR",
        help="keep each run's decisions and caches in DIR (default: a temp dir, removed at the end)",
    )
    json_option(ab)
    ab.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return ab


def _add_compared(ab: argparse.ArgumentParser) -> None:
    """What ab sets against each other: --compare, and --rules for the pick rules."""
    ab.add_argument("--compare", choices=_ab.COMPARES, default=_ab.FLUSH, help=COMPARE_HELP)
    ab.add_argument(
        "--rules",
        type=rules_pair,
        default=None,
        metavar="A,B",
        help=f"with --compare pick: the two pick rules, the first run first (default {','.join(_ab.RULES)}; "
        f"valid: {', '.join(_pick.PICK.names)})".replace("%", "%%"),
    )


def _usage_problem(args: argparse.Namespace) -> str | None:
    """Everything an option needs, checked before the first run."""
    if args.rules is not None and args.compare != _ab.PICK:
        return "--rules names the pick rules --compare pick sets against each other"
    sides = _ab.sides_of(args.compare, args.policy, args.rules or _ab.RULES)
    problem = _pick_settings_problem() if args.compare == _ab.PICK else None
    problem = problem or _keep_problem(args.keep, (sides[0].label, sides[1].label), args.runs)
    problem = problem or output_problem(args.json) or output_problem(args.figure, "--figure")
    if problem is None and args.figure and args.compare == _ab.PICK:
        problem = "--figure draws the flush comparison; --compare pick has none"
    if problem is None and args.figure:
        problem = _figure_problem(args.figure, args.json)
    return problem


def _pick_settings_problem() -> str | None:
    """An invalid setting of the rules' (the runs would each say it and run without it)."""
    problems = [
        _pick.floor_from(_env.value(_env.PICK_FLOOR_VAR))[1],
        _pick.again_ms_from(_env.value(_env.PICK_AGAIN_VAR))[1],
    ]
    return next((p for p in problems if p), None)


def _keep_problem(keep: str | None, sides: tuple[str, str], runs: int) -> str | None:
    return None if keep is None else folders.problem(keep, runs, sides)


def _figure_problem(figure: str, json_path: str | None) -> str | None:
    if json_path and json_path != "-" and os.path.abspath(json_path) == os.path.abspath(figure):
        return f"--json and --figure name the same file {figure!r}"
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return "--figure needs matplotlib (pip install matplotlib)"

    kinds = Figure().canvas.get_supported_filetypes()
    kind = os.path.splitext(figure)[1].lstrip(".").lower()
    if kind not in kinds:
        what = kind or "a file without an extension"
        return f"--figure {figure!r}: matplotlib writes {', '.join(sorted(kinds))}, not {what}"
    return None


def _locked(keep: str) -> int | None:
    """An open descriptor holding ``keep``'s lock for this ab, or None where another ab holds it."""
    fd: int = folders.open_lock(keep)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _job_stdout(json_path: str | None) -> int:
    """The descriptor the job's own output goes to: the text's (stderr when stdout carries
    the JSON); where that stream was replaced by one without a descriptor (``main`` called
    in a process that captures its output), the process's own 2 or 1; where that is closed
    (``>&-``), nowhere (the job still runs)."""
    stream = text_stream(json_path)  # None only for a closed stdout: main replaces a closed stderr
    try:
        fd = int(stream.fileno()) if stream is not None else 1
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        fd = 2 if json_path == "-" else 1
    try:
        os.fstat(fd)
    except OSError:  # closed
        return subprocess.DEVNULL
    return fd


def _cuda_here() -> str | bool:
    """True, or why this machine has no CUDA device for the job (said before the runs)."""
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed here"
    import torch

    return True if torch.cuda.is_available() else "no CUDA device here (torch.cuda.is_available() is False)"


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = command_of(args, parser)
    problem = _usage_problem(args)
    if problem:
        print(f"cleanflush ab: {problem}", file=sys.stderr)
        return EXIT_USAGE
    if args.keep:
        try:
            held = _locked(args.keep)  # held until this process ends
        except OSError as exc:  # a link where the lock goes (never followed), a folder gone meanwhile
            print(f"cleanflush ab: --keep {args.keep!r}: its lock cannot be opened ({exc.strerror})", file=sys.stderr)
            return EXIT_USAGE
        if held is None:
            print(f"cleanflush ab: another cleanflush ab is using --keep {args.keep!r}", file=sys.stderr)
            return EXIT_USAGE
    gpu = _cuda_here()
    if gpu is not True:
        print(
            f"cleanflush ab: {gpu}: the job runs on what it finds, and little autotunes without a GPU", file=sys.stderr
        )
    # with the JSON on stdout, the job's own output goes to stderr
    stdout = _job_stdout(args.json)
    result, code = _ab.run(
        command,
        args.policy,
        args.runs,
        args.keep,
        job_stdout=stdout,
        min_effect=args.min_effect,
        compared=args.compare,
        rules=args.rules or _ab.RULES,
    )
    if args.figure:
        from .._ab.figure import draw  # matplotlib, only when a figure is asked for

        result["figure"] = draw(result, args.figure) or args.figure
    emit(result, format_report(result), args.json, "cleanflush ab")
    return code
