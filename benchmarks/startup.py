"""What cleanflush costs a process that starts, on CPU: ``python -m benchmarks.startup``.

Every variant runs as a fresh interpreter of this Python (with cleanflush installed in it),
interleaved pair by pair with its baseline, bytecode caches warm:

* ``python -c pass`` with ``CLEANFLUSH`` unset, ``0`` and ``1``: wall time and peak RSS;
  the goal is within 1 ms of unset for both ``0`` and ``1`` (the autoload waits for torch
  or triton before it imports cleanflush or wrapt);
* ``-X importtime`` of that start: what the autoload imported, and for how long;
* in a process that has imported torch, ``import cleanflush`` against ``import wrapt``
  (each timed in-process around the import alone): the goal is at most 5 ms more;
* ``python -c "import torch"`` with ``CLEANFLUSH=1`` against unset: where the deferred cost
  lands;
* ``cleanflush status`` against ``python -c "import torch"`` (both ``CLEANFLUSH`` unset): the
  goal is at most 1.5 s more (status imports what the core targets need, torch among them).

Results: <out>/startup.csv (one row per process) and startup.json (medians, goals, machine).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import RESULTS, Results, progress

PEAK = "import resource, sys; print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)"
# the import alone, timed in-process after torch is loaded
AFTER_TORCH = "import torch, time; t = time.perf_counter(); import {module}; print((time.perf_counter() - t) * 1e3)"


def _env(value: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEANFLUSH") and k != "PYTHONDONTWRITEBYTECODE"}
    if value is not None:
        env["CLEANFLUSH"] = value
    return env


def _run(code: str, value: str | None) -> tuple[float, int, str]:
    """(wall ms, peak RSS KiB, stdout) of one fresh interpreter running ``code``."""
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\n{PEAK}"], env=_env(value), capture_output=True, text=True, timeout=300
    )
    wall = (time.perf_counter() - t) * 1e3
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return wall, int(out.stderr.strip().splitlines()[-1]), out.stdout.strip()


def _status() -> float:
    """Wall ms of one ``cleanflush status`` in a fresh interpreter, ``CLEANFLUSH`` unset (its
    stdout is not a terminal, so no progress lines), timed from outside like the others."""
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "cleanflush", "status"], env=_env(None), capture_output=True, text=True, timeout=300
    )
    wall = (time.perf_counter() - t) * 1e3
    if out.returncode:
        raise RuntimeError(out.stderr[-2000:])
    return wall


def spread(values: list[float]) -> dict[str, float]:
    """The median of ``values`` and their spread: lowest, quartiles, highest."""
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": median, "min": min(values), "q1": q1, "q3": q3, "max": max(values)}


def importtime(value: str | None) -> list[tuple[str, int]]:
    """(module, cumulative us) for every module imported at start that is ours or wrapt's."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"], env=_env(value), capture_output=True, text=True, timeout=60
    )
    rows = []
    for line in out.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2].strip().startswith(("cleanflush", "_cleanflush_boot", "wrapt")):
            rows.append((parts[2].strip(), int(parts[1])))
    return rows


STATUS_OVER_TORCH_MS = 1500.0


def _probe_modules() -> list[str]:
    """The modules status imports for the core targets' rows (their ``probe``), where installed."""
    from cleanflush import _registry, _targets

    return [m for t in _registry.TARGETS if t.probe and _targets.version(t) is not None for m in t.probe]


def _status_against_torch(results: Results, pairs: int) -> dict[str, Any]:
    """``cleanflush status`` against ``import torch``, interleaved pair by pair with the
    imports status makes alone (where its time goes): each one's median and spread, and those
    of status's differences from ``import torch`` pair by pair."""
    progress(f"cleanflush status / its imports alone / python -c 'import torch' x {pairs}, interleaved")
    modules = _probe_modules()
    probe = "".join(f"import {m}\n" for m in modules)
    _status()  # the bytecode caches of what status imports, before anything is timed
    measure = "status against import torch"
    for i in range(pairs):
        for variant, timed in (
            ("import torch", lambda: _run("import torch", None)[0]),
            ("the probe's imports alone", lambda: _run(probe, None)[0]),
            ("cleanflush status", _status),
        ):
            results.add(measure=measure, variant=variant, pair=i, ms=timed())

    def times(variant: str) -> list[float]:
        return [r["ms"] for r in results.rows if r["measure"] == measure and r["variant"] == variant]

    status, imports, torch = times("cleanflush status"), times("the probe's imports alone"), times("import torch")
    over = spread([s - t for s, t in zip(status, torch, strict=True)])
    return {
        "pairs": pairs,
        "probe_imports": modules,
        "status_ms": spread(status),
        "probe_imports_ms": spread(imports),
        "import_torch_ms": spread(torch),
        "status_over_import_torch_ms": over,
        "probe_imports_over_import_torch_ms": spread([m - t for m, t in zip(imports, torch, strict=True)]),
        "within_goal": over["median"] <= STATUS_OVER_TORCH_MS,
    }


def run(out: Path, pairs: int = 40) -> Path:
    results = Results(out, "startup")
    for value in (None, "0", "1"):
        _run("pass", value)  # write the bytecode caches before anything is timed
    variants = {"unset": None, "0": "0", "1": "1"}
    progress(f"python -c pass x {pairs} per CLEANFLUSH value, interleaved")
    for i in range(pairs):
        for name, value in variants.items():
            wall, rss, _ = _run("pass", value)
            results.add(measure="start", variant=f"CLEANFLUSH {name}", pair=i, ms=wall, peak_kib=rss)
    progress(f"import cleanflush / import wrapt after torch x {pairs // 2}, interleaved")
    for i in range(pairs // 2):
        for module in ("wrapt", "cleanflush"):
            wall, rss, printed = _run(AFTER_TORCH.format(module=module), None)
            results.add(measure="import after torch", variant=module, pair=i, ms=float(printed), peak_kib=rss)
    progress(f"python -c 'import torch' x {pairs // 4} per value, interleaved")
    for i in range(pairs // 4):
        for name, value in (("unset", None), ("1", "1")):
            wall, rss, _ = _run("import torch", value)
            results.add(measure="import torch", variant=f"CLEANFLUSH {name}", pair=i, ms=wall, peak_kib=rss)
    status = _status_against_torch(results, pairs // 4)

    def med(measure: str, variant: str, key: str = "ms") -> float:
        return statistics.median(r[key] for r in results.rows if r["measure"] == measure and r["variant"] == variant)

    start = {name: med("start", f"CLEANFLUSH {name}") for name in variants}
    rss = {name: med("start", f"CLEANFLUSH {name}", "peak_kib") for name in variants}
    after = {m: med("import after torch", m) for m in ("wrapt", "cleanflush")}
    torch_ms = {name: med("import torch", f"CLEANFLUSH {name}") for name in ("unset", "1")}
    import wrapt

    summary = {
        "pairs": pairs,
        "wrapt": getattr(wrapt, "__version__", None),
        "cpus": os.cpu_count(),
        "start_ms": start,
        "start_peak_kib": rss,
        "start_extra_ms": {name: start[name] - start["unset"] for name in ("0", "1")},
        "importtime_us": {name: importtime(value) for name, value in variants.items()},
        "import_after_torch_ms": after,
        "cleanflush_over_wrapt_ms": after["cleanflush"] - after["wrapt"],
        "import_torch_ms": torch_ms,
        "status_against_import_torch": status,
        "goals": {
            "start_extra_ms_at_most": 1.0,
            "cleanflush_over_wrapt_ms_at_most": 5.0,
            "status_over_import_torch_ms_at_most": STATUS_OVER_TORCH_MS,
        },
    }
    path = results.write(**summary)
    print(json.dumps(summary, indent=1))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.startup", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS / "cpu")
    parser.add_argument("--pairs", type=int, default=40)
    args = parser.parse_args(argv)
    run(args.out, args.pairs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
