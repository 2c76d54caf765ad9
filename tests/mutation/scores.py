"""The mutation score per module, from mutmut's results (run from the project root after
``mutmut run``):  python tests/mutation/scores.py [--markdown]

Detected = killed, or timed out (the mutant hung a test).  Mutants that
tests/mutation/SURVIVORS.md lists as equivalent (a list item with the mutant's full name in
backquotes and the word "equivalent") are left out of the score, and counted apart.
"""

from __future__ import annotations

import collections
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
STATUS = {
    1: "killed",
    3: "killed",
    0: "survived",
    5: "no tests",
    33: "no tests",
    34: "skipped",
    36: "timeout",
    24: "timeout",
    -24: "timeout",
    152: "timeout",
    255: "timeout",
    None: "not checked",
}


def equivalent() -> set[str]:
    path = ROOT / "tests" / "mutation" / "SURVIVORS.md"
    names: set[str] = set()
    if path.exists():
        # one list item per "- " line and the indented lines under it
        for item in re.split(r"\n(?=- |#)", path.read_text()):
            if re.search(r"(?<!not )equivalent", item):
                names.update(re.findall(r"`(cleanflush\.[^`]+__mutmut_\d+)`", item))
    return names


def scores() -> dict[str, collections.Counter[str]]:
    same = equivalent()
    table: dict[str, collections.Counter[str]] = {}
    for meta in sorted((ROOT / "mutants" / "src").rglob("*.py.meta")):
        results = json.loads(meta.read_text()).get("exit_code_by_key", {})
        if not results:
            continue
        module = str(meta.relative_to(ROOT / "mutants" / "src"))[: -len(".meta")]
        counts: collections.Counter[str] = collections.Counter()
        for name, code in results.items():
            counts["equivalent" if name in same else STATUS.get(code, "suspicious")] += 1
        table[module] = counts
    return table


def main(argv: list[str]) -> None:
    rows = [
        "| module | mutants | killed | timeout | survived | no tests | equivalent | score |",
        "|---|---|---|---|---|---|---|---|",
    ]
    total: collections.Counter[str] = collections.Counter()
    for module, c in scores().items():
        total.update(c)
        rows.append(_row(module, c))
    rows.append(_row("**all**", total))
    print("\n".join(rows))


def _row(module: str, c: collections.Counter[str]) -> str:
    n = sum(c.values())
    judged = n - c["equivalent"] - c["not checked"]
    score = (c["killed"] + c["timeout"]) / judged if judged else 0.0
    pending = f" ({c['not checked']} not checked)" if c["not checked"] else ""
    return (
        f"| {module} | {n} | {c['killed']} | {c['timeout']} | {c['survived']} | {c['no tests']} | "
        f"{c['equivalent']} | {score:.1%}{pending} |"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
