"""What ab and verify pass between their parts is typed: mypy finds a misspelt key."""

import pytest

api = pytest.importorskip("mypy.api")

SNIPPET = """
from cleanflush._ab.records import Comparison, Decision, Result
from cleanflush._verify.verdict import Record


def cost(d: Decision) -> float | None:
    return d["{decision_key}"]


def changed(c: Comparison) -> int:
    return len(c["{comparison_key}"])


def rounds(r: Record) -> int:
    return r["{record_key}"]
"""


def check(tmp_path, **keys):
    path = tmp_path / "snippet.py"
    path.write_text(SNIPPET.format(**keys))
    out, err, code = api.run([str(path), "--no-error-summary", "--cache-dir", str(tmp_path / "cache")])
    return code, out


def test_mypy_finds_a_misspelt_key_in_the_records(tmp_path):
    code, out = check(tmp_path, decision_key="cost", comparison_key="changed", record_key="rounds")
    assert code == 0, out  # the right keys pass: the control
    code, out = check(tmp_path, decision_key="cots", comparison_key="changd", record_key="round")
    assert code == 1
    for key in ("cots", "changd", "round"):
        assert f'has no key "{key}"' in out
