import pytest

from cleanflush import _env

from .conftest import reads_the_source


@pytest.mark.parametrize(
    "value, policy",
    [
        (None, "write-read"),
        ("", "write-read"),
        ("1", "write-read"),
        ("on", "write-read"),
        (" ON ", "write-read"),
        (" Read ", "read"),
        ("true", "write-read"),
        ("YES", "write-read"),
        ("false", None),
        ("no", None),
        ("0", None),
        ("off", None),
        ("write-read", "write-read"),
        ("read", "read"),
        ("Write", "write"),
    ],
)
def test_parse_valid(value, policy):
    assert _env.parse_policy(value) == policy


@pytest.mark.parametrize("value", ["2", "y", "read-write", "zero", "réad"])
def test_parse_invalid_names_valid_values(value):
    with pytest.raises(ValueError) as err:
        _env.parse_policy(value)
    message = str(err.value)
    assert repr(value) in message
    for valid in ("0", "off", "false", "no", "1", "on", "true", "yes", "write-read", "read", "write"):
        assert valid in message
    assert "\n" not in message


def test_disable_takes_a_comma_separated_list():
    valid = ("triton", "inductor", "tritonbench")
    assert _env.parse_disabled(" Triton, inductor ,,tritonbench", valid) == (frozenset(valid), ())
    assert _env.parse_disabled(None, valid) == (frozenset(), ()) == _env.parse_disabled("", valid)


def test_an_unknown_disabled_name_is_named_and_the_valid_ones_still_apply():
    disabled = _env.parse_disabled("triton,tritn,inductr", ("triton", "inductor"))
    assert disabled.names == frozenset({"triton"}) and disabled.unknown == ("inductr", "tritn")
    assert disabled.problem(("triton", "inductor")) == (
        "CLEANFLUSH_DISABLE names unknown targets inductr, tritn (ignored); valid targets: triton, inductor"
    )
    assert _env.parse_disabled("triton", ("triton",)).problem(("triton",)) is None


@reads_the_source
def test_the_variables_are_named_once():
    # every CLEANFLUSH_* literal in src/ sits in _env (the boot module and .pth excepted: they
    # run before cleanflush can be imported)
    from pathlib import Path

    src = Path(_env.__file__).parent
    for path in src.rglob("*.py"):
        if path.name == "_env.py":
            continue
        for name in _env.VARIABLES:
            assert f'"{name}"' not in path.read_text(), (path, name)


def test_the_environment_at_start_is_kept_before_anything_writes_it():
    assert set(_env.AT_START) == set(_env.VARIABLES)


def test_patch_sets_list_what_they_patched():
    from cleanflush import _patching

    class Owner:
        def a(self):
            return "a"

        def b(self):
            return "b"

    patches = _patching.PatchSet()
    patches.wrap(Owner, "a", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
    patches.wrap(Owner, "b", lambda wrapped, instance, args, kwargs: wrapped(*args, **kwargs))
    assert [(p.owner, p.name) for p in patches] == [(Owner, "a"), (Owner, "b")]
    patches.revert()
    assert list(patches) == []


@pytest.mark.parametrize(
    "value, ms",
    [(None, 25.0), ("", 25.0), ("50", 50.0), (" 40ms ", 40.0), ("0.5", 0.5), ("FULL", None), ("1000", 1000.0)],
)
def test_the_time_again_is_taken_within_its_range(value, ms):
    assert _env.parse_again_ms(value, 25.0) == ms


@pytest.mark.parametrize("value", ["0", "-5", "1000.5", "1e308", "inf", "nan", "soon"])
def test_a_time_again_outside_its_range_is_one_line_naming_the_range(value):
    # 1e308 ms would have do_bench repeat a kernel for ever: a bound, said with the value
    with pytest.raises(ValueError) as err:
        _env.parse_again_ms(value, 25.0)
    message = str(err.value)
    assert repr(value) in message and "\n" not in message
    assert f"over 0 up to {_env.AGAIN_MOST_MS:g} ms" in message and "full" in message
