"""What cleanflush adds to each launch of an autotuned kernel, on CPU: ``python -m benchmarks.launch``.

``import cleanflush`` wraps Triton's ``Autotuner.run``, which runs at every launch of an
``@triton.autotune`` kernel, tuned or served from its cache.  A served launch is the one a
program repeats (a decoding loop without CUDA graphs), so it must cost little more than
Triton's own.  Each variant is a fresh interpreter that times ``CALLS`` served calls of a real
``@triton.autotune`` kernel ``ROUNDS`` times (the median of the rounds' ns a call), interleaved
round by round with the others:

* ``triton alone``: cleanflush not imported (the baseline);
* ``cleanflush, fastest``: imported, the autotuner's own pick (the default);
* ``cleanflush, stable``: under ``CLEANFLUSH_PICK=stable``;
* ``stable, pick file``: with ``CLEANFLUSH_PICK_FILE`` too (the cache is seen, so its
  lookups pass cleanflush's hooks);
* ``stable, 2 ranks``: rank 0 of a 2-rank gloo job, where the job's store agrees picks.

The kernel's own launch is a no-op here (the JIT function's ``run`` replaced: a launch needs a
GPU), so a row is the autotuner's dispatch alone; a real launch adds the same to each variant.
Each child (benchmarks/jobs/served_launch.py, which imports nothing of cleanflush's unless
asked) checks that no call tuned: its ``_bench`` raises.

Results: <out>/launch.csv (one row per process) and launch.json (medians, added ns, machine).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from .common import RESULTS, Results, progress
from .jobs import served_launch

VARIANTS: dict[str, dict[str, str]] = {
    "triton alone": {},
    "cleanflush, fastest": {"LAUNCH_CLEANFLUSH": "1"},
    "cleanflush, stable": {"LAUNCH_CLEANFLUSH": "1", "CLEANFLUSH_PICK": "stable"},
    "stable, pick file": {"LAUNCH_CLEANFLUSH": "1", "CLEANFLUSH_PICK": "stable", "CLEANFLUSH_PICK_FILE": "{picks}"},
    "stable, 2 ranks": {"LAUNCH_CLEANFLUSH": "1", "CLEANFLUSH_PICK": "stable", "RANKS": "2"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _one(settings: dict[str, str], picks: Path) -> float:
    """ns a served call, in a fresh interpreter (rank 0's, for a job of ranks)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANFLUSH")}
    env.update({k: v.format(picks=picks) for k, v in settings.items() if k != "RANKS"})
    ranks = int(settings.get("RANKS", "1"))
    if ranks > 1:
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(ranks))
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.jobs.served_launch"],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for r in range(ranks)
    ]
    outputs = [child.communicate(timeout=600) for child in children]
    for child, (_, err) in zip(children, outputs, strict=True):
        if child.returncode:
            raise RuntimeError(err.decode()[-2000:])
    return float(outputs[0][0].decode().split()[-1])


def run(out: Path, processes: int = 12) -> Path:
    results = Results(out, "launch")
    picks = out / "launch-picks.json"
    progress(f"{len(VARIANTS)} variants x {processes} fresh processes, interleaved")
    for i in range(processes):
        for name, settings in VARIANTS.items():
            results.add(variant=name, process=i, ns_a_call=_one(settings, picks))
    picks.unlink(missing_ok=True)

    def times(name: str) -> list[float]:
        return [r["ns_a_call"] for r in results.rows if r["variant"] == name]

    base = times("triton alone")
    median = {name: statistics.median(times(name)) for name in VARIANTS}
    # pair by pair: the processes of one index ran side by side
    added = {name: statistics.median(a - b for a, b in zip(times(name), base, strict=True)) for name in VARIANTS}
    noise = statistics.median(abs(a - b) for a, b in zip(base[1:], base[:-1], strict=False))
    import triton

    summary: dict[str, Any] = {
        "processes": processes,
        "calls": served_launch.CALLS,
        "rounds": served_launch.ROUNDS,
        "cpus": os.cpu_count(),
        "triton": triton.__version__,
        "ns_a_call": median,
        "added_ns": {name: added[name] for name in VARIANTS if name != "triton alone"},
        "baseline_noise_ns": noise,  # the median step between successive baseline processes
    }
    path = results.write(**summary)
    print(json.dumps(summary, indent=1))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.launch", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "cpu")
    parser.add_argument("--processes", type=int, default=12)
    args = parser.parse_args(argv)
    run(args.out, args.processes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
