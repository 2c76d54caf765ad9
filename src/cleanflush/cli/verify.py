"""``cleanflush verify``: does the patch take effect on this GPU (``_verify``)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from .._verify import DTYPES, CannotRun, Options, measure, report, verdict
from ._output import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_OK, EXIT_USAGE, emit, json_option, output_problem
from .ab import positive


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a device index (0, 1, ...), got {text!r}")
    return int(text)


def _shape(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected N,K as two positive integers, e.g. 4096,4096; got {text!r}")
    return int(parts[0]), int(parts[1])


def add_parser(commands: Any) -> None:
    verify = commands.add_parser(
        "verify",
        help="time a one-row GEMM stock vs patched on this GPU and say whether the patch took effect",
        epilog="exit codes: 0 PASS or NO-PENALTY, 1 FAIL, 2 usage error, 3 cannot run here (no CUDA GPU, "
        "no torch or triton)",
    )
    verify.add_argument(
        "--shape",
        type=_shape,
        default=(4096, 4096),
        metavar="N,K",
        help="weight shape N,K of F.linear(x[1,K], W[N,K]) (default 4096,4096)",
    )
    verify.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="(default bfloat16)")
    verify.add_argument("--device", type=_non_negative, default=0, help="CUDA device index (default 0)")
    verify.add_argument("--rounds", type=positive, default=5, help="interleaved rounds (default 5)")
    verify.add_argument(
        "--ncu", action="store_true", help="also measure the timed GEMM's DRAM write bytes with Nsight Compute"
    )
    verify.add_argument(
        "--controls",
        action="store_true",
        help="also time deliberately broken flushes, which must be judged FAIL, next to "
        "write-read and read, which must PASS: shows that the verdict means something here",
    )
    json_option(verify)


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    problem = output_problem(args.json)
    if problem:
        print(f"cleanflush verify: {problem}", file=sys.stderr)
        return EXIT_USAGE
    n, k = args.shape
    options = Options(
        n=n,
        k=k,
        dtype=args.dtype,
        device=args.device,
        rounds=args.rounds,
        ncu=args.ncu,
        controls=args.controls,
        json_path=args.json,
    )
    start = time.perf_counter()

    def progress(step: str) -> None:
        print(f"[{time.perf_counter() - start:5.1f} s] {step}", file=sys.stderr, flush=True)

    try:
        record = measure.measure(options, progress)
    except CannotRun as exc:
        print(f"cleanflush verify: cannot run here: {exc}", file=sys.stderr)
        if args.json:
            emit(
                {"schema": verdict.SCHEMA, "result": "CANNOT-RUN", "reason": str(exc), "exit_code": EXIT_CANNOT_RUN},
                "",
                args.json,
            )
        return EXIT_CANNOT_RUN
    if options.controls:
        judged = verdict.judge_controls(record)
        text = report.format_controls(record, judged)
    else:
        judged = verdict.judge(record)
        text = report.format_report(record, judged)
    code = EXIT_OK if judged["result"] in verdict.PASSING else EXIT_FAIL
    record["verdict"] = {**judged, "exit_code": code}
    record["elapsed_s"] = round(time.perf_counter() - start, 1)
    emit(record, text, args.json)
    return code
