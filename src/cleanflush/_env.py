"""The environment variables: one parser each, used by import and autoload alike."""

from __future__ import annotations

import os

from ._policy import DEFAULT_POLICY, ENV_VAR, POLICIES

DISABLE_VAR = "CLEANFLUSH_DISABLE"
TARGET_NAMES = ("triton", "inductor", "tritonbench", "tilelang", "flashinfer", "deep-gemm", "sglang", "kernelbench",
                "sol-execbench", "deep-ep")

# the off spellings must match _cleanflush_boot._OFF, which reads them before any import
_OFF = ("0", "off", "false", "no")
_ON = ("1", "on", "true", "yes")
VALID_VALUES = ", ".join(_OFF + _ON + POLICIES)


def parse(value: str | None) -> str | None:
    """Return the policy a ``CLEANFLUSH`` value asks for, or ``None`` for "off".

    Unset or empty means the default policy (``import cleanflush`` is the switch then).
    Case and surrounding spaces do not matter, as in ``cleanflush.policy()``.
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


def parse_disabled(value: str | None) -> frozenset[str]:
    """The targets a ``CLEANFLUSH_DISABLE`` value (comma-separated names) switches off.

    Raises ``ValueError`` naming the valid names for an unknown one.
    """
    names = {part.strip().lower() for part in (value or "").split(",") if part.strip()}
    unknown = sorted(names - set(TARGET_NAMES))
    if unknown:
        raise ValueError(f"{DISABLE_VAR}={value!r} names unknown targets {', '.join(unknown)}; "
                         f"valid targets: {', '.join(TARGET_NAMES)}")
    return frozenset(names)


def disabled_from_environ() -> frozenset[str]:
    return parse_disabled(os.environ.get(DISABLE_VAR))
