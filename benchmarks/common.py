"""What every study shares: the machine record, result files, progress, statistics, and a
clock/power log.  Imports nothing heavy at module level: ``plot`` and the CLI run without
torch."""

from __future__ import annotations

import contextlib
import csv
import datetime
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from cleanflush._stats import central_mean, quartiles  # noqa: F401  (the studies take them from here)
from cleanflush._verify.measure import PRESETS

T = TypeVar("T")
MiB = 1 << 20
RESULTS = Path(__file__).parent / "results"

# The five one-row Llama 3.1 8B projections (N x K): q/o, qkv fused (GQA), down, gate+up, lm_head.
LLAMA_SHAPES = list(PRESETS["llama-3.1-8b"])


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- statistics


def ranks(values: list[float]) -> list[float]:
    """Ranks from 1 (smallest), ties get their mean rank."""
    order = sorted(range(len(values)), key=values.__getitem__)
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for m in range(i, j + 1):
            out[order[m]] = (i + j) / 2 + 1
        i = j + 1
    return out


def spread(values: list[float]) -> dict[str, float]:
    """Median, p10 and p90 (by index) of ``values``, in us."""
    ordered = sorted(values)
    return {
        "median_us": statistics.median(ordered),
        "p10_us": ordered[len(ordered) // 10],
        "p90_us": ordered[len(ordered) * 9 // 10],
    }


def spearman(a: list[float], b: list[float]) -> float:
    """Spearman's rank correlation (Pearson's on the ranks)."""
    ra, rb = ranks(a), ranks(b)
    return statistics.correlation(ra, rb)


def kendall_tau(a: list[float], b: list[float]) -> float:
    """Kendall's tau-b: agreement of every pair's order."""
    concordant = discordant = ties_a = ties_b = 0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif (da > 0) == (db > 0):
                concordant += 1
            else:
                discordant += 1
    n = concordant + discordant
    denom = ((n + ties_a) * (n + ties_b)) ** 0.5
    return (concordant - discordant) / denom if denom else float("nan")


# --------------------------------------------------------------------------- GPU loops


def flush_time_us(flush: Callable[[], Any], count: int) -> float:
    """GPU time of one flush, from ``count`` of them back to back between two events."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(count):
        flush()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / count * 1e3


def spin_cycles_per_us() -> float:
    """Clock cycles per microsecond of ``torch.cuda._sleep``, which spins on clock64 and
    touches no memory: the way to keep the GPU busy for a given time."""
    import torch

    torch.cuda._sleep(1000)  # the first launch loads the kernel: keep it out of the timing
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    torch.cuda.synchronize()
    return 1_000_000 / (start.elapsed_time(end) * 1e3)


# --------------------------------------------------------------------------- result files


def now() -> str:
    """The date and time a record gives, in UTC."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def machine() -> dict[str, Any]:
    """GPU, clocks, driver and versions: the header every result file carries."""
    import torch
    import triton

    import cleanflush

    info: dict[str, Any] = {
        "date": now(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "cleanflush": cleanflush.__version__,
        "default_policy": cleanflush.current_policy(),
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(
            gpu=props.name,
            sms=props.multi_processor_count,
            l2_bytes=props.L2_cache_size,
            memory_gib=round(props.total_memory / (1 << 30), 1),
        )
    nvml = Nvml.open()
    if nvml:
        info.update(nvml.describe())
    return info


class Results:
    """One study's output: ``<name>.csv`` (rows) and ``<name>.json`` (machine + summary)."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory, self.name = Path(directory), name
        self.directory.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict[str, Any]] = []

    def add(self, **row: Any) -> None:
        self.rows.append(row)

    def write(self, **summary: Any) -> Path:
        fields: list[str] = []
        for row in self.rows:
            fields += [k for k in row if k not in fields]
        with open(self.directory / f"{self.name}.csv", "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields)
            writer.writeheader()
            writer.writerows(self.rows)
        meta = {"study": self.name, "machine": machine(), **summary}
        path = self.directory / f"{self.name}.json"
        path.write_text(json.dumps(meta, indent=1, default=str) + "\n")
        return path


def kept_record(path: Path, study: str) -> dict[str, Any]:
    """The record at ``path``, whose jobs a call that runs others keeps, or a new one of
    ``study``; either now with this machine."""
    record: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"study": study, "jobs": {}}
    record.update(machine=machine())
    return record


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Rows of a result CSV, numbers as floats."""

    def value(text: str) -> Any:
        try:
            return float(text)
        except ValueError:
            return text

    with open(path, newline="") as f:
        return [{k: value(v) for k, v in row.items()} for row in csv.DictReader(f)]


# --------------------------------------------------------------------------- clocks and power


class Nvml:
    """SM clock, power, temperature and throttle reasons of the current GPU (nvidia-ml-py)."""

    def __init__(self, pynvml: Any, handle: Any) -> None:
        self.nv, self.handle = pynvml, handle

    @classmethod
    def open(cls) -> Nvml | None:
        try:
            import pynvml
            import torch

            pynvml.nvmlInit()
            uuid = str(getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "uuid", ""))
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            except Exception:
                handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
            return cls(pynvml, handle)
        except Exception:
            return None

    def describe(self) -> dict[str, Any]:
        nv, h = self.nv, self.handle
        out: dict[str, Any] = {}
        for key, call in {
            "driver": lambda: nv.nvmlSystemGetDriverVersion(),
            "sm_clock_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
            "mem_clock_max_mhz": lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
            "power_limit_w": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
        }.items():
            try:
                value = call()
                out[key] = value.decode() if isinstance(value, bytes) else value
            except Exception:
                pass
        return out

    def sample(self) -> tuple[float, int, int, float, int, int]:
        nv, h = self.nv, self.handle
        try:
            reasons = nv.nvmlDeviceGetCurrentClocksEventReasons(h)
        except Exception:
            reasons = nv.nvmlDeviceGetCurrentClocksThrottleReasons(h)
        return (
            time.perf_counter(),
            nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
            nv.nvmlDeviceGetPowerUsage(h) / 1000,
            nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            reasons,
        )


class ClockLog:
    """Samples NVML every ``period`` seconds in a thread; ``window`` summarises a span.

    Without NVML it records nothing and ``window`` returns an empty dict.
    """

    def __init__(self, period: float = 0.002) -> None:
        self.nvml = Nvml.open()
        self.period = period
        self.samples: list[tuple[float, int, int, float, int, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ClockLog:
        if self.nvml:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self.nvml:
            self._thread.join()

    def _run(self) -> None:
        assert self.nvml is not None
        while not self._stop.is_set():
            try:
                self.samples.append(self.nvml.sample())
            except Exception:
                return
            time.sleep(self.period)

    def window(self, t0: float, t1: float) -> dict[str, float]:
        span = [s for s in list(self.samples) if t0 <= s[0] <= t1]
        if not span:
            return {}
        reasons = 0
        for s in span:
            reasons |= s[5]
        return {
            "sm_mhz_mean": statistics.fmean(s[1] for s in span),
            "sm_mhz_min": min(s[1] for s in span),
            "mem_mhz_min": min(s[2] for s in span),
            "power_w_mean": statistics.fmean(s[3] for s in span),
            "power_w_max": max(s[3] for s in span),
            "temp_c_max": max(s[4] for s in span),
            "clock_event_reasons": reasons,
            "nvml_samples": len(span),
        }


@contextlib.contextmanager
def uninstalled() -> Iterator[None]:
    """Stock behaviour for the block: cleanflush uninstalled, then installed again."""
    import cleanflush

    cleanflush.uninstall()
    try:
        yield
    finally:
        cleanflush.install()


WHOLE_WRITE = "write-read (whole write)"


@contextlib.contextmanager
def whole_write() -> Iterator[None]:
    """write-read as it ran before cleanflush shrank the writes it owns: the whole stock
    write, then 2 x L2 read.  A chosen read region turns the shrink off (``cleanflush._seam``);
    this one reads what the flush would have read."""
    import cleanflush
    from cleanflush import _seam

    with cleanflush.policy("write-read"), _seam.read_region(lambda cache, region, l2: region):
        yield


# The hold as it is, the simpler design it was measured against, and none (benchmarks/synced.py,
# benchmarks/budget.py).
HOLDS = ("handshake", "spin only", "no hold")
# the handshake with a queued loop held to HOLD_NS, as before the longer bound (named when
# do_bench's was the only queued loop: the records' rows keep the name)
SHORT_BOUND = "handshake, 120 us in do_bench"
# added to the call numbers the kernel sees, so the host's count never passes them; small enough
# that the number stays an int32 (a larger one is another specialisation of the kernel)
SPIN_OFFSET = 1 << 30


@contextlib.contextmanager
def hold_design(design: str) -> Iterator[None]:
    """Flushes in the block hold the stream as ``design`` says:

    * ``handshake``: as cleanflush does (``cleanflush._hold``): where the GPU has caught up (the
      pinned mark, or an empty stream), until the host's next read call, within its pace;
    * ``spin only``: the simpler design, a ``%globaltimer`` spin bounded by the host's pace,
      held only where the stream is empty and never let go early (no pinned handshake): the same
      kernel, handed call numbers the host's count never passes;
    * ``no hold``;
    * ``SHORT_BOUND``: the handshake, its bound in do_bench's queued loop ``HOLD_NS``.

    Flushes on the current device (its read buffer is made here if it is not yet)."""
    import torch

    from cleanflush import _hold, _read

    stock = _hold.hold_ns
    handshake = _read.prepare(torch.device("cuda", torch.cuda.current_device())).handshake
    handshakes = [handshake] if handshake is not None else []

    def spin_only(device: Any, handshake: Any, capturing: bool) -> int:
        if handshake is None or capturing:
            return 0
        handshake.arrived()
        return int(handshake.pace_ns()) if _hold.stream_empty(device) else 0

    queued_bound = _hold.QUEUED_HOLD_NS
    if design == "no hold":
        _hold.hold_ns = lambda device, handshake, capturing: 0
    elif design == SHORT_BOUND:
        _hold.QUEUED_HOLD_NS = _hold.HOLD_NS
    elif design == "spin only":
        _hold.hold_ns = spin_only
        for made in handshakes:
            call = type(made).call
            vars(made)["call"] = lambda made=made, call=call: call(made) + SPIN_OFFSET
    elif design != "handshake":
        raise ValueError(f"unknown hold design {design!r}; valid: {', '.join((*HOLDS, SHORT_BOUND))}")
    try:
        yield
    finally:
        _hold.hold_ns = stock
        _hold.QUEUED_HOLD_NS = queued_bound
        torch.cuda.synchronize()
        for made in handshakes:
            vars(made).pop("call", None)
            made._slots[1] = made._slots[0]  # caught up, as after any sync: no offset mark left


def read_alone(device: Any, nbytes: int) -> None:
    """cleanflush's read of ``nbytes`` on ``device`` (its named kernel), with no write and no
    hold: a study's clean read."""
    from cleanflush import _read

    entry = _read.prepare(device)
    entry.read(entry.region(nbytes), 0, False)


def flushing(name: str) -> contextlib.AbstractContextManager[Any]:
    """The flush a block runs under: ``"stock"`` (cleanflush uninstalled), a policy, or
    ``WHOLE_WRITE``."""
    import cleanflush

    if name == WHOLE_WRITE:
        return whole_write()
    return uninstalled() if name == "stock" else cleanflush.policy(name)


@contextlib.contextmanager
def write_read_held(design: str) -> Iterator[None]:
    """The default flush with its hold built as ``design`` (see ``hold_design``)."""
    with flushing("write-read"), hold_design(design):
        yield


def run_under(name: str, measure: Callable[[], T]) -> T:
    """``measure()`` under the flush ``name`` (see ``flushing``)."""
    with flushing(name):
        return measure()
