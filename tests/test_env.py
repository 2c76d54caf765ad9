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
        ("0", None),
        ("off", None),
        ("write-read", "write-read"),
        ("read", "read"),
        ("Write", "write"),
    ],
)
def test_parse_valid(value, policy):
    assert _env.parse(value) == policy


@pytest.mark.parametrize("value", ["2", "yes", "read-write", "zero"])
def test_parse_invalid_names_valid_values(value):
    with pytest.raises(ValueError) as err:
        _env.parse(value)
    message = str(err.value)
    assert repr(value) in message
    for valid in ("0", "off", "1", "on", "write-read", "read", "write"):
        assert valid in message
    assert "\n" not in message
