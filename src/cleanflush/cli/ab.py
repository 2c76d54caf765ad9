"""``cleanflush ab -- COMMAND``: the user's own job, stock and clean, compared (``_ab``)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys

from .. import _ab, _env
from ._output import EXIT_USAGE, emit, json_option, output_problem, text_stream
from .run import command_of, policy_name

CLEAN = tuple(p for p in _env.POLICIES if p != _ab.STOCK)


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
        "compiled in each run against each other, end to end.",
        usage="cleanflush ab [--policy P] [--runs N] [--figure PNG] [--json [PATH]] [--keep DIR] -- COMMAND [ARGS...]",
        epilog="exit codes: 0 every run succeeded, 1 a run of the command failed, 2 usage error, 130 interrupted",
    )
    ab.add_argument(
        "--policy",
        type=clean_policy,
        default=_env.DEFAULT_POLICY,
        help=f"the clean side: {' or '.join(CLEAN)} (default {_env.DEFAULT_POLICY})",
    )
    ab.add_argument(
        "--runs",
        type=positive,
        default=_ab.RUNS,
        help=f"runs of each side, interleaved (default {_ab.RUNS}: one run cannot tell a change from noise)",
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


def _usage_problem(args: argparse.Namespace) -> str | None:
    """Everything an option needs, checked before the first run."""
    if args.keep and os.path.exists(args.keep) and not os.path.isdir(args.keep):
        return f"--keep {args.keep!r} is a file, not a directory"
    problem = output_problem(args.json) or output_problem(args.figure, "--figure")
    if problem is None and args.figure and importlib.util.find_spec("matplotlib") is None:
        return "--figure needs matplotlib (pip install matplotlib)"
    return problem


def _job_stdout(json_path: str | None) -> int:
    """The descriptor the job's own output goes to: the text's (stderr when stdout carries
    the JSON); where that stream was replaced by one without a descriptor (``main`` called
    in a process that captures its output), the process's own 2 or 1; where that is closed
    (``>&-``), nowhere (the job still runs)."""
    stream = text_stream(json_path)
    try:
        fd = int(stream.fileno()) if stream is not None else (2 if json_path == "-" else 1)
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
    gpu = _cuda_here()
    if gpu is not True:
        print(
            f"cleanflush ab: {gpu}: the job runs on what it finds, and little autotunes without a GPU", file=sys.stderr
        )
    # with the JSON on stdout, the job's own output goes to stderr
    result, code = _ab.run(command, args.policy, args.runs, args.keep, job_stdout=_job_stdout(args.json))
    if args.figure:
        from .._ab_figure import draw  # matplotlib, only when a figure is asked for

        result["figure"] = draw(result, args.figure) or args.figure
    emit(result, _ab.format_report(result), args.json)
    return code
