"""Command line: ``cleanflush status``, ``cleanflush run -- COMMAND`` and ``cleanflush verify``.

Exit codes, for every command: 0 success, 1 the check failed (verify FAIL, ``status
--check`` found a target that cannot be patched), 2 usage error, 3 cannot run here.
``--json`` means the same everywhere: alone, the JSON record on stdout (and the text on
stderr); with a path, the record written there.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import site
import sys
import warnings
from typing import Any

import cleanflush

from . import _env, _policy, _verify
from ._env import DISABLE_VAR, ENV_VAR
from ._state import ENV_AT_START, REPORT_VAR, TargetStatus
from .patches import installed_version

STATUS_SCHEMA = 1
# What `status` imports so that the hooks fire and every row tells the truth.
_TARGET_MODULES = ("triton", "torch._inductor.runtime.benchmarking", "torch._inductor.utils")
# The start of a row's detail when the target is there but cannot be patched.
_PROBLEMS = ("unsupported", "could not patch", "installed, but the import failed")


def _autoload_file() -> str | None:
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    for directory in dirs:
        path = os.path.join(directory, "cleanflush.pth")
        if os.path.exists(path):
            return path
    return None


def _programs_get(value: str | None) -> tuple[str | None, str]:
    """(policy or None, what a program started with ``CLEANFLUSH=value`` gets)."""
    try:
        chosen = _env.parse(value)
    except ValueError as exc:
        return None, f"INVALID: {exc}; programs keep the stock flush"
    if value is None or not value.strip():
        return None, (f"{ENV_VAR} is unset: programs keep the stock flush unless they import cleanflush "
                      f"(then {_policy.DEFAULT_POLICY})")
    if chosen is None:
        return None, f"{ENV_VAR}={value}: off, even for programs that import cleanflush"
    return chosen, (f"{ENV_VAR}={value}: every Python program started here, and its children, flushes with "
                    f"{chosen} from its first import of torch or triton")


def collect_status() -> dict[str, Any]:
    """What a program started from this shell would get: the data behind `cleanflush status`.

    The environment is read as the shell has it (before this process's own import of
    cleanflush wrote to it); the targets are imported here with cleanflush installed, so each
    row says whether that target would be patched and why not.
    """
    if not cleanflush.is_installed():  # CLEANFLUSH=0 here: still find out what would be patched
        cleanflush._install(None, "status")
    errors: list[TargetStatus] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own import warnings are not ours to show
        for module in _TARGET_MODULES:
            package = module.split(".")[0]
            try:
                importlib.import_module(module)
            except Exception as exc:
                if installed_version(package, "pytorch-triton" if package == "triton" else package):
                    errors.append(TargetStatus(module, package, None, False,
                                               f"installed, but the import failed: {exc!r}"))
    policy, says = _programs_get(ENV_AT_START)
    try:
        disabled = sorted(_env.parse_disabled(os.environ.get(DISABLE_VAR)))
    except ValueError as exc:
        disabled = [f"INVALID: {exc}"]
    return {
        "schema": STATUS_SCHEMA,
        "cleanflush": cleanflush.__version__,
        "python": sys.executable,
        "environment": {ENV_VAR: ENV_AT_START, DISABLE_VAR: os.environ.get(DISABLE_VAR),
                        REPORT_VAR: os.environ.get(REPORT_VAR)},
        "programs_get": says,
        "policy": policy,
        "disabled": disabled,
        "autoload_file": _autoload_file(),
        "targets": [row.as_dict() for row in cleanflush.status() + errors],
    }


def status_problems(data: dict[str, Any], wanted: list[str] | None = None) -> list[str]:
    """What `status --check` fails on: an invalid setting, or a target that cannot be patched
    (among those whose name contains one of ``wanted``, when given)."""
    problems = [data["programs_get"]] if data["programs_get"].startswith("INVALID") else []
    problems += [d for d in data["disabled"] if d.startswith("INVALID")]
    targets = [t for t in data["targets"] if not wanted or any(w in t["target"] for w in wanted)]
    problems += [f"{t['target']}: {t['detail']}" for t in targets if t["detail"].startswith(_PROBLEMS)]
    if wanted:
        problems += [f"{w}: no such target here" for w in wanted if not any(w in t["target"] for t in targets)]
    if not any(t["patched"] for t in targets):
        problems.append("no benchmarker here can be patched (is torch or triton installed?)")
    return problems


def format_status(data: dict[str, Any]) -> str:
    pth = data["autoload_file"]
    lines = [
        f"cleanflush {data['cleanflush']} ({data['python']})",
        f"environment  {data['programs_get']}",
        f"disabled     {', '.join(data['disabled']) or 'none'} ({DISABLE_VAR})",
        "autoload     " + (f"{pth}: wakes on the first import of torch or triton when {ENV_VAR} is set"
                           if pth else f"cleanflush.pth not found in this interpreter: {ENV_VAR} does nothing here"),
        f"report       {data['environment'][REPORT_VAR] or f'{REPORT_VAR} unset'}",
        "",
    ]
    rows = [("target", "version", "would patch", "detail")]
    for t in data["targets"]:
        rows.append((t["target"], t["version"] or "-", "yes" if t["patched"] else "no", t["detail"]))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    return "\n".join(lines)


def _emit(data: dict[str, Any], text: str, json_path: str | None) -> None:
    """Text on stdout; with ``--json``, the record on stdout (text to stderr) or in a file."""
    if json_path == "-":
        print(text, file=sys.stderr)
        print(json.dumps(data, indent=2))
        return
    print(text)
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)


def _status(args: argparse.Namespace) -> int:
    data = collect_status()
    wanted = [w.strip() for w in args.check.split(",") if w.strip()] if args.check not in (None, "all") else None
    problems = status_problems(data, wanted)
    data["problems"] = problems
    text = format_status(data)
    if args.check:
        text += "\n\n" + ("check: FAIL\n" + "\n".join(f"  - {p}" for p in problems) if problems else "check: OK")
    _emit(data, text, args.json)
    return 1 if args.check and problems else 0


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    command = _command(args, parser)
    env = dict(os.environ, **{ENV_VAR: args.policy})
    if args.report:
        env[REPORT_VAR] = os.path.abspath(args.report)
    if args.disable is not None:
        env[DISABLE_VAR] = ",".join(sorted(args.disable))
    try:
        os.execvpe(command[0], command, env)
    except OSError as exc:
        print(f"cleanflush run: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    return 0  # pragma: no cover - exec does not return


def _command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    command: list[str] = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error(f"{args.name} needs a command after --, e.g. cleanflush {args.name} -- python tune.py")
    return command


def _ab_command(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from . import _ab

    if args.policy == _ab.STOCK:
        parser.error("ab compares the stock flush with a clean one: --policy write-read or read")
    result, code = _ab.run(_command(args, parser), args.policy, args.runs, args.figure, args.keep)
    _emit(result, _ab.format_report(result), args.json)
    return code


def _policy_name(text: str) -> str:
    try:
        return _policy.check(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _targets(text: str) -> frozenset[str]:
    try:
        return _env.parse_disabled(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a device index (0, 1, ...), got {text!r}")
    return int(text)


def _shape(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected N,K as two positive integers, e.g. 4096,4096; got {text!r}")
    return int(parts[0]), int(parts[1])


def _json_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--json", nargs="?", const="-", metavar="PATH",
                         help="the full record as JSON: on stdout (text to stderr), or written to PATH")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cleanflush",
        description="Make GPU kernel benchmarks start from a cold and clean L2. "
                    f"{ENV_VAR}=1 turns it on for a program and its children without a code change.",
        epilog="exit codes: 0 success, 1 check failed, 2 usage error, 3 cannot run here")
    parser.add_argument("-V", "--version", action="version", version=f"cleanflush {cleanflush.__version__}")
    commands = parser.add_subparsers(dest="name", required=True, metavar="COMMAND")

    status = commands.add_parser(
        "status", help="what a program started from this shell would get (no GPU needed)",
        description="What a Python program started from this shell would get: the policy CLEANFLUSH "
                    "asks for, whether the autoload is installed in this interpreter, and per target the "
                    "installed version, whether it would be patched and why not.")
    _json_option(status)
    status.add_argument("--check", nargs="?", const="all", metavar="TARGETS",
                        help="exit 1 when the settings are invalid or an installed target cannot be patched; "
                             "TARGETS (comma-separated parts of target names, e.g. CudaDriver,InductorBenchmarker) "
                             "limits it to those")

    run = commands.add_parser(
        "run", help="run a command with cleanflush on, in it and every Python child",
        description="Check the policy, then replace this process with COMMAND, run with CLEANFLUSH set: "
                    "every Python process it starts is patched from its first import of torch or triton.",
        usage="cleanflush run [--policy P] [--report FILE] [--disable TARGETS] -- COMMAND [ARGS...]")
    run.add_argument("--policy", type=_policy_name, default=_policy.DEFAULT_POLICY,
                     help=f"{', '.join(_policy.POLICIES)} (default {_policy.DEFAULT_POLICY})")
    run.add_argument("--report", metavar="FILE", help=f"each process that flushed appends a JSON line ({REPORT_VAR})")
    run.add_argument("--disable", type=_targets, metavar="TARGETS",
                     help=f"comma-separated targets to keep stock: {', '.join(_env.TARGET_NAMES)} ({DISABLE_VAR})")
    run.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    ab = commands.add_parser(
        "ab", help="run a command with the stock flush and with a clean one; show which autotuning "
                   "decisions the dirty flush changed",
        description="Run COMMAND with the stock flush and with a clean policy (RUNS times each, interleaved), "
                    "each run with fresh private Triton and Inductor caches so that it really tunes; record "
                    "every autotuning decision (Triton's Autotuner, Inductor's max-autotune), workers included; "
                    "report which decisions changed and what the stock pick costs by the clean timing.",
        usage="cleanflush ab [--policy P] [--runs N] [--figure PNG] [--json [PATH]] [--keep DIR] -- COMMAND [ARGS...]",
        epilog="exit codes: 0 every run succeeded, 1 a run of the command failed, 2 usage error")
    ab.add_argument("--policy", type=_policy_name, default=_policy.DEFAULT_POLICY,
                    help=f"the clean side: write-read or read (default {_policy.DEFAULT_POLICY})")
    ab.add_argument("--runs", type=_positive, default=1, help="runs of each side, interleaved (default 1)")
    ab.add_argument("--figure", metavar="PNG", help="draw the comparison (needs matplotlib)")
    ab.add_argument("--keep", metavar="DIR", help="keep each run's decisions and caches in DIR (default: a temp dir)")
    _json_option(ab)
    ab.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    verify = commands.add_parser(
        "verify", help="time a one-row GEMM stock vs patched on this GPU and say whether the patch took effect",
        epilog="exit codes: 0 PASS or NO-PENALTY, 1 FAIL, 2 usage error, 3 cannot run here (no CUDA GPU, "
               "no torch or triton)")
    verify.add_argument("--shape", type=_shape, default=(4096, 4096), metavar="N,K",
                        help="weight shape N,K of F.linear(x[1,K], W[N,K]) (default 4096,4096)")
    verify.add_argument("--dtype", choices=_verify.DTYPES, default="bfloat16", help="(default bfloat16)")
    verify.add_argument("--device", type=_non_negative, default=0, help="CUDA device index (default 0)")
    verify.add_argument("--rounds", type=_positive, default=5, help="interleaved rounds (default 5)")
    verify.add_argument("--ncu", action="store_true",
                        help="also measure the timed GEMM's DRAM write bytes with Nsight Compute")
    verify.add_argument("--controls", action="store_true",
                        help="also time deliberately broken flushes, which must be judged FAIL, next to "
                             "write-read and read, which must PASS: shows that the verdict means something here")
    _json_option(verify)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.name == "verify":
        n, k = args.shape
        return _verify.run(_verify.Options(n=n, k=k, dtype=args.dtype, device=args.device, rounds=args.rounds,
                                           ncu=args.ncu, controls=args.controls, json_path=args.json))
    if args.name == "run":
        return _run(args, parser)
    if args.name == "ab":
        return _ab_command(args, parser)
    return _status(args)


if __name__ == "__main__":
    sys.exit(main())
