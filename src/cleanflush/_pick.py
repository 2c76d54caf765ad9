"""The pick rule: which config an autotuner keeps once it has timed them all.

A rule is a record (``Rule``), as a flush policy is (``_policies.Policy``): the hooks that
apply it (``_autotuner`` on Triton's ``Autotuner``, ``_inductor_pick`` on Inductor's
autotuning) ask its fields, never its name, and every pick it makes is one ``Picked``, from the
rule to the decision line.  Adding a rule is a record in ``RULES``, its docs and its tests.

``fastest`` is the autotuner's own rule: the lowest time it measured.

``stable`` (``stable()``):

1. the configs within ``WINDOW`` x the floor of the sweep's fastest are timed again, together,
   in interleaved rounds; the sweep is the first of the ``ROUNDS``, so tuning time grows by
   ``ROUNDS - 1`` timings of at most ``MOST_TIMED_AGAIN`` configs;
2. each timing is taken over its round's fastest (a round the GPU ran slow in cancels); the
   noise is the lower median over the configs of those ratios' spread in the rounds timed
   again; the band is the largest of the floor, the noise and the timer's resolution
   (``resolution()``);
3. of the configs within the band of the best median, the first in the autotuner's own order
   is kept.

Where every timing also holds work that is no config's own (a Triton autotuner's hooks), that
shared time, timed alone by the caller, is taken off every timing first: the band is a share
of the configs' own time.  A config alone in the window is kept with nothing timed again;
noise over ``NOISE_CAP`` x the floor keeps the autotuner's own pick.  docs/pick.md has the
evidence behind each constant.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Generic, TypeVar

from . import _env
from ._blocks import Block, Choice
from ._env import PICK_VAR
from ._state import STATE, on_reset, warn_once
from ._stats import ran

FLOOR = 0.01  # configs this close are one choice (CLEANFLUSH_PICK_FLOOR)
ROUNDS = 3  # the sweep and two rounds timed again: the fewest that show a spread beside a median
WINDOW = 2  # the configs timed again lie within WINDOW x the floor of the sweep's fastest
NOISE_CAP = 2  # noise over NOISE_CAP x the floor: near-ties cannot be told apart under the floor
MOST_TIMED_AGAIN = 4  # more in the window: the first in order and the fastest, so tuning time stays bounded
AGAIN_MS = 25.0  # ms timed in each timing again, where the caller can set it (CLEANFLUSH_PICK_AGAIN_MS)
# the noise from the configs' spreads: the lower median, so one config that stalled once does
# not widen the band, of two configs either
NOISE_OVER_CONFIGS = statistics.median_low
TICK_MS = 32e-6  # the CUDA event timer's step, as autotuners' timings read it
# single readings this many ticks apart are one choice: each is up to a tick off, so two
# differ by up to two, and the half keeps two inside a band worked out in floating point
TICKS_ALIKE = 2.5

C = TypeVar("C", bound=Hashable)
L = TypeVar("L", bound=Hashable)


@dataclass
class Picked(Generic[C]):
    """What a rule found for one decision: written as one shape from the rule to the decision
    line (``line``) and read back from it (``from_line``), each config named there by a label."""

    rule: str  # the rule's name
    # the configs the rule found alike, in the autotuner's order: the first is kept
    candidates: list[C]
    fastest: C  # the autotuner's own pick
    band: float  # the share of the fastest's time within which configs are alike
    floor: float
    noise: float | None = None  # the rounds timed again: the median spread (None: nothing timed again)
    timed_again: dict[C, float] = field(default_factory=dict)  # each config's median over its rounds' fastest
    too_noisy: bool = False  # the noise was over the cap: the autotuner's own pick was kept
    rounds_ms: dict[C, list[float]] = field(default_factory=dict)  # each config's time in each round, the sweep first
    shared_ms: float = 0.0  # what every timing held that was no config's own (the hooks), taken off
    again_s: float = 0.0  # the wall time the rule added to tuning
    resolution: float = 0.0  # the share of the fastest's own time the timer cannot tell apart

    @property
    def winner(self) -> C:
        return self.candidates[0]

    def labelled(self, label: Callable[[C], L]) -> Picked[L]:
        """The same pick with every config named by ``label``."""
        return Picked(
            **{
                **{f.name: getattr(self, f.name) for f in fields(self)},
                "candidates": [label(c) for c in self.candidates],
                "fastest": label(self.fastest),
                "timed_again": {label(c): t for c, t in self.timed_again.items()},
                "rounds_ms": {label(c): list(ts) for c, ts in self.rounds_ms.items()},
            }
        )

    def line(self, label: Callable[[C], str] = str) -> dict[str, Any]:
        """The pick as a decision line carries it (JSON)."""
        return asdict(self.labelled(label))

    @staticmethod
    def from_line(data: object) -> Picked[str]:
        """A decision line's pick, checked; a ValueError saying what is wrong with it."""
        if not isinstance(data, dict):
            raise ValueError(f"pick is not a mapping but {type(data).__name__}")
        known = {f.name: f for f in fields(Picked)}
        found = {name: value for name, value in data.items() if name in known}
        for name in ("rule", "candidates", "fastest", "band", "floor"):
            if name not in found:
                raise ValueError(f"pick has no {name}")
        picked = Picked[str](**found)
        problem = _problem(picked)
        if problem:
            raise ValueError(f"pick: {problem}")
        return picked


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _problem(p: Picked[Any]) -> str | None:
    """What is wrong with a pick read from a line, or None."""
    if not isinstance(p.rule, str) or not isinstance(p.fastest, str):
        return "rule or fastest is not a string"
    if not isinstance(p.candidates, list) or not p.candidates or not all(isinstance(c, str) for c in p.candidates):
        return "candidates is not a list of config names"
    if not all(_number(v) for v in (p.band, p.floor, p.shared_ms, p.again_s, p.resolution)):
        return "band, floor, shared_ms, again_s or resolution is not a number"
    if p.noise is not None and not _number(p.noise):
        return "noise is not a number"
    if not isinstance(p.too_noisy, bool):
        return "too_noisy is not true or false"
    if not isinstance(p.timed_again, dict) or not all(_number(t) for t in p.timed_again.values()):
        return "timed_again is not a mapping of config names to numbers"
    rounds = p.rounds_ms
    if not isinstance(rounds, dict) or not all(
        isinstance(ts, list) and all(map(_number, ts)) for ts in rounds.values()
    ):
        return "rounds_ms is not a mapping of config names to lists of numbers"
    return None


# (the autotuner's configs in its order, their timings in ms, a timing again of one config,
# the floor, the hooks' time) -> the pick: what a rule does with a decision
Chooser = Callable[..., Picked[Any]]


@dataclass(frozen=True)
class Rule:
    """What an autotuner keeps under one pick rule."""

    name: str
    # how it chooses (``stable``'s signature); None: the autotuner's own pick, nothing kept for it
    choose: Chooser | None
    times_again: bool  # ``choose`` times configs again: the hooks keep the call the sweep timed
    # coordinate descent steps only beyond the floor (or the timer's resolution), not on any gain
    descends_beyond_floor: bool
    summary: str  # what autotuners keep under it, as ``cleanflush status`` and the docs say it


def stable(
    order: Sequence[C],
    timings: dict[C, float],
    time_again: Callable[[C], float],
    floor: float,
    shared: Callable[[], float] | None = None,
    rounds: int = ROUNDS,
    clock: Callable[[], float] = time.perf_counter,
) -> Picked[C]:
    """The stable pick among ``order`` (the autotuner's configs, its order), from its
    ``timings`` (ms) and ``time_again(config)`` (one more timing, ms).  ``shared()``, asked
    once where configs are near, is what every timing holds that is no config's own (ms); it
    is taken off each timing.  The pick carries the wall time it took by ``clock`` (s).
    Raises what ``time_again`` or ``shared`` raises: the caller keeps the autotuner's own pick."""
    started = clock()
    picked = _stable(order, timings, time_again, floor, shared, rounds)
    picked.again_s = clock() - started
    return picked


def _stable(
    order: Sequence[C],
    timings: dict[C, float],
    time_again: Callable[[C], float],
    floor: float,
    shared: Callable[[], float] | None,
    rounds: int,
) -> Picked[C]:
    swept = ran_only(timings)
    fastest = min(swept, key=swept.__getitem__)  # the autotuner's pick: the first of equal times
    unresolved = resolution(swept.values(), swept[fastest])
    alone = Picked(STABLE, [fastest], fastest, least(floor, unresolved), floor, resolution=unresolved)
    if len(window(order, swept, fastest, alone.band, 0.0)) < 2:
        return alone
    # what every timing shares narrows the window, never widens it: asked only where configs are near
    held = float(shared()) if shared is not None else 0.0
    if not 0.0 <= held < swept[fastest]:  # more than a whole timing: not a part of each, so not taken off
        held = 0.0
    # the timer's step is a larger share of the configs' own time: the window keeps its width in time
    unresolved = resolution(swept.values(), swept[fastest] - held)
    alone = replace(alone, band=least(floor, unresolved), shared_ms=held, resolution=unresolved)
    near = window(order, swept, fastest, alone.band, held)
    if len(near) < 2:
        return alone
    if len(near) > MOST_TIMED_AGAIN:  # the first in order (the ones a pick can fall on) and the fastest
        head = near[: MOST_TIMED_AGAIN - 1]
        near = head + [fastest if fastest not in head else near[MOST_TIMED_AGAIN - 1]]
    # the sweep is the first round, then reversed and in order again, so drift cancels
    rounds_ms: dict[C, list[float]] = {c: [swept[c]] for c in near}
    for r in range(1, rounds):
        for c in near[::-1] if r % 2 else near:
            rounds_ms[c].append(float(time_again(c)))
    return settle(near, rounds_ms, alone)


def settle(near: list[C], rounds_ms: dict[C, list[float]], alone: Picked[C]) -> Picked[C]:
    """The pick from the rounds' timings of the configs ``near`` the fastest (ms, the sweep's
    first); ``alone`` is the pick with nothing settled (the autotuner's own, with the decision's
    floor, resolution and shared time), which the rounds fill in."""
    held, least_share = alone.shared_ms, alone.band
    own = {c: [t - held for t in ts] for c, ts in rounds_ms.items()}
    kept = replace(alone, rounds_ms=rounds_ms)
    if min(min(ts) for ts in own.values()) <= 0:  # a config timed again under the shared time
        return replace(kept, too_noisy=True)
    # each timing over its round's fastest: a round the whole GPU ran slow in cancels
    least_of_round = [min(round_) for round_ in zip(*own.values())]
    ratios = {c: [t / least_of_round[r] for r, t in enumerate(ts)] for c, ts in own.items()}
    medians = {c: statistics.median(rs) for c, rs in ratios.items()}
    # the noise from the rounds timed again (the sweep chose the window, so it leans fast)
    noise = NOISE_OVER_CONFIGS([max(rs[1:]) - min(rs[1:]) for rs in ratios.values()])
    band = max(least_share, noise)
    kept = replace(kept, band=band, noise=noise, timed_again=dict(medians))
    if band > NOISE_CAP * least_share:  # a band this wide would cost more than the floor
        return replace(kept, too_noisy=True)
    best = min(medians.values())
    return replace(kept, candidates=[c for c in near if medians[c] <= best * (1 + band)])


def least(floor: float, unresolved: float) -> float:
    """The narrowest band: the floor, or the timer's resolution where that is larger."""
    return max(floor, unresolved)


def resolution(timings: Iterable[float], own_ms: float) -> float:
    """The share of ``own_ms`` (the fastest config's own time) that the timer cannot tell
    apart, ``TICKS_ALIKE`` ticks, where ``timings`` (ms) are single readings: each on the
    timer's step or its half.  0 where any is not (an average of readings resolves finer)."""
    found = [float(t) for t in timings]
    if not found or own_ms <= 0 or not all(math.isfinite(t) for t in found):
        return 0.0
    half = TICK_MS / 2
    # a reading is a float32 of ms: within a millionth of itself of the step
    if all(abs(t - half * round(t / half)) <= 1e-6 * t for t in found):
        return TICKS_ALIKE * TICK_MS / own_ms
    return 0.0


def window(order: Sequence[C], swept: dict[C, float], fastest: C, floor: float, held: float) -> list[C]:
    """The configs timed again: within ``WINDOW`` x the floor of the fastest, each timing
    less ``held`` (what every timing shares), in the autotuner's order."""
    edge = (swept[fastest] - held) * (1 + WINDOW * floor)
    return [c for c in order if c in swept and swept[c] - held <= edge]


def ran_only(timings: dict[C, Any]) -> dict[C, float]:
    """The configs whose timing ran (``_stats.ran``), with it."""
    return {c: float(t) for c, t in timings.items() if ran(t)}


def again(ms: Any, config: object) -> float:
    """A timing again of ``config``, which must have run: an autotuner times a failure as inf
    (or NaN), and the rule then keeps the autotuner's own pick (a RuntimeError)."""
    if not ran(ms):
        raise RuntimeError(f"{config} failed when timed again")
    return float(ms)


FASTEST, STABLE = "fastest", "stable"
RULES = {
    rule.name: rule
    for rule in (
        Rule(FASTEST, None, times_again=False, descends_beyond_floor=False, summary="autotuners keep their own pick"),
        Rule(
            STABLE,
            stable,
            times_again=True,
            descends_beyond_floor=True,
            summary="Triton @autotune kernels and Inductor's algorithm selection and kernel configs keep the "
            "first config, in their own order, within the band of the fastest",
        ),
    )
}
PICKS = tuple(RULES)  # the names, the default first
DEFAULT_PICK = FASTEST  # the autotuner's own until the evidence says otherwise (docs/pick.md)

PICK = Choice(PICK_VAR, PICKS, DEFAULT_PICK, "pick rule", "pick rules")


class pick(Block):
    """Select the pick rule for a block::

        with cleanflush.pick("stable"):
            model(x)  # every autotuner tuning here keeps the stable pick

    Blocks nest; each thread and asyncio task sees its own; processes started inside the
    block inherit the rule through ``CLEANFLUSH_PICK``.  An unknown name raises ValueError
    listing the valid ones.
    """

    choice = PICK


def current_pick() -> str:
    """The rule an autotuner finishing now, in this context, would apply: the autotuner's own
    (``fastest``) while cleanflush is not installed, since nothing applies another then."""
    if not STATE.installed:
        return FASTEST
    return PICK.selected()


def current_rule() -> Rule:
    """The record of ``current_pick()``."""
    return RULES[current_pick()]


def choose(
    rule: Rule,
    order: Sequence[C],
    timings: dict[C, float],
    time_again: Callable[[C], float],
    name: str,
    shared: Callable[[], float] | None = None,
) -> Picked[C] | None:
    """``rule``'s pick among ``order`` for the decision ``name``, or None (the autotuner's own
    pick stands, said once) where it cannot be made: timing again runs the job's own hooks
    and kernels, which may raise anything."""
    assert rule.choose is not None
    try:
        found: Picked[C] = rule.choose(order, timings, time_again, floor(), shared=shared)
    except Exception as exc:  # a job's hook or kernel may raise anything: its tuning goes on with its own pick
        said = f"the {rule.name} pick of {name} kept the autotuner's own pick: timing again raised {exc!r}"
        warn_once(f"pick:{name}", said)
        return None
    found.rule = rule.name
    return found


@on_reset
def _forget_default() -> None:
    PICK.default = DEFAULT_PICK


def rule_from(value: str | None) -> tuple[str, str | None]:
    """The rule a ``CLEANFLUSH_PICK`` value selects, and what is wrong with the value (None: nothing)."""
    try:
        return _env.parse_pick(value, PICK.names, DEFAULT_PICK), None
    except ValueError as exc:
        return FASTEST, f"{exc}; autotuners keep their own pick ({FASTEST})"


def floor_from(value: str | None) -> tuple[float, str | None]:
    """The floor a ``CLEANFLUSH_PICK_FLOOR`` value sets, and what is wrong with the value."""
    try:
        return _env.parse_floor(value, FLOOR), None
    except ValueError as exc:
        return FLOOR, f"{exc}; the stable rule uses {FLOOR:.0%}"


def again_ms_from(value: str | None) -> tuple[float | None, str | None]:
    """How long a ``CLEANFLUSH_PICK_AGAIN_MS`` value times each config again, in ms timed (None:
    as long as the autotuner's own timing), and what is wrong with the value."""
    try:
        return _env.parse_again_ms(value, AGAIN_MS), None
    except ValueError as exc:
        return AGAIN_MS, f"{exc}; the stable rule times again for {AGAIN_MS:g} ms"


def floor() -> float:
    """The practical floor now (an invalid ``CLEANFLUSH_PICK_FLOOR`` said once)."""
    found, problem = floor_from(_env.value(_env.PICK_FLOOR_VAR))
    if problem:
        warn_once("pick:floor", problem)
    return found


def again_ms() -> float | None:
    """How long a timing again is now (an invalid ``CLEANFLUSH_PICK_AGAIN_MS`` said once)."""
    found, problem = again_ms_from(_env.value(_env.PICK_AGAIN_VAR))
    if problem:
        warn_once("pick:again", problem)
    return found


def from_environ() -> None:
    """Take the process default from ``CLEANFLUSH_PICK`` (install calls this); an invalid
    value is said once, and autotuners keep their own pick."""
    PICK.default, problem = rule_from(_env.value(PICK_VAR))
    if problem:
        warn_once("pick:environ", problem)
