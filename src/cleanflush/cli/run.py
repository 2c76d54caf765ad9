"""``cleanflush run -- COMMAND``: the command, with cleanflush on in it and every Python child."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from .. import _env, _pick, _policies, _policy, _registry
from .._blocks import Choice
from ._output import EXIT_USAGE, help_text, output_problem


def checked(choice: Choice) -> Callable[[str], str]:
    """An option's type: the name ``choice`` stands for, else argparse's usage error naming the valid ones."""

    def name(text: str) -> str:
        try:
            return choice.check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return name


policy_name = checked(_policy.POLICY)
pick_name = checked(_pick.PICK)


def target_names(text: str) -> frozenset[str]:
    disabled = _env.parse_disabled(text, _registry.NAMES)
    if disabled.unknown:  # argparse names the option before this
        raise argparse.ArgumentTypeError(
            f"unknown targets {', '.join(disabled.unknown)}; valid targets: {', '.join(_registry.NAMES)}"
        )
    return disabled.names


def command_of(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """The command after ``--``; a usage error when there is none."""
    command: list[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or not command[0]:
        parser.error(f"{args.name} needs a command after --, e.g. cleanflush {args.name} -- python tune.py")
    return command


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    run = commands.add_parser(
        "run",
        help="run a command with cleanflush on, in it and every Python child",
        description="Check the policy, then replace this process with COMMAND, run with CLEANFLUSH set: "
        "every Python process it starts is patched from its first import of torch or triton.",
        usage="cleanflush run [--policy P] [--pick RULE] [--report FILE] [--disable TARGETS] -- COMMAND [ARGS...]",
        epilog="exit codes: COMMAND's own (this process becomes it); 2 usage error, 126 COMMAND cannot be run, "
        "127 COMMAND not found",
    )
    run.add_argument(
        "--policy",
        type=policy_name,
        default=_policies.DEFAULT_POLICY,
        help=help_text(f"{', '.join(_policies.POLICIES)} (default {_policies.DEFAULT_POLICY})"),
    )
    run.add_argument(
        "--pick",
        type=pick_name,
        metavar="RULE",
        help=help_text(
            f"how autotuners pick among near-ties: {', '.join(_pick.PICKS)} ({_env.PICK_VAR}; default: the "
            f"variable's value, else {_pick.DEFAULT_PICK})"
        ),
    )
    run.add_argument(
        "--report", metavar="FILE", help=f"each process that flushed appends a JSON line ({_env.REPORT_VAR})"
    )
    run.add_argument(
        "--disable",
        type=target_names,
        metavar="TARGETS",
        help=help_text(f"comma-separated targets to keep stock: {', '.join(_registry.NAMES)} ({_env.DISABLE_VAR})"),
    )
    run.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return run


def _policy_for_child(asked: str, program: str) -> str | None:
    """What ``CLEANFLUSH`` the command gets: the ``--policy`` asked for, but off where the shell's
    ``CLEANFLUSH`` says off (off is off everywhere); said where the shell's value is not the one."""
    value = _env.AT_START[_env.POLICY_VAR]
    if _env.is_off(value):
        print(
            f"cleanflush run: {_env.POLICY_VAR}={value} is off for {program} and its children too "
            "(unset it to run with a policy)",
            file=sys.stderr,
        )
        return value
    try:
        _env.parse_policy(value)
    except ValueError as exc:
        print(f"cleanflush run: {exc}; {program} runs with {asked} (--policy)", file=sys.stderr)
    return asked


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = command_of(args, parser)
    problem = output_problem(args.report, "--report")
    if problem:
        print(f"cleanflush run: {problem}", file=sys.stderr)
        return EXIT_USAGE
    changes: dict[str, str | None] = {_env.POLICY_VAR: _policy_for_child(args.policy, command[0])}
    if args.report:
        changes[_env.REPORT_VAR] = os.path.abspath(args.report)
    if args.pick is not None:
        changes[_env.PICK_VAR] = args.pick
    if args.disable is not None:
        changes[_env.DISABLE_VAR] = ",".join(sorted(args.disable))
    env = _env.for_child(**changes)
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"cleanflush run: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 0  # pragma: no cover - exec does not return
