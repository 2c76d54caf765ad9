"""Command line: ``cleanflush status`` (no GPU needed) and ``cleanflush verify``."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import site
import sys
from typing import Any

import cleanflush

from . import _verify
from ._env import ENV_VAR
from ._state import STATE, TargetStatus
from .patches import installed_version

# What `status` imports so that the hooks fire and every row tells the truth.
_TARGET_MODULES = ("triton", "torch._inductor.runtime.benchmarking", "torch._inductor.utils")


def _autoload_file() -> str | None:
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    for directory in dirs:
        path = os.path.join(directory, "cleanflush.pth")
        if os.path.exists(path):
            return path
    return None


def collect_status() -> dict[str, Any]:
    """Import each installed target, then report: the data behind `cleanflush status`."""
    errors: list[TargetStatus] = []
    for module in _TARGET_MODULES:
        package = module.split(".")[0]
        try:
            importlib.import_module(module)
        except Exception as exc:
            if installed_version(package, "pytorch-triton" if package == "triton" else package):
                errors.append(TargetStatus(module, package, None, False, f"installed, but the import failed: {exc!r}"))
    return {
        "cleanflush": cleanflush.__version__,
        "installed": cleanflush.is_installed(),
        "source": STATE.source,
        "policy": cleanflush.current_policy() if cleanflush.is_installed() else None,
        "env": os.environ.get(ENV_VAR),
        "autoload_file": _autoload_file(),
        "targets": [row.as_dict() for row in cleanflush.status() + errors],
    }


def format_status(data: dict[str, Any]) -> str:
    if data["installed"]:
        head = f"cleanflush {data['cleanflush']}: installed ({data['source']}), policy {data['policy']}"
    else:
        head = f"cleanflush {data['cleanflush']}: NOT installed ({ENV_VAR}={data['env']!r}); stock flushes everywhere"
    pth = data["autoload_file"]
    auto = f"autoload: {pth} (active when {ENV_VAR} is set)" if pth else "autoload: cleanflush.pth not found"
    rows = [("target", "version", "patched", "detail")]
    for t in data["targets"]:
        rows.append((t["target"], t["version"] or "-", "yes" if t["patched"] else "no", t["detail"]))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [head, auto, ""]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3])
    return "\n".join(lines)


def _positive(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a device index (0, 1, ...), got {text!r}")
    return int(text)


def _shape(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected N,K as two positive integers, e.g. 4096,4096; got {text!r}")
    return int(parts[0]), int(parts[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="cleanflush", description="Make GPU kernel benchmarks start from a cold and clean L2.")
    parser.add_argument("--version", action="version", version=f"cleanflush {cleanflush.__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    status = commands.add_parser("status", help="which benchmarkers are patched, and why not (no GPU needed)")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    verify = commands.add_parser(
        "verify", help="time a one-row GEMM stock vs patched on this GPU and say whether the patch took effect")
    verify.add_argument("--shape", type=_shape, default=(4096, 4096), metavar="N,K",
                        help="weight shape N,K of F.linear(x[1,K], W[N,K]) (default 4096,4096)")
    verify.add_argument("--dtype", choices=_verify.DTYPES, default="bfloat16")
    verify.add_argument("--device", type=_non_negative, default=0, help="CUDA device index (default 0)")
    verify.add_argument("--rounds", type=_positive, default=5, help="interleaved rounds (default 5)")
    verify.add_argument("--ncu", action="store_true",
                        help="also measure the timed GEMM's DRAM write bytes with Nsight Compute")
    verify.add_argument("--controls", action="store_true",
                        help="also time deliberately broken flushes, which must be judged FAIL, next to "
                             "write-read and read, which must PASS: shows that the verdict means something here")
    verify.add_argument("--json", dest="json_path", metavar="PATH", help="write the full record as JSON")
    args = parser.parse_args(argv)

    if args.command == "verify":
        n, k = args.shape
        return _verify.run(_verify.Options(n=n, k=k, dtype=args.dtype, device=args.device, rounds=args.rounds,
                                           ncu=args.ncu, controls=args.controls, json_path=args.json_path))

    if args.command == "status":
        data = collect_status()
        print(json.dumps(data, indent=2) if args.json else format_status(data))
        return 0
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
