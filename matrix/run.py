"""Supported-versions matrix: install each triton line against torch 2.13 (CPU build) and
each torch line with the triton it pins, then check in a fresh interpreter what cleanflush
does there (matrix/check.py).  Writes matrix/results/*.json, matrix/RESULTS.md and the
supported-versions table in docs/harnesses.md.

    python matrix/run.py                 # everything (downloads several GB; ~40 min)
    python matrix/run.py torch-2.9.1     # one pairing
    python matrix/run.py --table-only    # rebuild RESULTS.md and README from results/

Run before each release; CI runs only the default pairing.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "matrix" / "results"
WORK = Path(os.environ.get("MATRIX_DIR", "/tmp/cleanflush-matrix"))

# name -> pip requirements.  torch 2.13.0 resolves to the CPU build where it lies on disk.
PAIRINGS = {
    f"triton-{v}": ["torch==2.13.0", f"triton=={v}"]
    for v in ("3.0.0", "3.1.0", "3.2.0", "3.3.1", "3.4.0", "3.5.1", "3.6.0", "3.7.1", "3.8.0", "3.9.0")
}
PAIRINGS |= {
    f"torch-{v}": [f"torch=={v}"]
    for v in ("2.5.1", "2.6.0", "2.7.1", "2.8.0", "2.9.1", "2.10.0", "2.11.0", "2.12.1", "2.14.1", "2.15.0")
}

COLUMNS = {
    "triton flush": lambda t: (
        # "name" since the target registry; "package" in the records made before it
        t.get("name", t.get("package")) == "triton"
        and ("nvidia" in t["target"] or t["target"] == "triton.testing.do_bench")
    ),
    "InductorBenchmarker": lambda t: t["target"] == "InductorBenchmarker.benchmark_gpu",
    "TorchProfilerBenchmarker": lambda t: t["target"] == "TorchProfilerBenchmarker.benchmark_gpu",
    "_do_bench_using_profiling": lambda t: t["target"].endswith("_do_bench_using_profiling"),
    "TritonBenchmarker": lambda t: t["target"] == "TritonBenchmarker.benchmark_gpu",
}
EXPECTED_TRITON = {"write-read": ["zero_", "sum"], "read": ["sum"], "write": ["zero_"]}


def sh(*cmd: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def build_wheel() -> Path:
    dist = WORK / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    out = sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(ROOT))
    if out.returncode:
        sys.exit(f"building the wheel failed:\n{out.stderr}")
    return next(dist.glob("cleanflush-*.whl"))


def run_pairing(name: str, requirements: list[str], wheel: Path) -> dict:
    venv = WORK / f"venv-{name}"
    shutil.rmtree(venv, ignore_errors=True)
    print(f"[{name}] installing {' '.join(requirements)}", flush=True)
    sh(sys.executable, "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    env = dict(os.environ)
    env.pop("CLEANFLUSH", None)
    if any(r.startswith("torch==2.15") for r in requirements):
        env["PIP_CONFIG_FILE"] = os.devnull  # this machine's pip config caps torch at 2.14.1
    install = sh(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-cache-dir",
        *requirements,
        "wrapt",
        str(wheel),
        env=env,
        timeout=3600,
    )
    if install.returncode:
        lines = [line for line in install.stderr.splitlines() if "WARNING: Location" not in line]
        return {"name": name, "requirements": requirements, "install_error": "\n".join(lines)[-1500:]}
    print(f"[{name}] checking", flush=True)
    check = sh(python, str(ROOT / "matrix" / "check.py"), env=env, timeout=1800, cwd=str(WORK))
    shutil.rmtree(venv, ignore_errors=True)
    try:
        record = json.loads(check.stdout.strip().splitlines()[-1])
    except Exception:
        return {"name": name, "requirements": requirements, "check_error": check.stderr[-1500:]}
    record.update(name=name, requirements=requirements)
    return record


def unsupported(target: dict) -> bool:
    """Whether a target row is there but not patched (status says why).  Rows carry ``state``
    since the target registry; before it, the detail began with the state."""
    if "state" in target:
        return target["state"] == "unsupported" and not target["detail"].startswith("not in this torch")
    return not target["patched"] and not target["detail"].startswith(("not in this torch", "not imported"))


def cell(record: dict, column: str) -> str:
    rows = [t for t in record.get("targets", []) if COLUMNS[column](t)]
    if not rows:
        return "absent"
    if rows[0]["patched"]:
        return "patched"
    return "unsupported" if unsupported(rows[0]) else "absent"


def skipped(record: dict) -> list[str]:
    """The checks this pairing could not run on CPU (each sequence given as a reason)."""
    return [key for key, names in record.get("sequences", {}).items() if isinstance(names, str)]


def checks(record: dict) -> str:
    if "install_error" in record:
        return "did not install"
    if "check_error" in record:
        return "check crashed"
    problems = []
    if not record["restored_exactly"] or not record["rewrapped"]:
        problems.append("restore")
    for key, names in record["sequences"].items():
        if isinstance(names, str):
            continue  # reported by skipped()
        target, policy = key.split(" | ")
        if target.startswith("triton") and names != EXPECTED_TRITON[policy]:
            problems.append(f"sequence {key}")
        if target == "InductorBenchmarker":
            calls = [i for i, n in enumerate(names) if n == "neg"][1:]
            want = ["zero_"] if policy == "write" else ["zero_", "sum"]
            if not calls or any(names[i - len(want) : i] != want for i in calls):
                problems.append(f"sequence {key}")
    if not record["env_switch_matches"]:
        problems.append("CLEANFLUSH=1")
    if record.get("errors"):
        problems.append("import errors")
    if problems:
        return "FAIL: " + ", ".join(problems)
    return "all pass" + "".join(f"; {key} sequence not checked (needs a GPU)" for key in skipped(record))


def reasons(record: dict) -> list[str]:
    return sorted({f"{t['target']}: {t['detail']}" for t in record.get("targets", []) if unsupported(t)})


def _ranges(versions: list[str], order: list[str]) -> str:
    """'2.7.1-2.12.1, 2.14.1' from the versions that are contiguous in ``order``."""
    runs: list[list[str]] = []
    for v in order:
        if v in versions:
            if runs and order.index(runs[-1][-1]) == order.index(v) - 1:
                runs[-1].append(v)
            else:
                runs.append([v])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs) or "none"


def summary(records: list[dict]) -> list[str]:
    """The short README table: per target, the lines where it is patched and where it is not."""
    by_axis: dict[str, dict[str, dict]] = {"triton": {}, "torch": {}}
    for r in records:
        if "targets" not in r:
            continue
        axis, version = r["name"].split("-", 1)
        by_axis[axis][version] = r
        if axis == "triton" and version == "3.7.1":
            by_axis["torch"].setdefault(r["torch"].split("+")[0], r)  # the CI pairing
    lines = ["| target | patched on | not patched (status says why) |", "|---|---|---|"]
    for column in COLUMNS:
        axis = "triton" if column == "triton flush" else "torch"
        order = sorted(by_axis[axis], key=lambda v: tuple(int(x) for x in v.split(".")))
        states = {v: cell(r, column) for v, r in by_axis[axis].items()}
        patched = _ranges([v for v, c in states.items() if c == "patched"], order)
        other = [v for v, c in states.items() if c != "patched"]
        absent = [v for v in other if states[v] == "absent"]
        not_patched = ", ".join(
            filter(
                None,
                [
                    f"{axis} {_ranges([v for v in other if v not in absent], order)}"
                    if len(other) > len(absent)
                    else "",
                    f"absent in {axis} {_ranges(absent, order)}" if absent else "",
                ],
            )
        )
        label = {"triton flush": "Triton do_bench, autotuner, Proton"}.get(column, column)
        lines.append(f"| {label} | {axis} {patched} | {not_patched or '-'} |")
    failed = [r["name"] for r in records if not checks(r).startswith("all pass")]
    partial = sorted(
        {key: [r["name"] for r in records if key in skipped(r)] for r in records for key in skipped(r)}.items()
    )
    lines.append("")
    if failed:
        lines.append(f"Checks failed or could not run for: {', '.join(failed)}.")
    else:
        lines.append(
            "Every line above passed every check it ran (exact restore, flush sequence on CPU, "
            "CLEANFLUSH=1)" + ("." if not partial else ", except:")
        )
    for key, names in partial:
        lines.append(
            f"the {key} flush sequence was not checked on {', '.join(names)}: it needs a GPU there "
            "(benchmark_gpu takes no device_type before torch 2.13)."
        )
    return lines


def dates(records: list[dict]) -> str:
    """When the records were made: one date, or the span where pairings were run apart."""
    made = sorted({r["date"] for r in records if "date" in r}) or ["?"]
    return made[0] if len(made) == 1 else f"{made[0]} to {made[-1]}; each line's date is in its record"


def write_tables() -> None:
    records = []
    for name in PAIRINGS:
        path = RESULTS / f"{name}.json"
        if path.exists():
            records.append(json.loads(path.read_text()))
    head = "| pairing | torch | triton | " + " | ".join(COLUMNS) + " | checks |"
    sep = "|" + "---|" * (len(COLUMNS) + 4)
    lines = [head, sep]
    for r in records:
        cells = [cell(r, c) for c in COLUMNS] if "targets" in r else ["-"] * len(COLUMNS)
        lines.append(
            f"| {r['name']} | {r.get('torch', '-')} | {r.get('triton', '-')} | "
            + " | ".join(cells)
            + f" | {checks(r)} |"
        )
    notes = []
    for r in records:
        for reason in reasons(r):
            notes.append(f"- {r['name']}: {reason}")
        if "install_error" in r:
            notes.append(
                f"- {r['name']}: did not install: {r['install_error'].splitlines()[-1] if r['install_error'] else ''}"
            )
        for err in r.get("errors", []):
            notes.append(f"- {r['name']}: {err[:300]}")
    text = [
        "# Supported versions: the patch matrix",
        "",
        f"Run with `python matrix/run.py` on CPU ({dates(records)}) "
        f"(Python {records[0].get('python', '?') if records else '?'}): "
        "each pairing in a fresh venv, checked in a fresh interpreter by matrix/check.py. "
        "`patched`: the target exists and cleanflush wraps it; `unsupported`: it exists, stock flush kept, "
        "status says why; `absent`: not in that version. `checks`: every patched attribute restored "
        "exactly by `uninstall()` and wrapped again by `install()`; the flush runs the expected tensor "
        "operations on CPU tensors under each policy; `CLEANFLUSH=1` without an import patches the same "
        "attributes; no target failed to import.",
        "",
        *lines,
        "",
        "Unsupported targets and other findings:",
        "",
        *(notes or ["- none"]),
        "",
    ]
    (ROOT / "matrix" / "RESULTS.md").write_text("\n".join(text))
    doc = ROOT / "docs" / "harnesses.md"
    body = doc.read_text()
    start, end = "<!-- matrix:begin -->", "<!-- matrix:end -->"
    if start in body and end in body:
        table = "\n".join(
            [
                f"From matrix/RESULTS.md ({dates(records)}; each line installed and checked on CPU):",
                "",
                *summary(records),
            ]
        )
        body = body[: body.index(start) + len(start)] + "\n" + table + "\n" + body[body.index(end) :]
        doc.write_text(body)


def main(argv: list[str]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    date = datetime.date.today().isoformat()
    if "--table-only" not in argv:
        WORK.mkdir(parents=True, exist_ok=True)
        chosen = [a for a in argv if not a.startswith("--")] or list(PAIRINGS)
        wheel = build_wheel()
        for name in chosen:
            record = run_pairing(name, PAIRINGS[name], wheel)
            record["date"] = date
            (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=1))
            print(f"[{name}] {checks(record)}", flush=True)
    write_tables()


if __name__ == "__main__":
    main(sys.argv[1:])
