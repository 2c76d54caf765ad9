"""The package's shape, as rules a change cannot break unnoticed: no import cycle (lazy imports
included), every broad ``except`` says why, every patch module loads without torch or triton
and takes its name from the registry."""

from __future__ import annotations

import ast
import importlib
import io
import json
import tokenize
from pathlib import Path

import pytest

from cleanflush import _registry

from .conftest import reads_the_source, run_python

SRC = Path(__file__).resolve().parent.parent / "src"


def modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of src/ it imports, anywhere in its body."""
    mods = modules()
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    deps.add(full if full in mods else target)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph``, or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (found := visit(dep, path + [dep])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [node])):
            return found
    return None


@reads_the_source
def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert "cleanflush._flush" in graph and "cleanflush._registry" in graph
    assert cycle(graph) is None


def test_the_cycle_finder_finds_one():
    # negative control: the check above could not fail if this did not
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


BROAD = frozenset({"Exception", "BaseException"})


def _caught(handler: ast.ExceptHandler) -> set[str]:
    """The class names an ``except`` clause names (a bare ``except:`` catches BaseException)."""
    if handler.type is None:
        return {"BaseException"}
    named = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "") for n in named}


def broad_excepts(text: str) -> list[tuple[int, bool]]:
    """(line, whether it says why) for every ``except`` that catches Exception or BaseException,
    alone, in a tuple, bare or through a module (``builtins.Exception``): read from the syntax
    tree, so no formatting hides one.  The why is a comment on the clause's own lines, from
    ``except`` to its colon."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    comments = {token.start[0] for token in tokens if token.type == tokenize.COMMENT}
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ExceptHandler) and _caught(node) & BROAD:
            last = node.type.end_lineno if node.type is not None and node.type.end_lineno else node.lineno
            found.append((node.lineno, any(line in comments for line in range(node.lineno, last + 1))))
    return sorted(found)


def unexplained_broad_excepts(text: str) -> list[int]:
    return [line for line, why in broad_excepts(text) if not why]


@reads_the_source
def test_every_broad_except_says_why_on_its_line():
    found = {str(path.relative_to(SRC)): unexplained_broad_excepts(path.read_text()) for path in SRC.rglob("*.py")}
    assert {path: lines for path, lines in found.items() if lines} == {}


# the negative controls: each of these is a broad except, and none of them says why
HIDDEN = {
    "except Exception:": "try:\n    x()\nexcept Exception:\n    pass\n",
    "a tuple": "try:\n    x()\nexcept (Exception, SystemExit) as exc:\n    pass\n",
    "a tuple over lines": "try:\n    x()\nexcept (\n    ValueError,\n    BaseException,\n):\n    pass\n",
    "bare": "try:\n    x()\nexcept:\n    pass\n",
    "through a module": "try:\n    x()\nexcept builtins.Exception as exc:\n    pass\n",
    "a why on the next line": "try:\n    x()\nexcept Exception:\n    pass  # not the clause's line\n",
    "except*": "try:\n    x()\nexcept* BaseException:\n    pass\n",
}


@pytest.mark.parametrize("text", HIDDEN.values(), ids=HIDDEN.keys())
def test_the_broad_except_finder_sees_every_form(text):
    assert len(broad_excepts(text)) == 1 and unexplained_broad_excepts(text)


def test_the_broad_except_finder_takes_a_why_on_the_clause_and_leaves_narrow_ones():
    assert broad_excepts("try:\n    x()\nexcept (\n    ValueError,\n    Exception,\n):  # why\n    pass\n") == [
        (3, True)
    ]
    assert broad_excepts("try:\n    x()\nexcept Exception:  # why\n    pass\n") == [(3, True)]
    narrow = "try:\n    x()\nexcept (ValueError, OSError):\n    pass\nexcept ExceptionGroup:\n    pass\n"
    assert broad_excepts(narrow) == []


@pytest.mark.parametrize("target", _registry.TARGETS, ids=_registry.NAMES)
def test_each_patch_module_names_itself_through_the_registry(target):
    module = importlib.import_module(target.module)
    name = getattr(module, "NAME", None) or module.TARGET.name
    assert name == target.name
    assert target.apply == f"{target.module}:apply" and callable(module.apply)
    assert target.revert == f"{target.module}:revert" and callable(module.revert)


def test_patch_modules_and_the_package_load_without_torch_or_triton():
    child = run_python(f"""
        import importlib, json, sys
        sys.modules["torch"] = sys.modules["triton"] = None  # importing either raises
        loaded = [importlib.import_module(m).__name__ for m in {[t.module for t in _registry.TARGETS]!r}]
        import cleanflush.cli
        print(json.dumps(loaded))
        """)
    assert child.returncode == 0, child.stderr
    assert json.loads(child.stdout) == [t.module for t in _registry.TARGETS]


MAX_LINES = 50  # a function a reader takes in at once; longer ones are steps with names
MAX_BROAD = 20  # broad excepts, each the only way to keep a user's benchmark or a tool's report alive


def long_functions(text: str, limit: int = MAX_LINES) -> list[str]:
    return [
        f"{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(text))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit
    ]


@reads_the_source
def test_no_function_is_longer_than_fifty_lines():
    found = {str(path.relative_to(SRC)): long_functions(path.read_text()) for path in SRC.rglob("*.py")}
    assert {path: names for path, names in found.items() if names} == {}
    # the negative control: a function of 51 lines is found
    assert long_functions("def f():\n" + "    x = 1\n" * 50) == ["f (51 lines)"]


@reads_the_source
def test_broad_excepts_are_few():
    count = sum(len(broad_excepts(path.read_text())) for path in SRC.rglob("*.py"))
    assert 0 < count <= MAX_BROAD, count
