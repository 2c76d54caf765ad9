"""``cleanflush verify``: prove on this GPU that the patch took effect, with evidence that
does not share code with the flush it judges.

It reruns the write-up's kernel (F.linear with one input row and an N x K weight) and
times it, interleaved over rounds in one process, through ``triton.testing.do_bench`` and
Inductor's benchmarker under the stock flush and under the active policy, beside a plain
read loop and a rotating-weight CUDA graph.  ``--controls`` adds deliberately broken
flushes that must be judged FAIL.

The pieces: ``probe`` (the machine), ``measure`` (the GPU work), ``verdict`` (plain
Python over the record), ``report`` (the text), ``controls`` (the flushes to time).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from . import report, verdict
from .measure import DTYPES, CannotRun, Options
from .verdict import EXIT_CANNOT_RUN, EXIT_FAIL, EXIT_PASS, EXIT_USAGE, SCHEMA

__all__ = ["DTYPES", "EXIT_CANNOT_RUN", "EXIT_FAIL", "EXIT_PASS", "EXIT_USAGE", "Options", "run"]


def _writable(path: str) -> str | None:
    """Why ``path`` cannot take the JSON record, or None.  Checked before measuring."""
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        return f"cannot write --json {path!r}: {exc.strerror or exc}"
    return None


def _write_json(path: str | None, data: dict[str, Any]) -> None:
    if path == "-":
        print(json.dumps(data, indent=2))
    elif path:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2)


def run(options: Options) -> int:
    from . import measure

    start = time.perf_counter()

    def progress(step: str) -> None:
        print(f"[{time.perf_counter() - start:5.1f} s] {step}", file=sys.stderr, flush=True)

    if options.json_path not in (None, "-") and (problem := _writable(options.json_path)):
        print(f"cleanflush verify: {problem}", file=sys.stderr)
        return EXIT_USAGE
    try:
        record = measure.measure(options, progress)
    except CannotRun as exc:
        print(f"cleanflush verify: cannot run here: {exc}", file=sys.stderr)
        _write_json(options.json_path, {"schema": SCHEMA, "result": "CANNOT-RUN", "reason": str(exc),
                                        "exit_code": EXIT_CANNOT_RUN})
        return EXIT_CANNOT_RUN
    if options.controls:
        judged = verdict.judge_controls(record)
        text = report.format_controls(record, judged)
    else:
        judged = verdict.judge(record)
        text = report.format_report(record, judged)
    record["verdict"] = judged
    record["elapsed_s"] = round(time.perf_counter() - start, 1)
    print(text, file=sys.stderr if options.json_path == "-" else sys.stdout)  # stdout holds the JSON then
    _write_json(options.json_path, record)
    return int(judged["exit_code"])
