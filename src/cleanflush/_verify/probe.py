"""What verify reads off the machine before measuring: SM clock, driver, other processes.

Through NVML (nvidia-ml-py) where it is installed, else ``nvidia-smi``; every reading may
be None when neither can tell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any


def _nvml_handle(index: int, uuid: str | None) -> Any:
    import pynvml  # nvidia-ml-py

    pynvml.nvmlInit()
    if uuid:
        try:
            return pynvml, pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
        except Exception:
            pass
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(index)


def _smi(query: str, index: int, what: str = "--query-gpu") -> list[str]:
    out = subprocess.run(["nvidia-smi", f"{what}={query}", "--format=csv,noheader,nounits", "-i", str(index)],
                         capture_output=True, text=True, timeout=20)
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


class GpuProbe:
    """SM clock, driver and other processes, through NVML or else nvidia-smi."""

    def __init__(self, index: int, uuid: str | None) -> None:
        self.index = index
        self.nvml: Any = None
        self.source: str | None
        try:
            self.nvml, self.handle = _nvml_handle(index, uuid)
            self.source = "nvml"
        except Exception:
            self.source = "nvidia-smi" if shutil.which("nvidia-smi") else None

    def sm_clock_mhz(self) -> int | None:
        try:
            if self.nvml:
                return int(self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM))
            if self.source:
                return int(_smi("clocks.sm", self.index)[0])
        except Exception:
            pass
        return None

    def driver(self) -> str | None:
        try:
            if self.nvml:
                version = self.nvml.nvmlSystemGetDriverVersion()
                return version.decode() if isinstance(version, bytes) else str(version)
            if self.source:
                return _smi("driver_version", self.index)[0]
        except Exception:
            pass
        return None

    def other_processes(self) -> list[int] | None:
        """PIDs of other processes on this GPU; None when nothing can tell."""
        me = os.getpid()
        try:
            if self.nvml:
                procs = list(self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle))
                procs += list(self.nvml.nvmlDeviceGetGraphicsRunningProcesses(self.handle))
                return sorted({p.pid for p in procs} - {me})
            if self.source:
                pids = _smi("pid", self.index, "--query-compute-apps")
                return sorted({int(p) for p in pids if p.isdigit()} - {me})
        except Exception:
            pass
        return None

