"""What every command shares: exit codes, the ``--json`` rule, path checks, broken pipes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

# for every command
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_CANNOT_RUN = 0, 1, 2, 3
EXIT_CODES = "exit codes: 0 success, 1 check failed, 2 usage error, 3 cannot run here"


def json_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="the full record as JSON: alone, on stdout (everything else goes to stderr); with PATH, written there",
    )


def output_problem(path: str | None, what: str = "--json") -> str | None:
    """Why ``path`` cannot take an output file, or None: checked before any work starts."""
    if path in (None, "-"):
        return None
    assert path is not None
    if os.path.isdir(path):
        return f"cannot write {what} {path!r}: it is a directory"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"cannot write {what} {path!r}: no directory {folder!r}"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"cannot write {what} {path!r}: permission denied"
    return None


def text_stream(json_path: str | None) -> Any:
    """Where the human-readable text goes: stderr when stdout carries the JSON."""
    return sys.stderr if json_path == "-" else sys.stdout


def emit(data: dict[str, Any], text: str, json_path: str | None) -> None:
    """The text, and with ``--json`` the record: alone on stdout, or in a file."""
    if text:
        print(text, file=text_stream(json_path), flush=True)
    if json_path == "-":
        print(json.dumps(data, indent=2, allow_nan=False), flush=True)
    elif json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, allow_nan=False)


def quiet_broken_pipe() -> None:
    """After stdout was closed by a reader (``| head``): no traceback at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no real stdout to replace
        pass
