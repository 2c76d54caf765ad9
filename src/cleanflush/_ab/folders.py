"""The folders ``cleanflush ab`` makes in its work folder (``--keep``, or a temporary one), and
the one rule they keep: ab never follows a link there and never deletes what it did not make.

A work folder holds (docs/ab.md): ``.cleanflush-ab`` (the mark: ab made this folder, or took
it on while it held none of ab's names), ``.cleanflush-ab.lock``, ``calls/`` (the recorded
autotuning calls), ``compiled/`` (Triton's compiled kernels, carried from run to run),
``prices/``, ``end-to-end/`` and one ``runN-POLICY/`` per run.  Each of these is made anew
where ab uses it: a link in its place is removed, never followed, so nothing planted there is
read or written through it.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile

MARK = ".cleanflush-ab"
LOCK = ".cleanflush-ab.lock"
SHARED = ("calls", "compiled", "prices", "end-to-end")


def run_folder(index: int, sides: tuple[str, str]) -> str:
    """The name of run ``index``'s folder (1-based; the first side runs first)."""
    return f"run{index}-{sides[0] if index % 2 else sides[1]}"


def names(runs: int, sides: tuple[str, str]) -> list[str]:
    """Every name ab makes in its work folder for ``runs`` runs a side."""
    return [*SHARED, *(run_folder(index, sides) for index in range(1, 2 * runs + 1))]


def fresh(path: str) -> str:
    """``path`` as an empty folder of ab's own: a link there is removed (never followed), a
    folder there emptied.  A file there raises: ``problem`` refuses it before the runs."""
    if os.path.islink(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path)
    os.makedirs(path)  # its parent too, where a job removed the work folder
    return path


def made(path: str) -> str:
    """``path`` as a folder of ab's own, kept where it is one, made where it is not; a link
    there is removed first."""
    if os.path.islink(path):
        os.unlink(path)
    os.makedirs(path, exist_ok=True)
    return path


def problem(keep: str, runs: int, sides: tuple[str, str]) -> str | None:
    """What makes ``keep`` no work folder for ab, in one line; None where it is one.  Checked
    before the first run, so a run's record is never lost to it afterwards."""
    if not keep:
        return "--keep '' names no folder"
    if os.path.lexists(keep) and not os.path.isdir(keep):
        return f"--keep {keep!r} is a file, not a directory"
    above = _first_existing(os.path.dirname(os.path.abspath(keep)))
    if not os.path.isdir(above):
        return f"--keep {keep!r} is under {above!r}, which is a file"
    return _inside_problem(keep, runs, sides) or _unwritable(keep)


def _first_existing(path: str) -> str:
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def _inside_problem(keep: str, runs: int, sides: tuple[str, str]) -> str | None:
    if not os.path.isdir(keep):
        return None
    lock = os.path.join(keep, LOCK)
    if os.path.lexists(lock) and not stat.S_ISREG(os.lstat(lock).st_mode):
        return f"--keep {keep!r}: its lock {lock!r} is not a plain file"
    ours = names(runs, sides)
    for name in ours:
        path = os.path.join(keep, name)
        if os.path.lexists(path) and not os.path.islink(path) and not os.path.isdir(path):
            index = ours.index(name) - len(SHARED) + 1
            where = f"run {index}'s folder" if index > 0 else f"its folder {name!r}"
            return f"--keep {keep!r} holds a file where {where} goes ({path!r})"
    taken = [name for name in ours if os.path.lexists(os.path.join(keep, name))]
    if taken and not _marked(keep):
        return (
            f"--keep {keep!r} holds {taken[0]!r}, which cleanflush ab did not make there: name a new folder, "
            "or one ab made"
        )
    return None


def _marked(keep: str) -> bool:
    mark = os.path.join(keep, MARK)
    return os.path.lexists(mark) and stat.S_ISREG(os.lstat(mark).st_mode)


def _unwritable(keep: str) -> str | None:
    """Where ab cannot make ``keep`` or a file in it: why, in one line."""
    try:
        os.makedirs(keep, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=keep, prefix=".cleanflush-ab-probe-")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        return f"--keep {keep!r} cannot be written ({exc.strerror or exc})"
    return None


def claim(keep: str) -> None:
    """Mark ``keep`` as ab's (``problem`` found none of ab's names there, or its mark)."""
    fd = os.open(os.path.join(keep, MARK), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    os.close(fd)


def open_lock(keep: str) -> int:
    """The descriptor of ``keep``'s lock file, opened without following a link (OSError:
    ELOOP where the lock is one)."""
    return os.open(os.path.join(keep, LOCK), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)


def carry(source: str, into: str) -> None:
    """Triton's compiled kernels from ``source`` into ``into``: plain files and folders only
    (a link, a FIFO or a socket a job left in its cache is skipped, never followed or
    opened), never its tuning results (``*.autotune.json``), so a later run still tunes."""
    if os.path.islink(source) or not os.path.isdir(source):
        return

    def skipped(folder: str, entries: list[str]) -> set[str]:
        out = set()
        for entry in entries:
            mode = os.lstat(os.path.join(folder, entry)).st_mode
            if entry.endswith(".autotune.json") or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                out.add(entry)
        return out

    made(into)
    shutil.copytree(source, into, dirs_exist_ok=True, ignore=skipped)
