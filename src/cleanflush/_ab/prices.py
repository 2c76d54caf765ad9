"""Independent prices for ``cleanflush ab``: each pick of a Triton ``@autotune`` decision, timed
again side by side in one process, with a timer that shares no code with the flush.

For every decision to price, the call a run recorded (``_calls``) is made again on the GPU
under each candidate config: the config's pre-hook, the autotuner's hooks, the launch, as
Triton's autotuner times a config.  Between the pre-hooks and the kernel a plain read of a
buffer of this module's own (a float32 ``sum()`` of 256 MiB, at least 2 x L2) leaves L2 clean
and cold, whatever the hooks left in it (``restore_value``'s clones); the kernel's own time is
what CUPTI records (torch's profiler), so neither the flush under test, the hooks nor launch
latency is in it.  Rounds are interleaved (each candidate's ``CALLS`` calls, then
the next, in a rotating order); a candidate's price is the median over the rounds of each
round's median, its range the rounds' lowest and highest.

``_ab.run`` calls ``main`` in a process of its own (arguments: SPEC.json OUT.json); needs a
CUDA GPU.  Progress goes to stderr; a decision that cannot be priced gets its reason and the
others go on.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .._calls import Call, kernel_name
from .records import PickPrice, Price, Prices, ToPrice

ROUNDS = 5
CALLS = 10  # calls per candidate and round
READ_BYTES = 256 << 20  # the plain read before each call: 2 x L2 and more on every GPU so far


def main(argv: list[str] | None = None) -> int:
    spec_path, out_path = argv if argv is not None else sys.argv[1:]
    with open(spec_path, encoding="utf-8") as f:
        spec = json.load(f)
    priced = price_all(spec["decisions"], spec["calls_folder"], spec.get("rounds", ROUNDS), spec.get("calls", CALLS))
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(priced, f)
    return 0


def price_all(decisions: list[ToPrice], folder: str, rounds: int, calls: int) -> list[Price]:
    """Each decision (``{"key", "file", "error", "candidates"}``) with its prices, or why it has none."""
    import torch

    device = torch.device("cuda", torch.cuda.current_device())
    read = torch.ones(READ_BYTES // 4, dtype=torch.float32, device=device)
    found: list[Price] = []
    for number, decision in enumerate(decisions, 1):
        started = time.monotonic()
        found.append(price_decision(decision, folder, read, rounds, calls))
        torch.cuda.empty_cache()
        print(
            f"cleanflush ab: priced {number} of {len(decisions)} ({time.monotonic() - started:.1f} s)",
            file=sys.stderr,
            flush=True,
        )
    return found


T = TypeVar("T")


def contained(work: Callable[[], T]) -> tuple[T | None, str | None]:
    """(``work()``, None), or (None, one line saying why it failed): a recorded kernel that cannot
    be found, made again or launched, or whose module exits when imported, costs its own entry
    alone."""
    try:
        return work(), None
    except (Exception, SystemExit) as exc:  # a kernel that cannot be found, made, launched, or exits: said for it alone
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def price_decision(decision: ToPrice, folder: str, read: Any, rounds: int, calls: int) -> Price:
    """One decision with its prices, or why it has none: whatever its kernel does when it is
    found, made again or launched costs this decision's price alone."""
    result = Price(key=decision["key"])
    file = decision.get("file")
    if file is None:
        result["error"] = decision.get("error") or "no call recorded"
        return result
    priced, why = contained(lambda: price_one(os.path.join(folder, file), decision["candidates"], read, rounds, calls))
    if priced is None:
        result["error"] = why
        return result
    result["prices"], result["rounds"] = priced["prices"], priced["rounds"]
    result["calls"], result["kernel"] = priced["calls"], priced["kernel"]
    return result


def price_one(path: str, labels: list[str], read: Any, rounds: int, calls: int) -> Prices:
    """{"prices": {label: {"us", "low", "high", "rounds"}}, "rounds", "calls", "kernel"} for one decision."""
    call = Call.load(path, read.device)
    launches = {label: call.launch(label, before_kernel=read.sum) for label in labels}
    times = kernel_times(launches, kernel_name(call), rounds, calls)
    return {"prices": as_prices(times), "rounds": rounds, "calls": calls, "kernel": kernel_name(call)}


def as_prices(times: dict[str, list[float]]) -> dict[str, PickPrice]:
    """label -> its price from each round's time: the median of the rounds, their lowest and highest."""
    return {
        label: PickPrice(us=statistics.median(ts), low=min(ts), high=max(ts), rounds=ts) for label, ts in times.items()
    }


def kernel_times(
    launches: dict[str, Callable[[], None]], kernel: str, rounds: int, calls: int
) -> dict[str, list[float]]:
    """label -> each round's median kernel time (us) of its ``calls`` calls, the labels
    interleaved round by round."""
    import torch

    for launch in launches.values():  # compiled, loaded and warm before the timing
        for _ in range(3):
            launch()
    torch.cuda.synchronize()
    labels, order = list(launches), []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as profile:
        for r in range(rounds):
            for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
                for _ in range(calls):
                    launches[label]()
                    order.append((r, label))
        torch.cuda.synchronize()
    spans = _spans(profile, kernel)
    if len(spans) != len(order):
        raise RuntimeError(f"the profiler saw {len(spans)} launches of {kernel} for {len(order)} calls")
    per_round: dict[tuple[int, str], list[float]] = {}
    for (r, label), us in zip(order, spans):
        per_round.setdefault((r, label), []).append(us)
    return {label: [statistics.median(per_round[(r, label)]) for r in range(rounds)] for label in labels}


def _spans(profile: Any, kernel: str) -> list[float]:
    """The durations (us) of the GPU kernels named ``kernel``, in the order they ran."""
    on_gpu = [e for e in profile.events() if getattr(e.device_type, "name", "") == "CUDA"]
    named = [e for e in on_gpu if e.name == kernel] or [e for e in on_gpu if e.name.startswith(kernel)]
    return [e.time_range.elapsed_us() for e in sorted(named, key=lambda e: e.time_range.start)]
