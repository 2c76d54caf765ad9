"""Command line: ``cleanflush status``, ``run``, ``ab``, ``audit`` and ``verify``, one module each.

Exit codes, for every command: 0 success, 1 the check failed (verify FAIL, ``status
--check`` found a problem, a run of ``ab`` or ``audit``'s job failed), 2 usage error, 3 cannot run
here, 130 interrupted; ``run`` exits with its command's own code (126: it cannot be run, 127:
not found), ``ab`` and ``audit`` with 143 or 129 where they were terminated or hung up.
``--json`` means the same everywhere: alone, the JSON record on stdout (and everything else
on stderr); with a path, the record written there.  Paths are checked before any work.
"""

from __future__ import annotations

import argparse
import os
import sys

import cleanflush

from .._env import POLICY_VAR
from . import ab, audit, run, status, verify
from ._output import EXIT_CODES, EXIT_USAGE, quiet_broken_pipe

COMMANDS = {"status": status, "run": run, "ab": ab, "audit": audit, "verify": verify}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cleanflush",
        description="Make GPU kernel benchmarks start from a cold and clean L2. "
        f"{POLICY_VAR}=1 turns it on for a program and its children without a code change.",
        epilog=EXIT_CODES,
    )
    parser.add_argument("-V", "--version", action="version", version=f"cleanflush {cleanflush.__version__}")
    commands = parser.add_subparsers(dest="name", required=True, metavar="COMMAND")
    for module in COMMANDS.values():
        command = module.add_parser(commands)
        command.set_defaults(command_parser=command)  # a command's usage errors show its own usage
    return parser


def main(argv: list[str] | None = None) -> int:
    if sys.stderr is None:  # closed (`2>&-`): print(file=None) would put the messages on stdout
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the process's life)
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):  # bare `cleanflush`: what it can do, not only that it needs more
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        code: int = COMMANDS[args.name].main(args, args.command_parser)
        if sys.stdout is not None:  # closed (`>&-`): nothing to flush
            sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): end quietly
        quiet_broken_pipe()
        return 0
    except KeyboardInterrupt:
        print(f"cleanflush {args.name}: interrupted", file=sys.stderr)
        return 130
    return code
