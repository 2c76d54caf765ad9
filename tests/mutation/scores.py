"""The mutation score per module, from mutmut's results (run from the project root after
``mutmut run``):  python tests/mutation/scores.py

A uniform sample where a whole run takes too long (docs/development.md has the commands):
``scores.py sample N SEED MODULE...`` prints N mutant names drawn from those modules (a
module is a path under src/, a folder taking all below it); after ``mutmut run`` on them,
``scores.py score FILE`` scores the names in FILE with the Wilson 95% interval.

Detected = killed, or timed out (the mutant hung a test).  Mutants that
tests/mutation/SURVIVORS.md lists as equivalent (a list item with the mutant's full name in
backquotes and the word "equivalent") are left out of the score, and counted apart.
"""

from __future__ import annotations

import collections
import json
import math
import pathlib
import random
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


def killed_on_a_gpu() -> set[str]:
    """Mutants that SURVIVORS.md lists (in a list item that says "Killed on the H200") as killed
    by the GPU tests: the CPU run cannot reach them."""
    path = ROOT / "tests" / "mutation" / "SURVIVORS.md"
    names: set[str] = set()
    if path.exists():
        for item in re.split(r"\n(?=- |#)", path.read_text()):
            if item.startswith("- Killed on the H200"):
                names.update(re.findall(r"`(cleanflush\.[^`]+__mutmut_\d+)`", item))
    return names


def results() -> dict[str, dict[str, int | None]]:
    """Each module's mutants (path under src/ -> mutant name -> mutmut's exit code)."""
    table = {}
    for meta in sorted((ROOT / "mutants" / "src").rglob("*.py.meta")):
        found = json.loads(meta.read_text()).get("exit_code_by_key", {})
        if found:
            table[str(meta.relative_to(ROOT / "mutants" / "src"))[: -len(".meta")]] = found
    return table


def status(name: str, code: int | None, same: set[str], on_gpu: frozenset[str] = frozenset()) -> str:
    """What became of a mutant: equivalent (SURVIVORS.md), killed by the GPU tests where the
    CPU run did not (SURVIVORS.md), or mutmut's exit code in words."""
    if name in same:
        return "equivalent"
    found = STATUS.get(code, "suspicious")
    return "killed on a GPU" if name in on_gpu and found != "killed" else found


def scores() -> dict[str, collections.Counter[str]]:
    same = equivalent()
    return {
        module: collections.Counter(status(name, code, same) for name, code in found.items())
        for module, found in results().items()
    }


def sample(n: int, seed: int, modules: list[str]) -> list[str]:
    names = sorted(
        name
        for module, found in results().items()
        if any(module == m or module.startswith(m.rstrip("/") + "/") for m in modules)
        for name in found
    )
    return random.Random(seed).sample(names, min(n, len(names)))


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    centre = (hits + z * z / 2) / (n + z * z)
    half = z * math.sqrt(hits * (n - hits) / n + z * z / 4) / (n + z * z)
    return centre - half, centre + half


def score(names: list[str]) -> str:
    codes = {name: code for found in results().values() for name, code in found.items()}
    same, on_gpu = equivalent(), frozenset(killed_on_a_gpu())
    of = {n: status(n, codes.get(n), same, on_gpu) for n in names}
    counts = collections.Counter(of.values())
    judged = len(names) - counts["equivalent"] - counts["not checked"]
    hits = counts["killed"] + counts["timeout"] + counts["killed on a GPU"]
    low, high = wilson(hits, judged) if judged else (0.0, 0.0)
    survivors = sorted(n for n, s in of.items() if s in ("survived", "no tests"))
    return "\n".join(
        [
            f"{len(names)} sampled, {judged} judged: {hits / judged if judged else 0:.1%} "
            f"(Wilson 95%: {low:.1%}-{high:.1%}); " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
            *survivors,
        ]
    )


def main(argv: list[str]) -> None:
    if argv[:1] == ["sample"]:
        print("\n".join(sample(int(argv[1]), int(argv[2]), argv[3:])))
        return
    if argv[:1] == ["score"]:
        print(score(pathlib.Path(argv[1]).read_text().split()))
        return
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
