"""``cleanflush audit -- COMMAND``: the job once as shipped, its served picks priced in a process
of their own, each judged, and with ``--write`` the corrected tables.

The job runs with cleanflush on and three variables of the audit's (its own output passes
through): ``CLEANFLUSH_AUDIT`` (the recorder, ``_audit.served``), ``CLEANFLUSH_DECISIONS`` (the
decisions it tunes itself, and every kernel's calls per key) and ``CLEANFLUSH_AB_CALLS`` (the
calls).  Its Triton cache folder is its own, as always: its disk cache is what is audited.
The pricing process (``_audit.price``) is started as ab starts its own (``_ab._price``), with
its spec and answer in the work folder; ``_audit.judge`` judges, ``_audit.tables`` reads and
writes the tables.  Ctrl-C, SIGTERM and SIGHUP stop the job or the pricing and end with what
was done (ab's handlers).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .. import _ab, _env
from .._ab.compare import MIN_EFFECT, calls_per_run
from .._env import AUDIT_VAR, CALLS_VAR, DECISIONS_VAR, PICK_FILE_VAR, POLICY_VAR
from .._policies import DEFAULT_POLICY
from . import judge, tables
from .libraries import LIBRARIES
from .records import Audited, AuditResult, Priced, Served, ToPrice
from .served import KIND, PRUNER

SCHEMA = 1
# (the entries to price, the calls folder, the work folder) -> each entry's answer: the real one
# starts the pricing process; tests hand in their own
Pricer = Callable[[list[ToPrice], str, str], list[Priced]]


def job_env(base: dict[str, str], work: str) -> dict[str, str]:
    """The job's environment: cleanflush on (the user's policy, else the default), the recorder's files."""
    policy = _env.value(POLICY_VAR)
    try:
        on = _env.parse_policy(policy) or DEFAULT_POLICY
    except ValueError:  # an invalid value: the job runs under the default, as cleanflush itself would say
        on = DEFAULT_POLICY
    return {
        **base,
        POLICY_VAR: on,
        AUDIT_VAR: os.path.join(work, "served.jsonl"),
        DECISIONS_VAR: os.path.join(work, "decisions.jsonl"),
        CALLS_VAR: os.path.join(work, "calls"),
    }


def run(
    command: list[str],
    write: str | None = None,
    keep: str | None = None,
    job_stdout: Any = None,
    min_effect: float = MIN_EFFECT,
    pricer: Pricer | None = None,
) -> tuple[AuditResult, int]:
    """Audit ``command``'s served picks; return (record, exit code: the job's 0 or 1, 128 + the
    signal that stopped it).  ``keep`` (new or empty) keeps the work folder; else it is removed."""
    started, problems = time.monotonic(), list[str]()
    work = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="cleanflush-audit-")
    os.makedirs(os.path.join(work, "calls"), exist_ok=True)
    base = _env.for_child(**dict.fromkeys((POLICY_VAR, DECISIONS_VAR, CALLS_VAR, AUDIT_VAR, PICK_FILE_VAR)))
    result = _empty(command, min_effect, keep)
    interrupted, signal_number, previous = False, 0, _ab._stop_on_terminate()
    try:
        result["code"] = _job(command, job_env(base, work), job_stdout)
        _audit(result, work, (pricer or _pricer(base)), write, problems)
    except KeyboardInterrupt as stop:  # the job or the pricing stopped: the record holds what was done
        interrupted, signal_number = True, int(getattr(stop, "signal_number", 2))
        print("cleanflush audit: interrupted; the report covers what was done", file=sys.stderr)
    finally:
        _ab._stop_on_terminate(previous)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    result["problems"] += problems
    result["interrupted"], result["elapsed_s"] = interrupted, time.monotonic() - started
    if interrupted:
        return result, 128 + signal_number
    return result, 1 if result["code"] != 0 else 0


def _empty(command: list[str], min_effect: float, keep: str | None) -> AuditResult:
    return AuditResult(
        schema=SCHEMA,
        command=command,
        code=0,
        min_effect=min_effect,
        entries=[],
        headline=judge.headline([]),
        tuned_here=0,
        skipped_lines=[],
        problems=[],
        written=[],
        elapsed_s=0.0,
        pricing_s=0.0,
        work_dir=keep,
    )


def _job(command: list[str], env: dict[str, str], job_stdout: Any) -> int:
    print(f"cleanflush audit: running the job as shipped: {' '.join(command)}", file=sys.stderr, flush=True)
    try:
        return subprocess.run(command, env=env, stdout=job_stdout).returncode
    except OSError as exc:  # the command cannot start: say so as a shell would
        print(f"cleanflush audit: cannot start {command[0]!r}: {exc.strerror or exc}", file=sys.stderr)
        return 127


def _audit(result: AuditResult, work: str, pricer: Pricer, write: str | None, problems: list[str]) -> None:
    """The served entries the job left in ``work``, priced, judged and (``write``) corrected, into ``result``."""
    lines, skipped = read_served(os.path.join(work, "served.jsonl"))
    decisions, bad = _ab.read_decisions(os.path.join(work, "decisions.jsonl"))
    result["skipped_lines"] = skipped + bad
    result["tuned_here"] = sum(d["kind"] != "calls" for d in decisions)
    counts = calls_per_run([decisions])
    unread = unreadable_tables(lines, work, problems)  # checked before anything is priced
    wanted = [w for w in to_price(lines) if lines[w["id"]].get("table") not in unread]
    started = time.monotonic()
    priced = {p["id"]: p for p in pricer(wanted, os.path.join(work, "calls"), work)} if wanted else {}
    result["pricing_s"] = time.monotonic() - started
    pairs = []
    for number, line in enumerate(lines):
        calls = counts.get((line["op"], line["key"]))
        entry = judge.judge(line, priced.get(number), None if calls is None else int(calls), result["min_effect"])
        if line.get("table") in unread:
            entry = {**entry, "class": judge.NOT_AUDITABLE, "reason": unread[str(line.get("table"))]}
        pairs.append((entry, line))
    _provenance(pairs, problems)
    if write is not None:
        result["written"] = tables.write_corrected(pairs, work, write, problems)
    result["entries"] = [entry for entry, _ in pairs]
    result["headline"] = judge.headline(result["entries"])


def unreadable_tables(lines: list[Served], work: str, problems: list[str]) -> dict[str, str]:
    """The library tables the entries name (kept by the recorder) that cannot be read as their
    library reads one, each with why, said once in ``problems``: their entries are not priced."""
    found: dict[str, str] = {}
    for line in lines:
        library, kept = LIBRARIES.get(line["source"]), line.get("table")
        if library is None or not isinstance(kept, str) or kept in found:
            continue
        if os.path.basename(kept) != kept:
            found[kept] = f"{kept!r} is not a file of the audit's"
        else:
            found[kept] = tables.read_table(os.path.join(work, kept), library)[1] or ""
        if found[kept]:
            problems.append(found[kept])
    return {kept: f"its table cannot be read: {why}" for kept, why in found.items() if why}


def read_served(path: str) -> tuple[list[Served], list[str]]:
    """The served entries the job recorded, each kernel and key once (the first process's), and a
    line for each line of the file that is not one (a process killed mid-write leaves a torn line)."""
    found: dict[tuple[str, str], Served] = {}
    bad: list[str] = []
    if not os.path.isfile(path) or os.path.islink(path):
        return [], []
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, text in enumerate(f, 1):
            try:
                line = served_line(text)
            except ValueError as exc:  # json's own errors are ValueErrors too
                bad.append(_ab.skipped(path, number, str(exc)))
                continue
            found.setdefault((line["op"], line["key"]), line)
    return list(found.values()), bad


def served_line(text: str) -> Served:
    """One line of the recorder's file, checked; ValueError saying what is wrong with it."""
    line = json.loads(text)
    if not isinstance(line, dict) or line.get("kind") != KIND:
        raise ValueError("not a served entry")
    for name, kind in LINE_FIELDS:
        if not isinstance(line.get(name), kind):
            raise ValueError(f"its {name} is not a {kind.__name__}")
    if not all(isinstance(label, str) for label in line["offered"]):
        raise ValueError("its offered configs are not names")
    if not all(isinstance(spec, dict) and isinstance(spec.get("kwargs"), dict) for spec in line["specs"].values()):
        raise ValueError("its specs are not configs")
    entry = line.get("entry")
    if entry is not None and not (
        isinstance(entry, dict)
        and isinstance(entry.get("family"), str)
        and isinstance(entry.get("signature"), str)
        and isinstance(entry.get("config"), dict)
    ):
        raise ValueError("its table entry is not a family, a signature and a config")
    if not isinstance(line.get("table", ""), str) or not isinstance(line.get("device") or "", str):
        raise ValueError("its table or device is not a name")
    return line  # type: ignore[return-value]  # checked above: the keys a served line needs


LINE_FIELDS = (
    ("op", str),
    ("key", str),
    ("source", str),
    ("shipped", str),
    ("offered", list),
    ("specs", dict),
    ("call", dict),
)


def to_price(lines: list[Served]) -> list[ToPrice]:
    """The entries the pricing process can re-tune: a call recorded, a search to time."""
    return [
        ToPrice(id=number, file=line["call"]["file"], shipped=line["shipped"], offered=line["offered"])
        for number, line in enumerate(lines)
        if isinstance(line["call"].get("file"), str) and line["offered"] and line["source"] != PRUNER
    ]


def _provenance(pairs: list[tuple[Audited, Served]], problems: list[str]) -> None:
    """Where each library entry came from (the library's own tables, read and checked once)."""
    shipped: dict[str, dict[str, Any]] = {}
    for entry, line in pairs:
        library = LIBRARIES.get(line["source"])
        if library is None or "entry" not in line:
            continue
        folder = line.get("shipped_tables")
        if folder not in shipped:
            shipped[str(folder)] = tables.shipped_tables(folder, library, problems)
        entry["provenance"], entry["other_gpu"] = tables.provenance(line, shipped[str(folder)], library)


def _pricer(base: dict[str, str]) -> Pricer:
    """The real pricing process, in a process of its own (ab's way of starting one)."""

    def price(wanted: list[ToPrice], calls: str, work: str) -> list[Priced]:
        print(f"cleanflush audit: re-tuning and pricing {len(wanted)} served entries", file=sys.stderr, flush=True)
        spec, out = os.path.join(work, "price-spec.json"), os.path.join(work, "prices.json")
        with open(spec, "w", encoding="utf-8") as f:
            json.dump({"entries": wanted, "calls_folder": calls}, f)
        child = subprocess.run(
            # imported by name, not run as __main__: the child is the module that tests see
            [sys.executable, "-c", "import sys; from cleanflush._audit.price import main; sys.exit(main())", spec, out],
            env={**base, "TEARDOWN_CUPTI": "1"},  # no CUPTI left attached after the profiler (pytorch#144455)
            stdout=subprocess.DEVNULL,
        )
        if child.returncode != 0 or not os.path.exists(out):
            return [Priced(id=w["id"], error=f"the pricing process failed (exit {child.returncode})") for w in wanted]
        with open(out, encoding="utf-8") as f:
            found: list[Priced] = json.load(f)
        return found

    return price
