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
