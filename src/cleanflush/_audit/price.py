"""The audit's pricing process, on the GPU (``_audit.run`` starts it: arguments SPEC.json
OUT.json): per served entry, the clean re-tune of its call and both timers' prices.

1. The recorded call (``_calls.Call``) is loaded, and every config the autotuner offers for it
   is timed by ab's timer (``_ab.prices.kernel_times``: CUPTI's kernel time after a plain read
   of 256 MiB, so L2 is clean and cold) in a first sweep of ``sweep_calls`` calls each; a
   config that cannot run here (out of resources, a failed compile) is left out, and said.
2. Where the search is larger than ``leaders``, it is cut to its fastest ``leaders`` (said in
   the record), and the stable rule (``_pick.stable``) settles near-ties among them: the
   configs within its window timed again together, the first in the autotuner's order within
   the band kept.  That is the clean pick.
3. The shipped config and the clean pick are priced side by side by ab's timer (``rounds``
   rounds of ``calls`` calls, interleaved) and by the graph timer (``_audit.graph``).

Each entry's wall time is kept by step (``seconds``).  Progress goes to stderr; an entry that
cannot be priced gets its reason, and the others go on.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from .. import _pick
from .._ab import prices as ab_prices
from .._calls import Call, kernel_name
from . import graph
from .records import CUPTI, GRAPH, Priced, Settings, ToPrice

SETTINGS = Settings(leaders=8, sweep_calls=5, rounds=5, calls=10, floor=_pick.FLOOR)


def main(argv: list[str] | None = None) -> int:
    spec_path, out_path = argv if argv is not None else sys.argv[1:]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    found = price_all(spec["entries"], spec["calls_folder"], {**SETTINGS, **spec.get("settings", {})})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(found, f)
    return 0


def price_all(entries: list[ToPrice], folder: str, settings: Settings) -> list[Priced]:
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    read = torch.ones(ab_prices.READ_BYTES // 4, dtype=torch.float32, device=device)
    found: list[Priced] = []
    for number, entry in enumerate(entries, 1):
        started = time.monotonic()
        found.append(price_entry(entry, folder, read, settings))
        torch.cuda.empty_cache()
        print(
            f"cleanflush audit: priced entry {number} of {len(entries)} ({time.monotonic() - started:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
    return found


def price_entry(entry: ToPrice, folder: str, read: Any, settings: Settings) -> Priced:
    """One entry's clean pick and prices, or why it has none: whatever its kernel does when it is
    found, made again or launched costs this entry alone."""
    priced, why = ab_prices.contained(lambda: _priced(entry, os.path.join(folder, entry["file"]), read, settings))
    return priced if priced is not None else Priced(id=entry["id"], error=why or "it failed")


def _priced(entry: ToPrice, path: str, read: Any, settings: Settings) -> Priced:
    seconds: dict[str, float] = {}
    lap = _laps(seconds)
    call = Call.load(path, read.device)
    kernel = kernel_name(call)
    lap("load")
    ran, failed = _runnable(call, entry["offered"], read)
    launches = {
        **ran,
        entry["shipped"]: ran.get(entry["shipped"]) or call.launch(entry["shipped"], before_kernel=read.sum),
    }
    launches[entry["shipped"]]()  # compiled and loaded, where the search does not offer it
    lap("compile")
    swept = {label: ts[0] for label, ts in ab_prices.kernel_times(ran, kernel, 1, settings["sweep_calls"]).items()}
    lap("sweep")
    leaders = _leaders(entry["offered"], swept, settings["leaders"])
    picked = _settle(leaders, swept, ran, kernel, settings)
    lap("settle")
    labels = list(dict.fromkeys([entry["shipped"], picked.winner]))
    cupti = ab_prices.as_prices(
        ab_prices.kernel_times(
            {label: launches[label] for label in labels}, kernel, settings["rounds"], settings["calls"]
        )
    )
    lap("cupti")
    served, copies = graph.graph_prices(call, labels, settings["rounds"])
    lap("graph")
    return Priced(
        id=entry["id"],
        kernel=kernel,
        sweep_us=swept,
        failed=failed,
        leaders=leaders,
        pick=picked.line(),
        clean=picked.winner,
        prices={CUPTI: cupti, GRAPH: served},  # type: ignore[dict-item]
        copies=copies,
        seconds=seconds,
    )


def _laps(seconds: dict[str, float]) -> Callable[[str], None]:
    """A stopwatch: each call keeps the wall time since the last under its step's name."""
    last = [time.monotonic()]

    def lap(step: str) -> None:
        now = time.monotonic()
        seconds[step], last[0] = now - last[0], now

    return lap


def _runnable(call: Call, offered: list[str], read: Any) -> tuple[dict[str, Callable[[], None]], list[str]]:
    """The offered configs that run here (each launched once: compiled and loaded), and those that
    cannot: a config whose grid the job never gave, or that fails as Triton's autotuner times a
    failed config (out of resources, a failed compile; read at the installed 3.7.1's
    ``Autotuner._bench``)."""
    errors: tuple[type[BaseException], ...] = (LookupError, *_config_errors())
    ran, failed = {}, []
    for label in offered:
        try:
            launch = call.launch(label, before_kernel=read.sum)
            launch()
        except errors:
            failed.append(label)
            continue
        ran[label] = launch
    if not ran:
        raise RuntimeError(f"none of its {len(offered)} configs runs here")
    return ran, failed


def _config_errors() -> tuple[type[BaseException], ...]:
    """The errors with which Triton's autotuner times a config as failed (those that exist here)."""
    import importlib

    found: list[type[BaseException]] = []
    for module, name in (
        ("triton.runtime.errors", "OutOfResources"),
        ("triton.runtime.errors", "PTXASError"),
        ("triton.compiler.errors", "CompileTimeAssertionFailure"),
        ("triton.compiler.errors", "CompilationError"),
    ):
        found += [e for e in [getattr(importlib.import_module(module), name, None)] if isinstance(e, type)]
    return tuple(found)


def _leaders(offered: list[str], swept: dict[str, float], most: int) -> list[str]:
    """The configs the stable rule settles among: the ``most`` fastest of the sweep where there
    are more, in the autotuner's order."""
    fastest = set(sorted(swept, key=swept.__getitem__)[:most])
    return [label for label in offered if label in fastest]


def _settle(
    leaders: list[str],
    swept: dict[str, float],
    launches: dict[str, Callable[[], None]],
    kernel: str,
    settings: Settings,
) -> _pick.Picked[str]:
    """The stable rule's pick among ``leaders``, from the sweep's times and more of ab's timings."""

    def time_again(label: str) -> float:
        [(_, times)] = ab_prices.kernel_times({label: launches[label]}, kernel, 1, settings["sweep_calls"]).items()
        return times[0] / 1e3

    timings = {label: swept[label] / 1e3 for label in leaders}
    return _pick.stable(leaders, timings, time_again, settings["floor"])
