"""End to end for ``cleanflush ab``: the compiled programs each run produced, timed in one process.

Inductor writes every graph it compiles as a Python module (its output code) into the run's
private cache folder, and the module carries its own benchmark entry: ``get_args()`` makes
inputs of the graph's shapes, ``call(args)`` runs the program.  ``time_programs`` loads the
programs of every run, matches a graph across runs by its inputs (shapes, strides, dtypes,
in the order compiled), lets each program tune its kernels' configs on its first call under
its run's flush and pick rule (as the job itself did), then times all of them interleaved:
back-to-back calls with no flush between them, measured by CUDA events (the host clock
without a GPU).
The timer shares no code with the flush under test.

``_ab.run`` calls ``main`` in a process of its own (arguments: SPEC.json OUT.json); needs torch.
"""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from .._pick import FASTEST
from .._stats import quartiles
from .records import EndToEnd, Graph, Loaded, ProgramRun, RatioSummary, Summary

MARK = "def benchmark_compiled_module("  # what makes a module Inductor's output code, not a kernel
REPS = 21  # timed samples of each program
SAMPLE_S = 0.002  # back-to-back calls per sample: enough to fill this much time
SLOWER, FASTER, WITHIN_NOISE, UNKNOWN = "slower", "faster", "within noise", "unknown"


def find(folder: str, problems: list[str] | None = None) -> list[str]:
    """The compiled programs (Inductor output code) under ``folder``, in the order written; a
    ``.py`` file that cannot be read (a dangling link) is left out, and named in ``problems``."""
    found = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(root, name)
            if not name.endswith(".py"):
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    if MARK in f.read():
                        found.append((os.path.getmtime(path), path))
            except OSError as exc:
                if problems is not None:
                    problems.append(f"{path}: cannot read ({exc.strerror or exc})")
    return [path for _, path in sorted(found)]


def _signature(args: list[Any]) -> str:
    parts = []
    for a in args:
        if hasattr(a, "shape") and hasattr(a, "stride"):
            parts.append(f"{str(a.dtype).replace('torch.', '')}{list(a.shape)}{list(a.stride())}@{a.device.type}")
        else:
            parts.append(repr(a))
    return ", ".join(parts)


def _fresh_kernels() -> str | None:
    """Make the next program load kernels of its own: Inductor caches compiled kernels by
    their source in memory, and two programs sharing a kernel would share its tuning."""
    from torch._inductor import utils

    clear = getattr(utils, "clear_caches", None) or getattr(utils, "clear_inductor_caches", None)
    if clear is None:
        return "this torch has no way to clear Inductor's kernel caches: kernels of the same source share one tuning"
    clear()
    return None


def _load(path: str, index: int) -> Any:
    spec = importlib.util.spec_from_file_location(f"cleanflush_ab_program_{index}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Clock:
    """Seconds of ``calls`` back-to-back calls of ``fn``: CUDA events on a GPU program."""

    def __init__(self, cuda: bool) -> None:
        import torch

        self.torch, self.cuda = torch, cuda

    def __call__(self, fn: Callable[[], Any], calls: int) -> float:
        torch = self.torch
        if not self.cuda:
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            return (time.perf_counter() - start) / calls
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        return float(begin.elapsed_time(end)) / 1e3 / calls


def time_programs(runs: list[ProgramRun], reps: int = REPS, sample_s: float = SAMPLE_S) -> EndToEnd:
    """Time every graph that every run compiled; ``runs``: [{"side", "paths", "policy",
    "pick"}], a side being the label of the flush or pick rule its runs tuned under, the stock
    (or ``fastest``) side first.

    Per graph and repetition, a side's time is the median over its runs' programs; the
    stock/clean ratio is summarised over the repetitions (q1, median, q3).  ``same_side``
    says how far programs tuned under the same flush are from each other (slowest over
    fastest, minus one): the noise ``judge`` holds a stock/clean difference against.  Only
    one graph's inputs are alive at a time, so a job whose weights fill half the GPU can be
    timed with several runs a side.
    """
    problems: list[str] = []
    programs = _load_programs(runs, problems)
    sides = list(dict.fromkeys(run["side"] for run in runs))
    graphs: list[Graph] = []
    for number, (graph, found) in enumerate(programs.items(), 1):
        if sorted(p["run"] for p in found) != list(range(len(runs))):
            problems.append(f"graph {number} ({graph}) was not compiled by every run: not timed")
            continue
        samples = _time_graph(found, reps, sample_s)
        graphs.append(
            Graph(
                name=f"graph {number}",
                inputs=graph,
                programs={s: [p["path"] for p in found if runs[p["run"]]["side"] == s] for s in sides},
                **_summary({s: [ps for p, ps in zip(found, samples) if runs[p["run"]]["side"] == s] for s in sides}),
            )
        )
    record = EndToEnd(sides=sides, graphs=graphs, problems=problems, reps=reps)
    if graphs:  # the whole job: every graph once per step
        total = {
            s: [
                [sum(col) for col in zip(*(g["program_samples"][s][j] for g in graphs))]
                for j in range(len(graphs[0]["program_samples"][s]))
            ]
            for s in sides
        }
        whole = _summary(total)
        del whole["program_samples"]
        record["total"] = whole
    return record


def _load_programs(runs: list[ProgramRun], problems: list[str]) -> dict[str, list[Loaded]]:
    """graph (its inputs, and which of the run's graphs with them) -> its program in each run,
    each tuned by one call under its run's flush and rule; what cannot load is named in ``problems``."""
    import cleanflush

    programs: dict[str, list[Loaded]] = {}
    for r, run in enumerate(runs):
        seen: Counter[str] = Counter()
        for path in run["paths"]:
            why = _fresh_kernels()
            if why and why not in problems:
                problems.append(why)
            try:
                module = _load(path, sum(map(len, programs.values())))
                args = list(module.get_args())
                signature = _signature(args)
                # the first call tunes its kernels' configs, under the run's flush and rule
                with cleanflush.policy(run.get("policy", run["side"])), cleanflush.pick(run.get("pick", FASTEST)):
                    module.call(list(args))
            except Exception as exc:  # a program that cannot load, make its inputs or run is left out, named
                problems.append(f"{path}: cannot be timed ({type(exc).__name__}: {exc})"[:300])
                continue
            seen[signature] += 1
            cuda = any(getattr(getattr(a, "device", None), "type", None) == "cuda" for a in args)
            del args
            programs.setdefault(f"{signature} #{seen[signature]}", []).append(
                Loaded(run=r, path=path, module=module, cuda=cuda)
            )
    return programs


def _run(module: Any) -> Callable[[], Any]:
    args = module.get_args()
    return lambda: module.call(list(args))


def _time_graph(found: list[Loaded], reps: int, sample_s: float) -> list[list[float]]:
    """Seconds per call of each program, ``reps`` samples each, the programs interleaved."""
    clock = _Clock(any(p["cuda"] for p in found))
    fns = [_run(p["module"]) for p in found]  # inputs made now, freed on return
    for fn in fns:  # warm: allocator, caches, clocks
        clock(fn, 3)
    calls = max(1, min(10_000, round(sample_s / max(clock(fn, 3) for fn in fns))))
    samples: list[list[float]] = [[] for _ in found]
    order = list(range(len(found)))
    for rep in range(reps):
        shift = rep % len(order)
        for i in order[shift:] + order[:shift]:  # every program takes every slot in turn
            samples[i].append(clock(fns[i], calls))
    return samples


def judge(stock: list[float], clean: list[float]) -> str:
    """SLOWER or FASTER (the stock-tuned programs against the clean-tuned ones), WITHIN_NOISE,
    or UNKNOWN with one program a side.  ``stock``, ``clean``: each program's time.

    A difference is claimed only when the sides do not overlap and the gap between them is
    wider than the spread among either side's own programs: programs tuned under the same
    flush differ by re-tuning alone, and that is the noise.  Identical programs pass by
    chance about 1 time in 9 with two runs a side, about 1 in 100 with three (tests check it).
    """
    if len(stock) < 2 or len(clean) < 2:
        return UNKNOWN
    spread = max(max(side) / min(side) - 1 for side in (stock, clean))
    if min(stock) / max(clean) - 1 > spread:
        return SLOWER
    if min(clean) / max(stock) - 1 > spread:
        return FASTER
    return WITHIN_NOISE


def _summary(program_samples: dict[str, list[list[float]]]) -> Summary:
    """``program_samples``: side -> its programs' samples, the stock side first."""
    sides = list(program_samples)
    per_side = {s: [statistics.median(col) for col in zip(*program_samples[s])] for s in sides}
    q1, median, q3 = quartiles(a / b for a, b in zip(per_side[sides[0]], per_side[sides[-1]]))
    programs = {s: [statistics.median(ps) for ps in program_samples[s]] for s in sides}
    return {
        "ms": {s: statistics.median(per_side[s]) * 1e3 for s in sides},
        "ratio": RatioSummary(q1=q1, median=median, q3=q3),
        "program_ms": {s: [t * 1e3 for t in ts] for s, ts in programs.items()},
        "same_side": {s: max(ts) / min(ts) - 1 if len(ts) > 1 else None for s, ts in programs.items()},
        "verdict": judge(programs[sides[0]], programs[sides[-1]]),
        "program_samples": program_samples,
    }


def main(argv: list[str] | None = None) -> int:
    spec_path, out_path = argv if argv is not None else sys.argv[1:]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    record = time_programs(spec["runs"], spec.get("reps", REPS), spec.get("sample_s", SAMPLE_S))
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(record, f)
    return 0
