"""The ``CLEANFLUSH`` environment variable: one parser, used by import and autoload alike."""

from __future__ import annotations

import os

ENV_VAR = "CLEANFLUSH"
POLICIES = ("write-read", "read", "write")
DEFAULT_POLICY = "read"  # measured: benchmarks/results/h200/README.md, "The default policy"

_OFF = ("0", "off")
_ON = ("1", "on")
VALID_VALUES = ", ".join(_OFF + _ON + POLICIES)


def parse(value: str | None) -> str | None:
    """Return the policy a ``CLEANFLUSH`` value asks for, or ``None`` for "off".

    Unset or empty means the default policy (``import cleanflush`` is the switch then).
    Raises ``ValueError`` naming the valid values for anything else.
    """
    text = (value or "").strip().lower()
    if text in _OFF:
        return None
    if text in _ON or not text:
        return DEFAULT_POLICY
    if text in POLICIES:
        return text
    raise ValueError(f"{ENV_VAR}={value!r} is not valid; use one of: {VALID_VALUES}")


def from_environ() -> str | None:
    return parse(os.environ.get(ENV_VAR))
