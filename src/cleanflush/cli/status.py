"""``cleanflush status``: what a Python program started from this shell would get.

The environment is read as the shell has it (``_env.AT_START``: before this process's own
import of cleanflush wrote to it).  The core targets are imported here with cleanflush
installed, so each row says whether that target would be patched and why not; harnesses
that are installed but not imported are reported as patched when imported.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import site
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import cleanflush

from .. import _agree, _env, _pick, _policies, _registry, _targets
from ._output import EXIT_FAIL, EXIT_OK, EXIT_USAGE, emit, help_text, json_option, output_problem

SCHEMA = 2
PROBLEMS = ("unsupported", "failed")


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    status = commands.add_parser(
        "status",
        help="what a program started from this shell would get (no GPU needed)",
        description="What a Python program started from this shell would get: the policy CLEANFLUSH "
        "asks for, whether the autoload is installed in this interpreter, and per target the "
        "installed version, its state (patched, pending: patched when imported, disabled, "
        "unsupported, failed, absent, off) and why.",
        epilog="exit codes: 0 success (with --check: nothing to fix), 1 --check found a problem, 2 usage error",
    )
    json_option(status)
    status.add_argument(
        "--check",
        nargs="?",
        const="all",
        metavar="TARGETS",
        help=help_text(
            "exit 1 when the settings are invalid or a target cannot be patched; TARGETS "
            f"(comma-separated: {', '.join(_registry.NAMES)}) limits it to those"
        ),
    )
    return status


def _autoload_file() -> str | None:
    for directory in list(site.getsitepackages()) + [site.getusersitepackages()]:
        path = os.path.join(directory, "cleanflush.pth")
        if os.path.exists(path):
            return path
    return None


def programs_get(value: str | None, pick: str | None = None) -> tuple[str | None, str]:
    """(policy or None, what a program started with ``CLEANFLUSH=value`` and
    ``CLEANFLUSH_PICK=pick`` gets)."""
    try:
        chosen = _env.parse_policy(value)
    except ValueError as exc:
        return None, f"INVALID: {exc}; programs keep the stock flush"
    unset = value is None or not value.strip()
    if unset and (pick or "").strip():  # the start-up hook wakes for a pick setting alone (_cleanflush_boot.boot)
        return chosen, (
            f"{_env.POLICY_VAR} is unset, but {pick} turns cleanflush on: every Python program "
            f"started here, and its children, flushes with {chosen} from its first import of torch or triton"
        )
    if unset:
        return None, (
            f"{_env.POLICY_VAR} is unset: programs keep the stock flush unless they import "
            f"cleanflush (then {_policies.DEFAULT_POLICY})"
        )
    if chosen is None:
        return None, f"{_env.POLICY_VAR}={value}: off, even for programs that import cleanflush"
    return chosen, (
        f"{_env.POLICY_VAR}={value}: every Python program started here, and its children, "
        f"flushes with {chosen} from its first import of torch or triton"
    )


PICK_SETTINGS = (_env.PICK_VAR, _env.PICK_FLOOR_VAR, _env.PICK_AGAIN_VAR)


def setting_problems(environment: Mapping[str, str | None]) -> list[str]:
    """One line for each invalid setting in ``environment``, naming the variable and the valid values."""
    found = []
    try:
        _env.parse_policy(environment.get(_env.POLICY_VAR))
    except ValueError as exc:
        found.append(f"{exc}; programs keep the stock flush")
    disabled = _env.parse_disabled(environment.get(_env.DISABLE_VAR), _registry.NAMES).problem(_registry.NAMES)
    found += [disabled] if disabled else []
    rule, floor, again = (environment.get(name) for name in PICK_SETTINGS)
    for problem in (_pick.rule_from(rule)[1], _pick.floor_from(floor)[1], _pick.again_ms_from(again)[1]):
        found += [problem] if problem else []
    store = _agree.mode_from(environment.get(_env.PICK_STORE_VAR))[1]
    return found + ([store] if store else [])


def waking(environment: Mapping[str, str | None]) -> str | None:
    """The pick setting that turns cleanflush on by itself at start-up (``_cleanflush_boot``), as
    ``NAME=value``, or None."""
    for name in (_env.PICK_VAR, _env.PICK_FILE_VAR):
        if (environment.get(name) or "").strip():
            return f"{name}={environment[name]}"
    return None


def pick_rule_says(
    value: str | None, floor: str | None = None, again: str | None = None, switch: str | None = None
) -> str:
    """What the autotuners of a program started with ``CLEANFLUSH_PICK=value`` keep, and the
    stable rule's settings from ``CLEANFLUSH_PICK_FLOOR=floor`` and ``CLEANFLUSH_PICK_AGAIN_MS=again``
    (an invalid one is said whatever the rule: a ``pick()`` block selects the stable rule in code),
    under ``CLEANFLUSH=switch``: where that keeps cleanflush out, no rule of its applies."""
    rule, rule_problem = _pick.rule_from(value)
    band_floor, floor_problem = _pick.floor_from(floor)
    again_ms, again_problem = _pick.again_ms_from(again)
    problems = [p for p in (rule_problem, floor_problem, again_problem) if p]
    if problems:
        return "INVALID: " + " | ".join(problems)
    if value is None or not value.strip():
        return f"{_env.PICK_VAR} is unset: autotuners keep their own pick ({_pick.DEFAULT_PICK})"
    record = _pick.RULES[rule]
    if record.choose is None:
        return f"{_env.PICK_VAR}={value}: {record.summary}"
    if programs_get(switch, value)[0] is None:
        return (
            f"{_env.PICK_VAR}={value} does nothing: {_env.POLICY_VAR}={switch} keeps cleanflush out of programs "
            "started here, so autotuners keep their own pick"
        )
    said = (
        f"{_env.PICK_VAR}={value}: {record.summary} (its floor {band_floor * 100:g}%; at least "
        f"{_pick.TICKS_ALIKE:g} steps of the {_pick.TICK_MS * 1e6:g} ns event timer where the timings are single "
        "readings of it"
    )
    if record.descends_beyond_floor:
        said += "; Inductor's coordinate descent steps only beyond it"
    if record.times_again:
        length = "as long as the autotuner's own timings" if again_ms is None else f"{again_ms:g} ms"
        said += f"); configs a Triton autotuner timed with do_bench are timed again for {length}"
    else:
        said += ")"
    return said


def agreement_says(environment: Mapping[str, str | None]) -> str:
    """Whether picks are agreed across ranks (the job's store) and runs (the pick file) in a
    program started with ``environment``."""
    if _env.is_off(environment.get(_env.POLICY_VAR)):
        return f"nothing agreed: {_env.POLICY_VAR} keeps cleanflush out of programs started here"
    mode, problem = _agree.mode_from(environment.get(_env.PICK_STORE_VAR))
    rule = _pick.RULES[_pick.rule_from(environment.get(_env.PICK_VAR))[0]]
    on = mode == _agree.ON or (mode == _agree.AUTO and rule.choose is not None)
    ranks = (
        "ranks of a torch.distributed job agree on every pick through its store"
        if on
        else f"ranks keep their own picks (the store is used under a rule that chooses, or {_env.PICK_STORE_VAR}=on)"
    )
    path = environment.get(_env.PICK_FILE_VAR)
    runs = f"runs keep and take picks in {path} ({_pick_file_state(path)})" if path else f"{_env.PICK_FILE_VAR} unset"
    return ("INVALID: " + problem + "; " if problem else "") + f"{ranks}; {runs}"


def _pick_file_state(path: str) -> str:
    """What a pick file holds now, in a few words."""
    names = _agree.files_of(path)
    if not names:
        return "none written yet"
    entries, unreadable = 0, []
    for name in names:
        try:
            entries += len(_agree.read_file(name))
        except (ValueError, UnicodeDecodeError) as exc:  # what a program would say of it, once
            unreadable.append((name, exc))
    if not unreadable:
        return f"{entries} decision(s) in {len(names)} file(s)"
    if len(names) == 1:
        return f"unreadable: {unreadable[0][1]}; its picks are not taken"
    name, why = unreadable[0]  # a folder: the others' picks are still taken
    return (
        f"{entries} decision(s) in {len(names) - len(unreadable)} file(s); {len(unreadable)} unreadable, whose "
        f"picks are not taken ({os.path.basename(name)}: {why})"
    )


def _probe(progress: bool, wanted: list[str] | None = None) -> list[dict[str, Any]]:
    """Import what the core targets need (those in ``wanted``, where given), so that their rows
    tell the truth; an installed package whose import fails is a row of its own."""
    errors = []
    start = time.perf_counter()
    with warnings.catch_warnings(), _prints_to_stderr():
        warnings.simplefilter("ignore")  # torch's own import warnings are not ours to show
        for target in _registry.TARGETS:
            if not target.probe or _targets.version(target) is None or (wanted and target.name not in wanted):
                continue  # nothing to import for it, not installed (its row says so), or not asked about
            for module in target.probe:
                if module in sys.modules:
                    continue
                if progress:
                    print(f"cleanflush status: importing {module} ...", file=sys.stderr, flush=True)
                try:
                    importlib.import_module(module)
                except Exception as exc:  # a broken install is a finding, not a crash
                    errors.append(
                        {
                            "name": target.name,
                            "target": module,
                            "version": _targets.version(target),
                            "state": "failed",
                            "patched": False,
                            "detail": f"installed, but the import failed: {exc!r}",
                        }
                    )
                    break
    if progress:
        print(f"cleanflush status: done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return errors


@contextlib.contextmanager
def _prints_to_stderr() -> Iterator[None]:
    """What the imports print (a harness's banner) goes to stderr, from Python and from C
    alike: stdout carries the record alone."""
    if sys.stdout is not None:
        sys.stdout.flush()
    try:
        saved: int | None = os.dup(1)
        os.dup2(2, 1)
    except OSError:  # stdout closed: nothing to keep clean
        saved = None
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            sys.stderr.flush()
            os.dup2(saved, 1)
            os.close(saved)


def collect(progress: bool = False, wanted: list[str] | None = None) -> dict[str, Any]:
    """The record behind ``cleanflush status``: the targets in ``wanted`` (every target, where
    None) are imported so that their rows tell the truth; the others' rows say what they are
    without it (Inductor's import alone is most of status's time)."""
    start = _env.AT_START
    value = start[_env.POLICY_VAR]
    policy, says = programs_get(value, waking(start))
    off = _env.is_off(value)
    if not cleanflush.is_installed():  # CLEANFLUSH=0 or invalid here: find out what *would* be patched
        _env.export(_env.POLICY_VAR, None)
        cleanflush.install()
    errors = _probe(progress, wanted)
    disabled = _env.parse_disabled(start[_env.DISABLE_VAR], _registry.NAMES)
    rows = [row.as_dict() for row in cleanflush.status()] + errors
    if off:  # what they would get is nothing; what is patchable stays in the detail
        rows = [
            {
                **row,
                "state": "off",
                "patched": False,
                "detail": f"{_env.POLICY_VAR}={value} keeps it stock (with cleanflush on: {row['state']}, "
                f"{row['detail']})",
            }
            for row in rows
        ]
    return {
        "schema": SCHEMA,
        "cleanflush": cleanflush.__version__,
        "python": sys.executable,
        "environment": {name: start[name] for name in _env.VARIABLES},
        "programs_get": says,
        "policy": policy,
        "pick_rule": pick_rule_says(
            start[_env.PICK_VAR], start[_env.PICK_FLOOR_VAR], start[_env.PICK_AGAIN_VAR], value
        ),
        "disabled": sorted(disabled.names),
        "disable_problem": disabled.problem(_registry.NAMES),
        "agreement": agreement_says(start),
        "setting_problems": setting_problems(start),
        "autoload_file": _autoload_file(),
        "targets": rows,
    }


def problems(data: dict[str, Any], wanted: list[str] | None = None) -> list[str]:
    """What ``status --check`` fails on: each invalid setting, or a target that cannot be
    patched (among the targets named in ``wanted``, when given)."""
    found = list(data["setting_problems"])
    rows = [t for t in data["targets"] if not wanted or t["name"] in wanted]
    found += [f"{t['target']}: {t['state']}: {t['detail']}" for t in rows if t["state"] in PROBLEMS]
    if wanted:
        found += [
            f"{name}: {t['state']}: {t['detail']}"
            for name in wanted
            for t in rows
            if t["name"] == name and t["state"] in ("absent", "disabled", "off")
        ]
    elif not any(t["state"] in ("patched", "pending") for t in rows):
        found.append("no benchmarker here can be patched (is torch or triton installed?)")
    return found


def format_text(data: dict[str, Any]) -> str:
    pth = data["autoload_file"]
    disabled = ", ".join(data["disabled"]) or "none"
    lines = [
        f"cleanflush {data['cleanflush']} ({data['python']})",
        f"environment  {data['programs_get']}",
        f"pick rule    {data['pick_rule']}",
        f"agreement    {data['agreement']}",
        f"disabled     {disabled} ({_env.DISABLE_VAR})"
        + (f"; {data['disable_problem']}" if data["disable_problem"] else ""),
        "autoload     "
        + (
            f"{pth}: wakes on the first import of torch, triton or a harness when {_env.POLICY_VAR} is set"
            if pth
            else f"cleanflush.pth not found in this interpreter: {_env.POLICY_VAR} does nothing here"
        ),
        f"report       {data['environment'][_env.REPORT_VAR] or f'{_env.REPORT_VAR} unset'}",
        "",
    ]
    rows = [("target", "version", "state", "detail")]
    rows += [(t["target"], t["version"] or "-", t["state"], t["detail"]) for t in data["targets"]]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r[:3], widths)) + "  " + r[3] for r in rows]
    return "\n".join(lines)


def _wanted(check: str | None, parser: argparse.ArgumentParser) -> list[str] | None:
    if check in (None, "all"):
        return None
    assert check is not None
    names = [w.strip().lower() for w in check.split(",") if w.strip()]
    if not names:
        parser.error(f"--check takes target names (comma-separated: {', '.join(_registry.NAMES)}), or none for all")
    unknown = [n for n in names if n not in _registry.NAMES]
    if unknown:
        parser.error(f"--check names unknown targets {', '.join(unknown)}; valid: {', '.join(_registry.NAMES)}")
    return names


def main(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    problem = output_problem(args.json)
    if problem:
        print(f"cleanflush status: {problem}", file=sys.stderr)
        return EXIT_USAGE
    wanted = _wanted(args.check, parser)
    data = collect(progress=sys.stderr.isatty(), wanted=wanted)
    data["problems"] = problems(data, wanted)
    verdict = ""
    if args.check:
        verdict = "check: FAIL\n" + "\n".join(f"  - {p}" for p in data["problems"]) if data["problems"] else "check: OK"
    # with the record on stdout, the table it holds is not repeated on stderr: the check's verdict alone
    text = verdict if args.json == "-" else "\n\n".join(part for part in (format_text(data), verdict) if part)
    emit(data, text, args.json)
    return EXIT_FAIL if args.check and data["problems"] else EXIT_OK
