"""``cleanflush.status()`` rows: what they say after uninstall, after one target is reverted,
before a target is imported, under CLEANFLUSH=0, and the row schema the JSON outputs carry.
(Every target's rows through its life are in tests/test_contract.py.)"""

import json

import pytest
import torch
import wrapt

import cleanflush
from cleanflush import _registry, _targets

from .conftest import run_python
from .triton_layout import IMPORTED_ROW, flush_point, needs_driver_clear_cache

triton = pytest.importorskip("triton")
pytest.importorskip("triton.testing")  # where triton 3.0-3.1 flush
pytest.importorskip("torch._inductor.runtime.benchmarking")
NVIDIA = IMPORTED_ROW
TRITON, INDUCTOR = _registry.BY_NAME["triton"], _registry.BY_NAME["inductor"]


def rows():
    return {row.target: row for row in cleanflush.status()}


def test_after_uninstall_every_patched_row_says_uninstalled():
    # rows computed from others (TritonBenchmarker, and Proton's helpers on triton 3.8+: through
    # the triton driver) are not records
    before = {name: row for name, row in rows().items() if row.patched and not computed(name)}
    assert NVIDIA in before and "InductorBenchmarker.benchmark_gpu" in before
    cleanflush.uninstall()
    after = rows()
    for name, row in before.items():
        assert after[name] == cleanflush.TargetStatus(row.name, row.target, row.version, "off", "uninstalled")
    computed_row = after["TritonBenchmarker.benchmark_gpu"]
    assert computed_row.state == "off" and computed_row.detail.endswith("its flush is not patched")
    for name in filter(computed, after):
        assert after[name].state == "off" and "not patched" in after[name].detail, after[name]


def computed(target):
    return target == "TritonBenchmarker.benchmark_gpu" or target.endswith("_proton")


def test_reverting_one_target_leaves_the_others_rows():
    _targets.revert(TRITON)
    after = rows()
    assert (after[NVIDIA].state, after[NVIDIA].detail) == ("off", "uninstalled")
    assert after["InductorBenchmarker.benchmark_gpu"].patched
    assert after["TritonBenchmarker.benchmark_gpu"].state == "off"  # it follows triton's own
    _targets.revert(INDUCTOR)
    _targets.apply(TRITON)
    after = rows()
    assert after[NVIDIA].patched and not after["InductorBenchmarker.benchmark_gpu"].patched


def test_status_in_a_program_that_has_not_imported_torch_or_triton():
    child = run_python("""
        import json, cleanflush
        print(json.dumps([r.as_dict() for r in cleanflush.status()]))
        cleanflush.uninstall()
        print(json.dumps([r.as_dict() for r in cleanflush.status()]))
        """)
    installed, uninstalled = (json.loads(line) for line in child.stdout.splitlines())
    by_name = {r["name"]: r for r in installed}
    assert by_name["triton"] == {
        "name": "triton",
        "target": "triton",
        "version": triton.__version__,
        "state": "pending",
        "patched": False,
        "detail": "not imported yet; patched when it is",
    }
    assert by_name["inductor"]["version"] == torch.__version__ and by_name["inductor"]["state"] == "pending"
    scripts = {"gpu-mode", "tilegym", "thunderkittens"}  # a script's own module: never "absent"
    assert {r["state"] for r in installed if r["name"] in scripts} == {"pending"}
    assert {r["state"] for r in uninstalled if r["version"] or r["name"] in scripts} == {"off"}
    assert {r["detail"] for r in uninstalled if r["version"] or r["name"] in scripts} == {"cleanflush is not installed"}
    assert {r["state"] for r in installed + uninstalled if not r["version"] and r["name"] not in scripts} == {"absent"}


def test_off_from_the_environment_says_so_in_every_row():
    child = run_python(
        """
        import json, triton, cleanflush
        print(cleanflush.install(), cleanflush.is_installed(), cleanflush.current_policy())
        print(json.dumps(sorted({(r["state"], r["detail"]) for r in map(cleanflush.TargetStatus.as_dict,
                                                                      cleanflush.status()) if r["version"]})))
        """,
        {"CLEANFLUSH": "0"},
    )
    flags, states = child.stdout.splitlines()
    assert flags == "False False write"  # install() does nothing; the flush is the stock write
    assert json.loads(states) == [["off", "CLEANFLUSH=0: off"]]


def test_row_dicts_carry_every_field_and_the_patched_flag():
    row = rows()[NVIDIA]
    assert row.as_dict() == {
        "name": "triton",
        "target": NVIDIA,
        "version": triton.__version__,
        "state": "patched",
        "patched": True,
        "detail": row.detail,
    }


@pytest.mark.parametrize("state", ["pending", "disabled", "unsupported", "failed", "absent", "off"])
def test_only_the_patched_state_is_patched(state):
    assert not cleanflush.TargetStatus("x", "y", None, state, "").patched
    assert cleanflush.TargetStatus("x", "y", None, "patched", "").patched


@needs_driver_clear_cache
def test_a_foreign_wrapper_does_not_keep_a_dead_patch_alive():
    # uninstall under a foreign wrapper disables ours; install again must flush through a
    # live patch, not count the dead one as installed
    cls = triton.backends.backends["nvidia"].driver
    ours = vars(cls)["clear_cache"]
    wrapt.wrap_function_wrapper(cls, "clear_cache", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
    try:
        with pytest.warns(RuntimeWarning, match="wrapped again after cleanflush"):
            cleanflush.uninstall()
        cleanflush.install()
        cache = torch.zeros(16, dtype=torch.int32)
        object.__new__(cls).clear_cache(cache)
        assert cleanflush.flush_counts() == {("triton", "write-read"): 1}
    finally:
        cleanflush.uninstall()
        cls.clear_cache = ours.__wrapped__
        cleanflush.install()


def test_a_later_apply_replaces_the_rows_it_recorded_before():
    # an apply sees every module loaded so far: rows of an earlier apply do not linger
    from cleanflush import _state

    _state.record("triton", _state.Site("stale site", "patched", "from an earlier layout"))
    _targets.apply(TRITON)
    assert "stale site" not in rows()


def test_a_name_disabled_before_a_reinstall_is_put_back_stock(monkeypatch):
    owner, attribute = flush_point()
    stock = vars(owner)[attribute].__wrapped__
    monkeypatch.setenv("CLEANFLUSH_DISABLE", "triton")
    cleanflush.install()  # installed already: applies again, now disabled
    assert vars(owner)[attribute] is stock
    assert {r.state for r in cleanflush.status() if r.name == "triton"} == {"disabled"}


def test_the_probe_imports_what_targets_need_says_so_and_turns_a_failed_import_into_a_row(monkeypatch, capsys):
    from cleanflush.cli import status as status_cli

    installed = _registry.Target("fake", "fake", ("pytest",), (), "m:apply", "m:revert", probe=("no_such_module_x",))
    loaded = _registry.Target("loaded", "loaded", ("pytest",), (), "m:apply", "m:revert", probe=("json",))
    nothing = _registry.Target("bare", "bare", ("pytest",), (), "m:apply", "m:revert")  # nothing to import
    absent = _registry.Target("gone", "gone", ("no-such-dist",), (), "m:apply", "m:revert", probe=("no_such_y",))
    monkeypatch.setattr(_registry, "TARGETS", (nothing, absent, loaded, installed))
    errors = status_cli._probe(progress=True)
    assert errors == [
        {
            "name": "fake",
            "target": "no_such_module_x",
            "version": _targets.version(installed),
            "state": "failed",
            "patched": False,
            "detail": "installed, but the import failed: ModuleNotFoundError(\"No module named 'no_such_module_x'\")",
        }
    ]
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "cleanflush status: importing no_such_module_x ..." and len(lines) == 2
    assert lines[1].startswith("cleanflush status: done in ") and lines[1].endswith(" s")
    assert status_cli._probe(progress=False) == errors and capsys.readouterr().err == ""


def test_the_autoload_file_is_found_in_site_packages(tmp_path, monkeypatch):
    import site

    from cleanflush.cli import status as status_cli

    monkeypatch.setattr(site, "getsitepackages", lambda: [str(tmp_path / "a"), str(tmp_path / "b")])
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(tmp_path / "user"))
    assert status_cli._autoload_file() is None
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "cleanflush.pth").write_text("")
    assert status_cli._autoload_file() == str(tmp_path / "b" / "cleanflush.pth")


def status_data(**changes):
    data = {
        "cleanflush": "9.9",
        "python": "/py",
        "programs_get": "write-read (CLEANFLUSH=1)",
        "pick_rule": "CLEANFLUSH_PICK is unset: autotuners keep their own pick (fastest)",
        "agreement": "ranks keep their own picks; CLEANFLUSH_PICK_FILE unset",
        "disabled": [],
        "disable_problem": None,
        "autoload_file": None,
        "environment": {"CLEANFLUSH_REPORT": None},
        "targets": [{"target": "triton", "version": None, "state": "absent", "detail": "triton is not installed"}],
    }
    return {**data, **changes}


def test_the_status_text_line_by_line():
    from cleanflush.cli.status import format_text

    assert format_text(status_data()).splitlines() == [
        "cleanflush 9.9 (/py)",
        "environment  write-read (CLEANFLUSH=1)",
        "pick rule    CLEANFLUSH_PICK is unset: autotuners keep their own pick (fastest)",
        "agreement    ranks keep their own picks; CLEANFLUSH_PICK_FILE unset",
        "disabled     none (CLEANFLUSH_DISABLE)",
        "autoload     cleanflush.pth not found in this interpreter: CLEANFLUSH does nothing here",
        "report       CLEANFLUSH_REPORT unset",
        "",
        "target  version  state   detail",
        "triton  -        absent  triton is not installed",
    ]
    lines = format_text(
        status_data(
            disabled=["inductor", "triton"],
            disable_problem="CLEANFLUSH_DISABLE names unknown targets x (ignored)",
            autoload_file="/site/cleanflush.pth",
            environment={"CLEANFLUSH_REPORT": "/r.jsonl"},
        )
    ).splitlines()
    assert lines[4:7] == [
        "disabled     inductor, triton (CLEANFLUSH_DISABLE); CLEANFLUSH_DISABLE names unknown targets x (ignored)",
        "autoload     /site/cleanflush.pth: wakes on the first import of torch, triton or a harness when CLEANFLUSH "
        "is set",
        "report       /r.jsonl",
    ]


def test_collect_says_nothing_unasked_and_works_uninstalled_without_the_variable(monkeypatch, capsys):
    from cleanflush import _env
    from cleanflush.cli.status import collect

    monkeypatch.delenv("CLEANFLUSH", raising=False)
    monkeypatch.setitem(_env.AT_START, "CLEANFLUSH", "read")  # what the process started with
    cleanflush.uninstall()
    data = collect()
    assert capsys.readouterr().err == ""
    assert data["policy"] == "read" and cleanflush.is_installed()


@pytest.mark.parametrize(
    "start",
    [
        {"CLEANFLUSH_PICK": "stable"},  # the rule alone turns cleanflush on at start-up
        {"CLEANFLUSH_PICK": "stabel"},  # misspelt, it still does (the rule is then fastest)
        {"CLEANFLUSH_PICK": " "},  # blank: not set
        {"CLEANFLUSH_PICK_FILE": "picks.json"},  # a pick file alone turns it on too
        {"CLEANFLUSH": "0", "CLEANFLUSH_PICK": "stable"},
        {"CLEANFLUSH": "read", "CLEANFLUSH_PICK": "stable"},
        {"CLEANFLUSH": "fast", "CLEANFLUSH_PICK": "stable"},  # an invalid switch keeps the stock flush
    ],
)
def test_the_environment_row_says_what_a_program_started_with_it_gets(start):
    """Status's claim against a real program started with the same variables (it imports torch
    and asks cleanflush, if it came, what it got), not against status's own reading of them."""
    from cleanflush.cli.status import programs_get, waking

    child = run_python(  # a program that does not import cleanflush itself: what the start-up hook gives it
        """
        import sys, torch
        cleanflush = sys.modules.get("cleanflush")
        print(cleanflush is not None and cleanflush.is_installed(), cleanflush and cleanflush.current_policy())
        """,
        start,
    )
    installed, flushes_with = child.stdout.split()
    policy, says = programs_get(start.get("CLEANFLUSH"), waking(start))
    assert policy == (flushes_with if installed == "True" else None), says
    if policy is not None:
        assert f"flushes with {policy} from its first import of torch or triton" in says
    if "CLEANFLUSH" not in start and policy is not None:
        assert f"{waking(start)} turns cleanflush on" in says
    assert "stock flush unless they import" not in says or installed == "False"


@pytest.mark.parametrize("switch", ["0", "off", "fast"])
def test_a_pick_rule_under_cleanflush_off_is_said_to_do_nothing(monkeypatch, switch):
    from cleanflush import _env
    from cleanflush.cli.status import collect

    monkeypatch.setitem(_env.AT_START, "CLEANFLUSH", switch)
    monkeypatch.setitem(_env.AT_START, "CLEANFLUSH_PICK", "stable")
    data = collect()
    assert data["policy"] is None
    assert "band" not in data["pick_rule"] and "keep their own pick" in data["pick_rule"], data["pick_rule"]
    assert f"CLEANFLUSH={switch}" in data["pick_rule"]
    monkeypatch.setitem(_env.AT_START, "CLEANFLUSH", "1")  # the control: on, the band applies
    assert "within the band of the fastest" in collect()["pick_rule"]


def test_check_names_every_invalid_setting(monkeypatch):
    from cleanflush import _env
    from cleanflush.cli.status import collect, problems

    bad = {
        "CLEANFLUSH": "fast",
        "CLEANFLUSH_DISABLE": "tritn",
        "CLEANFLUSH_PICK": "stabel",
        "CLEANFLUSH_PICK_FLOOR": "half",
        "CLEANFLUSH_PICK_AGAIN_MS": "soon",
    }
    for name, value in bad.items():
        monkeypatch.setitem(_env.AT_START, name, value)
    found = problems(collect())
    for name, value in bad.items():
        assert len([p for p in found if p.startswith(f"{name}=") or p.startswith(f"{name} ")]) == 1, (name, found)
        assert any(repr(value) in p or value in p for p in found), value
    assert len(found) == len(bad)


def test_status_check_of_named_targets_imports_only_what_they_need():
    code = """
        import sys
        from cleanflush.cli import main
        code = main(["status", "--check", "{names}", "--json", "-"])
        print("torch._inductor" in sys.modules, file=sys.stderr)
        """
    triton = run_python(code.replace("{names}", "triton"))
    assert triton.stderr.strip().splitlines()[-1] == "False", triton.stderr  # Inductor left unimported
    both = run_python(code.replace("{names}", "triton,inductor"))
    assert both.stderr.strip().splitlines()[-1] == "True", both.stderr  # the negative control
