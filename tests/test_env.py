import pytest

from cleanflush import _env


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
    assert _env.parse(value) == policy


@pytest.mark.parametrize("value", ["2", "y", "read-write", "zero", "réad"])
def test_parse_invalid_names_valid_values(value):
    with pytest.raises(ValueError) as err:
        _env.parse(value)
    message = str(err.value)
    assert repr(value) in message
    for valid in ("0", "off", "false", "no", "1", "on", "true", "yes", "write-read", "read", "write"):
        assert valid in message
    assert "\n" not in message


def test_disable_takes_a_comma_separated_list():
    assert _env.parse_disabled(" Triton, inductor ,,tritonbench") == frozenset({"triton", "inductor", "tritonbench"})
    assert _env.parse_disabled(None) == frozenset() and _env.parse_disabled("") == frozenset()
    with pytest.raises(ValueError) as error:
        _env.parse_disabled("triton,tritn,inductr")
    assert str(error.value) == ("CLEANFLUSH_DISABLE='triton,tritn,inductr' names unknown targets inductr, tritn; "
                                f"valid targets: {', '.join(_env.TARGET_NAMES)}")


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
