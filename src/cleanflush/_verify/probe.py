"""What verify reads off the machine before measuring: SM clock, driver, other processes.

Through NVML (nvidia-ml-py) where it is installed, else ``nvidia-smi``; every reading may
be None when neither can tell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def _reading(read: Callable[[], T]) -> T | None:
    """One reading, or None: NVML and nvidia-smi fail in many ways (no permission, a vGPU,
    an old driver, a missing field), and none of them may stop verify."""
    try:
        return read()
    except Exception:  # any failure of the probe is "cannot tell", said as None
        return None


def _nvml_handle(index: int, uuid: str | None) -> Any:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    if uuid:
        handle = _reading(lambda: pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"))
        if handle is not None:
            return pynvml, handle
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)


def _smi(query: str, index: int, what: str = "--query-gpu") -> list[str]:
    out = subprocess.run(
        ["nvidia-smi", f"{what}={query}", "--format=csv,noheader,nounits", "-i", str(index)],
        capture_output=True,
        text=True,
        timeout=20,
    )
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


class GpuProbe:
    """SM clock, driver and other processes, through NVML or else nvidia-smi."""

    def __init__(self, index: int, uuid: str | None) -> None:
        self.index = index
        found = _reading(lambda: _nvml_handle(index, uuid))
        self.nvml: Any = found[0] if found else None
        self.handle: Any = found[1] if found else None
        self.source: str | None = "nvml" if found else ("nvidia-smi" if shutil.which("nvidia-smi") else None)

    def sm_clock_mhz(self) -> int | None:
        if self.nvml:
            return _reading(lambda: int(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)))
        if self.source:
            return _reading(lambda: int(_smi("clocks.sm", self.index)[0]))
        return None

    def driver(self) -> str | None:
        def from_nvml() -> str:
            version = self.nvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)

        if self.nvml:
            return _reading(from_nvml)
        if self.source:
            return _reading(lambda: _smi("driver_version", self.index)[0])
        return None

    def other_processes(self) -> list[int] | None:
        """PIDs of other processes on this GPU; None when nothing can tell."""
        me = os.getpid()

        def from_nvml() -> list[int]:
            procs = list(self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle))
            procs += list(self.nvml.nvmlDeviceGetGraphicsRunningProcesses(self.handle))
            return sorted({p.pid for p in procs} - {me})

        if self.nvml:
            return _reading(from_nvml)
        if self.source:
            return _reading(
                lambda: sorted(
                    {int(p) for p in _smi("pid", self.index, "--query-compute-apps") if p.isascii() and p.isdigit()}
                    - {me}
                )
            )
        return None
