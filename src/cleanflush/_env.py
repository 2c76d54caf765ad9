"""The environment variables cleanflush reads and writes, each with its parser: the one place
that names them and touches ``os.environ``.  Plain Python; of cleanflush's own code only the
start-up hook (``_cleanflush_boot``, stdlib only) is looked up here, for the "off" values.

``CLEANFLUSH``
    The switch.  Unset or empty: nothing at interpreter start, ``import cleanflush``
    installs the default policy.  ``1``/``on``/``true``/``yes``: the default policy from
    interpreter start (``cleanflush.pth``).  A policy name: that policy.
    ``0``/``off``/``false``/``no``: off for everything, ``import cleanflush``, ``install()``
    and the pytest plugin included.  While cleanflush is installed it also carries the
    policy of the newest open ``policy()`` block to child processes (``_policy`` writes it).
``CLEANFLUSH_DISABLE``
    Comma-separated target names (``cleanflush._registry.NAMES``) that keep their stock flush.
``CLEANFLUSH_REPORT``
    A file each process that flushed through cleanflush appends one JSON line to at exit.
``CLEANFLUSH_DECISIONS``
    A file every autotuning decision is appended to (``cleanflush ab`` sets it per run).
``CLEANFLUSH_PICK``
    The pick rule of every autotuner cleanflush patches (``_pick``): ``fastest`` (the
    autotuner's own, the default) or ``stable``.  Set, it turns cleanflush on at interpreter
    start as ``CLEANFLUSH=1`` does (unless ``CLEANFLUSH`` says off); while cleanflush is
    installed it carries the newest open ``pick()`` block to child processes.
``CLEANFLUSH_PICK_FLOOR``
    The stable rule's practical floor, a percentage (default 1).
``CLEANFLUSH_PICK_AGAIN_MS``
    How long the stable rule times each config again (ms timed, a fifth of it warm-up)
    where a Triton autotuner times with Triton's own ``do_bench`` (default 25; ``full``: as
    long as the autotuner timed it, do_bench's 100).
``CLEANFLUSH_PICK_STORE``
    Whether picks are agreed across the ranks of a distributed job through its own store
    (``_agree``): ``auto`` (the default: under a pick rule that changes picks, ``stable``),
    ``on`` (under any rule, ``fastest`` too) or ``off``.
``CLEANFLUSH_PICK_FILE``
    A file (or a folder) where every autotuning decision is kept, and whose picks later runs
    take where the decision, the GPU and the versions match (``_agree``).
``CLEANFLUSH_AB_CALLS``
    A folder where a Triton autotuning call is recorded, the first time a key is tuned, so
    that ``cleanflush ab`` can make it again to time its picks (``cleanflush ab`` sets it).
``CLEANFLUSH_AUDIT``
    A file every autotuning pick served without tuning (a preloaded table, Triton's disk
    cache, a library's own table) is appended to, with its call (``cleanflush audit`` sets it).

Values are read without regard to case or surrounding spaces.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from typing import NamedTuple

from ._policies import DEFAULT_POLICY, POLICIES

POLICY_VAR = "CLEANFLUSH"
DISABLE_VAR = "CLEANFLUSH_DISABLE"
REPORT_VAR = "CLEANFLUSH_REPORT"
DECISIONS_VAR = "CLEANFLUSH_DECISIONS"
CALLS_VAR = "CLEANFLUSH_AB_CALLS"
AUDIT_VAR = "CLEANFLUSH_AUDIT"
PICK_VAR = "CLEANFLUSH_PICK"
PICK_FLOOR_VAR = "CLEANFLUSH_PICK_FLOOR"
PICK_AGAIN_VAR = "CLEANFLUSH_PICK_AGAIN_MS"
PICK_STORE_VAR = "CLEANFLUSH_PICK_STORE"
PICK_FILE_VAR = "CLEANFLUSH_PICK_FILE"
AGAIN_FULL = "full"  # the value that times again as long as the autotuner's own timings
VARIABLES = (
    POLICY_VAR,
    DISABLE_VAR,
    REPORT_VAR,
    DECISIONS_VAR,
    CALLS_VAR,
    AUDIT_VAR,
    PICK_VAR,
    PICK_FLOOR_VAR,
    PICK_AGAIN_VAR,
    PICK_STORE_VAR,
    PICK_FILE_VAR,
)


# The values that switch cleanflush off are written once, in the start-up hook, which reads
# them before anything is imported.  Looked up, not imported by name: that module imports
# cleanflush when it wakes, and a static import back would make a loop.
OFF: tuple[str, ...] = importlib.import_module("_cleanflush_boot").OFF
ON = ("1", "on", "true", "yes")
VALID_VALUES = ", ".join(ON + OFF + POLICIES)

# As the process was started, before any cleanflush code wrote to the environment: what the
# user asked for, and what a worker that outlived a policy block really runs under.
AT_START = {name: os.environ.get(name) for name in VARIABLES}


def _text(value: str | None) -> str:
    return (value or "").strip().lower()


def is_off(value: str | None) -> bool:
    """Whether a ``CLEANFLUSH`` value switches cleanflush off everywhere."""
    return _text(value) in OFF


def parse_policy(value: str | None) -> str | None:
    """The policy a ``CLEANFLUSH`` value asks for; ``None`` for off.

    Unset or empty means the default policy (``import cleanflush`` is the switch then).
    Raises ``ValueError`` naming the valid values for anything else.
    """
    text = _text(value)
    if text in OFF:
        return None
    if text in ON or not text:
        return DEFAULT_POLICY
    if text in POLICIES:
        return text
    raise ValueError(f"{POLICY_VAR}={value!r} is not valid; use one of: {VALID_VALUES}")


def policy_from_environ() -> str | None:
    return parse_policy(os.environ.get(POLICY_VAR))


class Disabled(NamedTuple):
    """What a ``CLEANFLUSH_DISABLE`` value names: the known targets, and the rest."""

    names: frozenset[str]
    unknown: tuple[str, ...]

    def problem(self, valid: Iterable[str], source: str = DISABLE_VAR) -> str | None:
        """One line naming the unknown names and the valid ones, or None (``source``: where
        the names came from)."""
        if not self.unknown:
            return None
        ignored = " (ignored)" if source == DISABLE_VAR else ""
        return f"{source} names unknown targets {', '.join(self.unknown)}{ignored}; valid targets: {', '.join(valid)}"


def parse_disabled(value: str | None, valid: Iterable[str]) -> Disabled:
    """The targets a comma-separated ``CLEANFLUSH_DISABLE`` value keeps stock.  Unknown
    names are returned apart: the valid ones still apply."""
    known = tuple(valid)
    names = {part.strip().lower() for part in (value or "").split(",") if part.strip()}
    return Disabled(frozenset(names & set(known)), tuple(sorted(names - set(known))))


def disabled_from_environ(valid: Iterable[str]) -> Disabled:
    return parse_disabled(os.environ.get(DISABLE_VAR), valid)


def parse_pick(value: str | None, names: tuple[str, ...], default: str) -> str:
    """The pick rule a ``CLEANFLUSH_PICK`` value names (unset or empty: ``default``); a
    ValueError naming the valid ones otherwise."""
    text = _text(value)
    if not text:
        return default
    if text in names:
        return text
    raise ValueError(f"{PICK_VAR}={value!r} is not a pick rule; use one of: {', '.join(names)}")


def _number(text: str) -> float:
    """``text`` as a number; NaN where it is none (outside every range a caller accepts)."""
    try:
        return float(text)
    except ValueError:
        return float("nan")


def parse_floor(value: str | None, default: float) -> float:
    """The fraction a ``CLEANFLUSH_PICK_FLOOR`` percentage gives (unset or empty: ``default``);
    a ValueError for anything but a percentage from 0 to 100."""
    text = _text(value).rstrip("%").strip()
    if not text:
        return default
    found = _number(text)
    if not 0 <= found <= 100:
        raise ValueError(f"{PICK_FLOOR_VAR}={value!r} is not a percentage from 0 to 100 (e.g. 1 or 0.5)")
    return found / 100


# The longest timing again: ten times do_bench's own 100 ms, so at most 8 s of tuning a
# decision (_pick.MOST_TIMED_AGAIN configs, ROUNDS - 1 rounds); beyond it a value is a slip
# (1e308 would have do_bench repeat a kernel for ever).
AGAIN_MOST_MS = 1000.0


def parse_again_ms(value: str | None, default: float) -> float | None:
    """The ms a ``CLEANFLUSH_PICK_AGAIN_MS`` value gives (unset or empty: ``default``;
    ``full``: None, the autotuner's own length); a ValueError for anything else but a time
    over 0 up to ``AGAIN_MOST_MS``."""
    text = _text(value).removesuffix("ms").strip()
    if not text:
        return default
    if text == AGAIN_FULL:
        return None
    found = _number(text)
    if not 0 < found <= AGAIN_MOST_MS:
        raise ValueError(
            f"{PICK_AGAIN_VAR}={value!r} is not a time in ms over 0 (e.g. 25) or {AGAIN_FULL} "
            f"(valid times: over 0 up to {AGAIN_MOST_MS:g} ms)"
        )
    return found


def decisions_path() -> str | None:
    return os.environ.get(DECISIONS_VAR) or None


def calls_folder() -> str | None:
    return os.environ.get(CALLS_VAR) or None


def audit_path() -> str | None:
    return os.environ.get(AUDIT_VAR) or None


def value(name: str) -> str | None:
    """The variable ``name`` as this process has it now."""
    return os.environ.get(name)


def export(name: str, value: str | None) -> None:
    """Set ``name`` for this process and the children it starts (None: remove it)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def for_child(**changes: str | None) -> dict[str, str]:
    """This process's environment with ``changes`` (None: removed), for a child process."""
    env = dict(os.environ)
    for name, new in changes.items():
        if new is None:
            env.pop(name, None)
        else:
            env[name] = new
    return env
