"""``cleanflush audit -- COMMAND``: every pick the job was served without tuning, re-tuned clean
and priced by two timers (``_audit``)."""

from __future__ import annotations

import argparse
import os
import sys

from .._ab.compare import MIN_EFFECT
from .._audit import run as _audit_run
from .._audit import tables
from .._audit.report import format_report
from ._output import EXIT_USAGE, emit, json_option, output_problem
from .ab import _cuda_here, _job_stdout, percent
from .run import command_of


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    audit = commands.add_parser(
        "audit",
        help="run a command once as shipped; re-tune every autotuning pick it was served without tuning "
        "(a library's table, Triton's disk cache) and say which are wrong",
        description="Run COMMAND once, as shipped, and record every Triton autotuning pick it was served without "
        "tuning (a table preloaded into an autotuner's cache, Triton's disk cache, a library's own table such as "
        "gemlite's), with its call.  Then, in a process of its own on the GPU, re-tune each: every config the "
        "autotuner offers for that call timed after a clean read (a large search cut to its fastest by a first "
        "sweep, near-ties settled by the stable rule), and the shipped config and the clean pick priced side by "
        "side by two timers that share no code (CUPTI's kernel time after a plain read; back-to-back launches in "
        "a CUDA graph over copies of the inputs).  Each entry is right, wrong (slower by both timers beyond the "
        "noise and the floor: what it costs per call and over the job's calls), undecided (the timers disagree) "
        "or not auditable (why).  With --write: the library's table with each wrong entry replaced by the clean "
        "pick, in the library's own format, in a folder of its own.",
        usage="cleanflush audit [--write DIR] [--min-effect PCT] [--json [PATH]] [--keep DIR] -- COMMAND [ARGS...]",
        epilog="exit codes: 0 the job succeeded, 1 the job failed, 2 usage error, 130 interrupted "
        "(143 terminated, 129 hung up)",
    )
    audit.add_argument(
        "--write",
        metavar="DIR",
        help="a new or empty folder: the corrected tables go there (gemlite's JSON, Triton's disk-cache files), "
        "only the wrong entries replaced; the tables read are never touched",
    )
    audit.add_argument(
        "--min-effect",
        type=percent,
        default=MIN_EFFECT,
        metavar="PCT",
        help="the practical floor: a shipped config at most PCT%% slower than the clean pick is right "
        f"(default {100 * MIN_EFFECT:g}%%)",
    )
    audit.add_argument(
        "--keep",
        metavar="DIR",
        help="keep the recorded entries, calls and prices in DIR, a new or empty folder (default: a temp dir, removed)",
    )
    json_option(audit)
    audit.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return audit


def _usage_problem(args: argparse.Namespace) -> str | None:
    """Everything an option needs, checked before the job runs: where nothing can be read or
    written as asked, nothing runs."""
    problem = output_problem(args.json)
    if problem is None and args.keep is not None:
        problem = tables.write_problem(args.keep, "--keep")
    if problem is None and args.write is not None:
        problem = tables.write_problem(args.write)
        if problem is None and args.keep and os.path.abspath(args.keep) == os.path.abspath(args.write):
            problem = f"--write and --keep name the same folder {args.write!r}"
        problem = problem or tables.folder_problem(tables.triton_cache_dir(dict(os.environ)), "Triton's cache folder")
    return problem


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = command_of(args, parser)
    problem = _usage_problem(args)
    if problem:
        print(f"cleanflush audit: {problem}", file=sys.stderr)
        return EXIT_USAGE
    gpu = _cuda_here()
    if gpu is not True:
        print(f"cleanflush audit: {gpu}: the job runs, but its entries cannot be priced here", file=sys.stderr)
    result, code = _audit_run.run(
        command, write=args.write, keep=args.keep, job_stdout=_job_stdout(args.json), min_effect=args.min_effect
    )
    emit(result, format_report(result), args.json, "cleanflush audit")
    return code
