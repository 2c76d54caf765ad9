"""``cleanflush verify``: does the patch take effect on this GPU (``_verify``)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

from .._verify import DTYPES, CannotRun, Options, measure, report, verdict
from .._verify.measure import PRESETS
from ._output import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_OK, EXIT_USAGE, emit, json_option, output_problem
from .ab import positive


def _devices(text: str) -> str:
    parts = text.split(",")
    if text != "all" and not all(part.isascii() and part.isdigit() for part in parts):  # "¹" is a digit too
        raise argparse.ArgumentTypeError(f"expected a device index (0, 1, ...), indices like 0,2, or all; got {text!r}")
    return text


def _shape(text: str) -> tuple[int, int]:
    # N,K, or NxK as verify's output and the presets print shapes
    parts = text.replace("x", ",").split(",")
    if len(parts) != 2 or not all(p.strip().isascii() and p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected N,K (or NxK) as two positive integers, e.g. 4096,4096 or 4096x4096; got {text!r}"
        )
    return int(parts[0]), int(parts[1])


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    verify = commands.add_parser(
        "verify",
        help="time a one-row GEMM stock vs patched on this GPU and say whether the patch took effect",
        epilog="exit codes: 0 PASS or NO-PENALTY, 1 FAIL, 2 usage error, 3 cannot run here (no CUDA GPU, "
        "no torch or triton)",
    )
    verify.add_argument(
        "--shape",
        type=_shape,
        action="append",
        metavar="N,K",
        help="weight shape N,K (or NxK) of F.linear(x[1,K], W[N,K]); repeat it for several (default 4096,4096)",
    )
    verify.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="a named set of shapes: "
        + "; ".join(f"{k}: {' '.join(f'{n}x{kk}' for n, kk in v)}" for k, v in PRESETS.items()),
    )
    verify.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="(default bfloat16)")
    verify.add_argument(
        "--device",
        type=_devices,
        default="0",
        help="CUDA device index, indices like 0,2, or all: one row per device, one after another (default 0)",
    )
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
    return verify


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    problem = output_problem(args.json)
    if problem:
        print(f"cleanflush verify: {problem}", file=sys.stderr)
        return EXIT_USAGE
    start = time.perf_counter()
    try:
        records = _judged_records(args, start)
    except CannotRun as exc:
        print(f"cleanflush verify: cannot run here: {exc}", file=sys.stderr)
        if args.json:
            emit(
                {"schema": verdict.SCHEMA, "result": "CANNOT-RUN", "reason": str(exc), "exit_code": EXIT_CANNOT_RUN},
                "",
                args.json,
            )
        return EXIT_CANNOT_RUN
    elapsed = round(time.perf_counter() - start, 1)
    if len(records) == 1:
        [record] = records
        judged = record["verdict"]
        if "candidates" in judged:
            text = report.format_controls(record, judged)
        else:
            text = report.format_report(record, judged)
        record["elapsed_s"] = elapsed
        emit(record, text, args.json)
        return int(judged["exit_code"])
    overall = verdict.overall([r["verdict"]["result"] for r in records])
    data = {
        "schema": verdict.SCHEMA,
        "records": records,
        "verdict": {"result": overall, "exit_code": _code(overall)},
        "elapsed_s": elapsed,
    }
    emit(data, report.format_summary(records, overall), args.json)
    return _code(overall)


def _judged_records(args: argparse.Namespace, start: float) -> list[verdict.Record]:
    """One measured and judged record per device and shape; CannotRun where nothing can be measured."""
    shapes = list(dict.fromkeys((args.shape or []) + list(PRESETS.get(args.preset or "", ())))) or [(4096, 4096)]

    def progress(step: str) -> None:
        print(f"[{time.perf_counter() - start:5.1f} s] {step}", file=sys.stderr, flush=True)

    judge = verdict.judge_controls if args.controls else verdict.judge
    records: list[verdict.Record] = []
    for device in measure.devices(args.device):
        for n, k in shapes:
            label = f"cuda:{device}, {n} x {k} {args.dtype}" if len(shapes) > 1 or args.device != "0" else None
            options = Options(n, k, args.dtype, device, args.rounds, args.ncu, args.controls, args.json)
            record = measure.measure(options, _labelled(progress, label))
            judged = judge(record)
            judged["exit_code"] = _code(judged["result"])
            record["verdict"] = judged
            records.append(record)
    return records


def _labelled(progress: Callable[[str], None], label: str | None) -> Callable[[str], None]:
    """``progress``, with ``label`` said before the first step: once the GEMM can run there
    (a device that cannot is said in one line, with no label before it)."""
    pending = [label] if label else []

    def step(text: str) -> None:
        while pending:
            progress(pending.pop())
        progress(text)

    return step


def _code(result: str) -> int:
    return EXIT_OK if result in verdict.PASSING else EXIT_FAIL
