"""The audit's second timer: a config's kernel as a served model runs it, back to back in a CUDA
graph over enough copies of its inputs that every launch reads them from memory.

It shares no code with the flush (``_flush``, ``_read``) or with ab's timer (``_ab.prices``:
CUPTI after a plain read): only the recorded call (``_calls``), to make the launch.  The call's
tensors are copied until the copies together hold ``STREAM_FACTOR`` x L2 (``copies_for``), one
launch of the config on each copy is captured in one graph (the kernel as served: its config's
pre-hook and the launch, none of the autotuner's own hooks), and the graph is replayed between
two CUDA events.  A config's time is the replay's over its launches (us per launch, launch
gaps inside the graph included, as a served model pays them); the configs' replays are
interleaved in rounds, in a rotating order, and a price is the median of its rounds with their
lowest and highest.  The rounds start after ``WARM_UP_S`` of untimed replays: without them the
first round ran slow (benchmarks/results/h100, the audit study), which widened the timer's
noise past the effects it judges.  Needs a CUDA GPU; imports torch only when it times.
"""

from __future__ import annotations

import copy
import math
import time
from typing import Any

STREAM_FACTOR = 4  # the copies' inputs together are at least this many times the L2
MOST_COPIES = 64
MOST_BYTES = 8 << 30  # the copies' memory, at most
ROUNDS = 7
WARM_UP_S = 0.2  # untimed replays of every graph before the first timed round


def copies_for(call_bytes: int, l2_bytes: int) -> int:
    """How many copies of a call's inputs (``call_bytes`` each) stream from memory past an L2 of
    ``l2_bytes``: enough to hold ``STREAM_FACTOR`` x L2, at least 2, at most ``MOST_COPIES`` and
    ``MOST_BYTES`` in all."""
    size = max(int(call_bytes), 1)
    wanted = math.ceil(STREAM_FACTOR * l2_bytes / size)
    return max(2, min(wanted, MOST_COPIES, MOST_BYTES // size))


def call_bytes(call: Any) -> int:
    """The bytes of the call's tensors' storages (a storage that several share, once)."""
    import torch

    storages = {}
    for value in [*call.args, *call.kwargs.values()]:
        tensor = value if isinstance(value, torch.Tensor) else getattr(value, "base", None)
        if isinstance(tensor, torch.Tensor):
            storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
    return sum(storages.values())


def copied(call: Any) -> Any:
    """The same call on fresh copies of its tensors (a ``TensorDescriptor``'s tensor copied, its
    layout kept)."""
    import torch

    def fresh(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.clone()
        base = getattr(value, "base", None)
        if isinstance(base, torch.Tensor):
            twin = copy.copy(value)
            twin.base = base.clone()
            return twin
        return value

    twin = copy.copy(call)
    twin.args = [fresh(a) for a in call.args]
    twin.kwargs = {k: fresh(v) for k, v in call.kwargs.items()}
    return twin


def graph_prices(call: Any, labels: list[str], rounds: int = ROUNDS) -> tuple[dict[str, dict[str, Any]], int]:
    """label -> {"us", "low", "high", "rounds"} (us per launch), and the copies the graphs ran over."""
    import torch

    device = torch.cuda.current_device()
    copies = copies_for(call_bytes(call), torch.cuda.get_device_properties(device).L2_cache_size)
    made = [call] + [copied(call) for _ in range(copies - 1)]
    graphs = {label: _captured([m.launch(label, tuning_hooks=False) for m in made]) for label in labels}
    warm_up(list(graphs.values()))
    times: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(rounds):
        for label in labels[r % len(labels) :] + labels[: r % len(labels)]:
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            graphs[label].replay()
            end.record()
            end.synchronize()
            times[label].append(start.elapsed_time(end) * 1e3 / copies)
    return {label: _summary(ts) for label, ts in times.items()}, copies


def warm_up(graphs: list[Any], seconds: float = WARM_UP_S) -> int:
    """Replay ``graphs`` in turn, untimed, for ``seconds`` of GPU time (at least one round); the
    rounds replayed."""
    import torch

    done, start = 0, time.monotonic()
    while done == 0 or time.monotonic() - start < seconds:
        for graph in graphs:
            graph.replay()
        torch.cuda.synchronize()
        done += 1
    return done


def _captured(launches: list[Any]) -> Any:
    """One CUDA graph of ``launches``, back to back; compiled, warm and replayed once before it is timed."""
    import torch

    stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for launch in launches:
            launch()
        stream.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for launch in launches:
                launch()
    graph.replay()
    torch.cuda.synchronize()
    return graph


def _summary(times: list[float]) -> dict[str, Any]:
    ordered = sorted(times)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return {"us": median, "low": ordered[0], "high": ordered[-1], "rounds": list(times)}
