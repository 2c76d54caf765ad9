"""python -m benchmarks <study> [--out DIR]: run one study (or ``all``) on this GPU.

Studies: writeback, methods, readkernel, cost, latency, synced, autotune, budget, verdicts, residual,
hosttime; ``all`` runs them in that order and draws the figures; ``plot`` draws the figures from
existing results and ``quoted`` renders the numbers README.md and docs quote from them (neither
needs a GPU).
Progress goes to stderr; results to DIR/<study>.csv and .json, figures to DIR/<study>.png.
"""

from __future__ import annotations

import os

# Kineto keeps CUPTI attached after a profiling session unless told so before torch loads
# (pytorch/pytorch#144455): every later launch is then slower, the host bounds the loops that
# a read's hold waits on, and do_bench takes fewer samples.  Studies that profile need it.
os.environ.setdefault("TEARDOWN_CUPTI", "1")

import argparse
import inspect
import sys
import time
import traceback
from pathlib import Path

from .common import RESULTS, progress

STUDIES = (
    "writeback",
    "methods",
    "readkernel",
    "cost",
    "latency",
    "synced",
    "autotune",
    "budget",
    "verdicts",
    "residual",
    "hosttime",
)


def _shapes(text: str) -> list[tuple[int, int]]:
    try:
        return [(int(a), int(b)) for a, b in (s.split("x") for s in text.split(","))]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected shapes like 4096x4096,28672x4096, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.split("\n")[0])
    parser.add_argument("study", choices=STUDIES + ("all", "plot", "quoted"))
    parser.add_argument("--check", action="store_true", help="quoted: only say which pages differ (exit 1)")
    parser.add_argument("--skip", default="", help="with all: studies to leave out, comma-separated")
    parser.add_argument(
        "--out", type=Path, default=None, help="results folder (default: benchmarks/results/<gpu>, e.g. results/h200)"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shapes", type=_shapes, default=None, help="override the shapes, e.g. 4096x4096,28672x4096")
    parser.add_argument("--rounds", type=int, default=None, help="override the number of interleaved rounds")
    parser.add_argument("--processes", type=int, default=None, help="methods: independent processes (default 5)")
    parser.add_argument("--seconds", type=float, default=None, help="verdicts: no new record after (default 420)")
    args = parser.parse_args(argv)

    if args.study == "methods" and args.worker:
        from . import methods

        methods.worker(args.shapes, args.rounds)
        return 0
    if args.study == "plot":
        return _plot(args.out, parser)
    if args.study == "quoted":
        from . import quoted

        return quoted.main(check=args.check)
    out = args.out or RESULTS / _gpu_folder()

    import cleanflush

    cleanflush.install()  # as `import cleanflush` does; the studies toggle it for their stock rows

    t0 = time.perf_counter()
    failed: list[str] = []
    skip = {s for s in args.skip.split(",") if s}
    if skip - set(STUDIES):
        parser.error(f"--skip takes {', '.join(STUDIES)}; got {', '.join(sorted(skip - set(STUDIES)))}")
    options = {"shapes": args.shapes, "rounds": args.rounds, "processes": args.processes, "seconds": args.seconds}
    for study in [s for s in STUDIES if s not in skip] if args.study == "all" else [args.study]:
        module = __import__(f"benchmarks.{study}", fromlist=["run"])
        # each option goes to the studies that take it (latency has fixed shapes, writeback no rounds)
        accepted = inspect.signature(module.run).parameters
        kwargs = {name: value for name, value in options.items() if value is not None and name in accepted}
        progress(f"{study}: results go to {out}")
        try:
            module.run(out, **kwargs)
        except Exception:  # one broken study must not cost the others their device time
            traceback.print_exc()
            failed.append(study)
            continue
        try:
            from . import plots

            if study in plots.FIGURES:
                plots.FIGURES[study](out)
        except ImportError:
            progress("matplotlib is not installed: no figure (python -m benchmarks plot draws them later)")
    progress(f"done in {time.perf_counter() - t0:.0f} s" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _plot(out: Path | None, parser: argparse.ArgumentParser) -> int:
    """Redraw the figures of one results folder (``--out``), or of every one, in place; no GPU needed."""
    if out is not None and not out.is_dir():
        parser.error(f"--out {str(out)!r} is not a folder")
    folders = [out] if out is not None else sorted(p for p in RESULTS.glob("*") if p.is_dir())
    if not folders:
        print(
            f"python -m benchmarks plot: no results folder in {RESULTS} (the sdist leaves the study data "
            "out; a checkout has it)",
            file=sys.stderr,
        )
        return 1
    from . import plots

    try:
        drawn = [path for folder in folders for path in plots.plot_all(folder)]
    except ImportError:
        print('python -m benchmarks plot: needs matplotlib (pip install -e ".[bench]")', file=sys.stderr)
        return 2
    for path in drawn:
        print(f"drew {path}")
    if not drawn:
        print(
            f"python -m benchmarks plot: no study results (*.json) in {', '.join(map(str, folders))}", file=sys.stderr
        )
    return 0 if drawn else 1


def _gpu_folder() -> str:
    """results/<gpu>: 'h200' for 'NVIDIA H200', else the name in lower case with dashes."""
    try:
        import torch

        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except ImportError:
        name = "cpu"
    return name.lower().replace("nvidia ", "").replace(" ", "-")


if __name__ == "__main__":
    sys.exit(main())
