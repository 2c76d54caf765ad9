"""What every command shares: exit codes, the ``--json`` rule, output paths, closed streams."""

from __future__ import annotations

import argparse
import json
import math
import os
import stat
import sys
import tempfile
from collections.abc import Mapping
from typing import IO, Any

# for every command
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_CANNOT_RUN = 0, 1, 2, 3
EXIT_CODES = (
    "exit codes: 0 success, 1 check failed, 2 usage error, 3 cannot run here, 130 interrupted; run: the "
    "command's own, 126 it cannot be run, 127 it is not found; ab and audit: 143 terminated, 129 hung up"
)


def help_text(text: str) -> str:
    """``text`` as an option's help: argparse %-formats help, so a ``%`` in a name built into
    it (a policy, a pick rule, a target) is doubled."""
    return text.replace("%", "%%")


def json_option(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="the full record as JSON: alone, on stdout (everything else goes to stderr); with PATH, written there",
    )


def output_problem(path: str | None, what: str = "--json") -> str | None:
    """Why ``path`` cannot take an output file, or None; found before any work starts, by
    making a file beside it (``os.access`` says yes where the file system says no)."""
    if path is None or path == "-":
        return None
    if not path:
        return f"{what} needs a path (or nothing, for stdout)" if what == "--json" else f"{what} needs a path"
    if os.path.isdir(path):
        return f"cannot write {what} {path!r}: it is a directory"
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        return f"cannot write {what} {path!r}: not a regular file"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"cannot write {what} {path!r}: no directory {folder!r}"
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".cleanflush-", suffix=".probe") as probe:
            probe.write(b"{}")
            probe.flush()
        if os.path.exists(path):
            with open(path, "a", encoding="utf-8"):
                pass
    except OSError as exc:
        return f"cannot write {what} {path!r}: {exc.strerror or exc}"
    return None


def write_whole(path: str, text: str) -> None:
    """``text`` into ``path`` atomically: readers find the old file or the whole new one."""
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".cleanflush-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):  # not moved into place: nothing half-written stays behind
            os.unlink(temporary)


def text_stream(json_path: str | None) -> IO[str] | None:
    """Where the human-readable text goes: stderr when stdout carries the JSON (None where
    that stream is closed)."""
    return sys.stderr if json_path == "-" else sys.stdout


def emit(data: Mapping[str, Any], text: str, json_path: str | None, command: str = "cleanflush") -> None:
    """The text, and with ``--json`` the record: alone on stdout, or written whole in a file.
    Where the file cannot be written after all, the record goes to a file of its own in the
    temporary folder and the text says where: a finished run is never lost."""
    record = json.dumps(finite(data), indent=2, allow_nan=False)
    say(text, text_stream(json_path))
    if json_path == "-":
        say(record, sys.stdout)
    elif json_path:
        try:
            write_whole(json_path, record + "\n")
        except OSError as exc:
            handle, elsewhere = tempfile.mkstemp(prefix="cleanflush-", suffix=".json")
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                f.write(record + "\n")
            why = exc.strerror or exc
            print(
                f"{command}: could not write --json {json_path!r} ({why}); the record is in {elsewhere}",
                file=sys.stderr,
            )


def finite(data: Any) -> Any:
    """``data`` with every float that is not finite as None: a record is always JSON."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [finite(value) for value in data]
    return data


def say(text: str, stream: IO[str] | None) -> None:
    """``text`` on ``stream``, where there is one (a closed stdout is None)."""
    if text and stream is not None:
        print(text, file=stream, flush=True)


def quiet_broken_pipe() -> None:
    """After stdout was closed by a reader (``| head``): no traceback at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real stdout to replace
        pass
