"""The Python in README.md and docs/ runs as printed: every name a code block uses is
defined in it or in an earlier block of the same page, imported, or a builtin (a GPU runs
them; here they are checked for the names, which is how a copied snippet fails first)."""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def undefined_names(code: str) -> set[str]:
    """Names read anywhere in ``code`` that nothing in it binds (a whole-page check: a name
    bound anywhere counts, as a reader running the blocks in order would have it)."""
    tree = ast.parse(code)
    bound = set(dir(builtins))
    used = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name):
            (bound.add if isinstance(node.ctx, ast.Store) else used.add)(node.id)
    return used - bound


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_every_code_block_names_only_what_it_defines(page):
    code = "\n".join(BLOCK.findall(page.read_text()))
    assert undefined_names(code) == set()


def test_the_check_finds_a_name_nobody_defined():
    # negative control: the snippet users copied and got NameError from
    assert undefined_names("import triton.testing\ntriton.testing.do_bench(fn)\n") == {"fn"}
    assert undefined_names("@pytest.mark.cleanflush('read')\ndef test_x(): ...\n") == {"pytest"}
