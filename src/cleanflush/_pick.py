"""The pick rule: which config an autotuner keeps once it has timed them all.

``fastest`` is the autotuner's own rule: the lowest time it measured.  Near-ties are then
decided by timing noise, so fresh processes and ranks pick differently.

``stable`` (``stable()``):

1. the configs within ``WINDOW`` x the floor of the sweep's fastest are timed again, together,
   in interleaved rounds (a window wider than the band: a config near its edge in the sweep
   still takes part); the sweep is the first of the ``ROUNDS``, so tuning time grows by
   ``ROUNDS - 1`` timings of at most ``MOST_TIMED_AGAIN`` configs (``again_ms()`` long where
   the caller can make them so, ``_autotuner``; else as long as the sweep's);
2. each timing is taken over its round's fastest (a round the GPU ran slow in cancels); the
   noise is the lower median over the configs of those ratios' spread in the rounds timed
   again (the sweep chose the window, so its timings lean fast; one config that stalled
   once does not widen it, of two configs either); the band is the larger of the floor, the
   noise and the timer's resolution (``resolution()``: where the timings are single readings
   of a kernel of a few microseconds, a floor is a tick or two);
3. of the configs within the band of the best median, the first in the autotuner's own order
   is kept.

Where every timing also holds work that is no config's own (a Triton autotuner's
``restore_value`` copies and ``reset_to_zero`` zeroing run inside each timed call), that
shared time, timed alone by the caller, is taken off every timing first: otherwise it
dilutes the band, and configs whose own time differs by several floors fall inside it
(benchmarks/results/h200/pick.json, gemlite's GEMV; docs/pick.md).

A config alone in the window is kept, with nothing timed again.  Noise over ``WINDOW`` x the
floor keeps the autotuner's own pick: near-ties cannot be told apart at a cost under the floor
there (benchmarks/results/h200/pick.json, gemlite at a 2% floor, before this cap).  Where the
timer's resolution is over the floor, it stands for the floor in the window and in this cap.

The rule is a ``Choice`` (``_blocks``): ``CLEANFLUSH_PICK``, ``pick()`` blocks, children
through the variable.  ``_autotuner`` applies it to Triton's ``Autotuner``,
``_inductor_pick`` to Inductor's algorithm selection.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from . import _env
from ._blocks import Block, Choice
from ._env import PICK_VAR
from ._state import on_reset, warn_once

FASTEST, STABLE = "fastest", "stable"
PICKS = (FASTEST, STABLE)
DEFAULT_PICK = FASTEST  # the autotuner's own until the evidence says otherwise (docs/pick.md)
# The practical floor of the band: configs this close are one choice.  About what a config's
# time against its run's fastest moves between fresh processes on the H200 (the pick study).
FLOOR = 0.01
ROUNDS = 3  # the sweep and two rounds timed again: the fewest that show a spread beside a median
WINDOW = 2  # the configs timed again: within WINDOW x the floor of the fastest in the sweep
MOST_TIMED_AGAIN = 4  # more within the window: the first in order and the fastest (tuning time stays bounded)
# ms timed in each timing again (do_bench's own is 100): as many picks alike and as cheap by
# price as at full length, for a fraction of the rule's tuning time (the pick study's gemlite
# entries at both lengths; docs/pick.md, Why 25 ms).
AGAIN_MS = 25.0
# The noise from the configs' spreads: the lower median, so one config that stalled once does
# not widen the band, of two configs either (the mean of two did: fla's entry on an H100,
# docs/pick.md).
NOISE_OVER_CONFIGS = statistics.median_low
# The CUDA event timer's step: every timing Inductor's and Triton's autotuners took in the pick
# study lies on it, or on its half (the median of an even count), on the H100 and the H200
# (benchmarks/results/*/pick.json, each decision's rounds_ms).
TICK_MS = 32e-6
# Single readings this many ticks apart are one choice: each is up to a tick off, so two differ
# by up to two, and the half keeps two inside a band worked out in floating point.  For a
# kernel of a few microseconds the floor is about a tick, and picks flipped between configs one
# tick apart and two (the pick study's Llama decode on an H100; docs/pick.md).
TICKS_ALIKE = 2.5

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
    """The rule an autotuner finishing now, in this context, would apply."""
    return PICK.selected()


@on_reset
def _forget_default() -> None:
    PICK.default = DEFAULT_PICK


def rule_from(value: str | None) -> tuple[str, str | None]:
    """The rule a ``CLEANFLUSH_PICK`` value selects, and what is wrong with the value (None: nothing)."""
    try:
        return _env.parse_pick(value, PICKS, DEFAULT_PICK), None
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


C = TypeVar("C", bound=Hashable)


@dataclass
class Picked:
    """What the stable rule found for one decision."""

    winner: object  # the config kept
    fastest: object  # the autotuner's own pick
    band: float  # the band used: the largest of the floor, the noise and the resolution
    floor: float
    noise: float | None  # the median spread of the rounds timed again (None: nothing timed again)
    candidates: list[Any] = field(default_factory=list)  # within the band, the autotuner's order
    timed_again: dict[Any, float] = field(default_factory=dict)  # each config's median over the rounds' fastest
    too_noisy: bool = False  # noise over twice the floor (or resolution): the autotuner's own pick kept
    # each config's time (ms) in each round, the sweep's first: what the ratios hide (a round
    # the whole GPU ran slow in) stays readable where a decision's noise needs explaining
    rounds_ms: dict[Any, list[float]] = field(default_factory=dict)
    # what every timing held that was no config's own (an autotuner's hooks, timed alone),
    # taken off each timing before the ratios: the band is a share of the configs' own time
    shared_ms: float = 0.0
    # the wall time the rule took beyond the autotuner's own sweep (timing again, the hooks
    # alone): what it adds to tuning, per decision
    again_s: float = 0.0
    # the share of the fastest's own time the timer cannot tell apart (``resolution()``; 0
    # where the timings resolve finer): the band is at least this
    resolution: float = 0.0


def finite(timings: dict[C, float]) -> dict[C, float]:
    return {c: t for c, t in timings.items() if isinstance(t, (int, float)) and math.isfinite(t)}


def ran(ms: Any, config: object) -> float:
    """A timing again of ``config``, which must have run: an autotuner times a failure as inf
    (or NaN), and the rule then keeps the autotuner's own pick (a RuntimeError)."""
    again = float(ms)
    if not math.isfinite(again):
        raise RuntimeError(f"{config} failed when timed again")
    return again


def stable(
    order: Sequence[C],
    timings: dict[C, float],
    time_again: Callable[[C], float],
    floor: float,
    rounds: int = ROUNDS,
    shared: Callable[[], float] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Picked:
    """The stable pick among ``order`` (the autotuner's configs, its order), from its
    ``timings`` (ms) and ``time_again(config)`` (one more timing, ms).  ``shared()``, asked
    once where configs are near, is what every timing holds that is no config's own (ms: an
    autotuner's hooks); it is taken off each timing, so the band is a share of the configs'
    own time.  The pick carries the wall time it took by ``clock`` (s).  Raises what
    ``time_again`` or ``shared`` raises: the caller keeps the autotuner's own pick then."""

    def decide() -> Picked:
        ran = finite(timings)
        fastest = min(ran, key=ran.__getitem__)  # the autotuner's pick: the first of equal times
        unresolved = resolution(ran.values(), ran[fastest])
        least = max(floor, unresolved)
        near = window(order, ran, fastest, least, 0.0)
        if len(near) < 2:
            return Picked(fastest, fastest, least, floor, None, [fastest], resolution=unresolved)
        # what every timing shares narrows the window, never widens it: asked only here
        held = float(shared()) if shared is not None else 0.0
        if not 0.0 <= held < ran[fastest]:  # more than a whole timing: not a part of each, so not taken off
            held = 0.0
        # the timer's step is a larger share of the configs' own time: the window keeps its width in time
        unresolved = resolution(ran.values(), ran[fastest] - held)
        least = max(floor, unresolved)
        near = window(order, ran, fastest, least, held)
        if len(near) < 2:
            return Picked(fastest, fastest, least, floor, None, [fastest], shared_ms=held, resolution=unresolved)
        if len(near) > MOST_TIMED_AGAIN:  # the first in order (the ones a pick can fall on) and the fastest
            head = near[: MOST_TIMED_AGAIN - 1]
            near = head + [fastest if fastest not in head else near[MOST_TIMED_AGAIN - 1]]
        # the sweep is the first round, then reversed and in order again, so drift cancels
        rounds_ms: dict[C, list[float]] = {c: [ran[c]] for c in near}
        for r in range(1, rounds):
            for c in near[::-1] if r % 2 else near:
                rounds_ms[c].append(float(time_again(c)))
        return settle(near, fastest, rounds_ms, held, floor, unresolved)

    started = clock()
    picked = decide()
    picked.again_s = clock() - started
    return picked


def settle(
    near: list[C], fastest: C, rounds_ms: dict[C, list[float]], held: float, floor: float, unresolved: float
) -> Picked:
    """The pick from the rounds' timings of the configs ``near`` the fastest (ms, the sweep's
    first), each less ``held`` (what every timing shares); ``unresolved`` is the timer's resolution
    (``resolution()``), which stands for the floor where it is the larger."""
    least = max(floor, unresolved)
    own = {c: [t - held for t in ts] for c, ts in rounds_ms.items()}
    if min(min(ts) for ts in own.values()) <= 0:  # a config timed again under the shared time
        return Picked(fastest, fastest, least, floor, None, [fastest], {}, True, rounds_ms, held, resolution=unresolved)
    # each timing over its round's fastest: a round the whole GPU ran slow in cancels
    least_of_round = [min(round_) for round_ in zip(*own.values())]
    ratios = {c: [t / least_of_round[r] for r, t in enumerate(ts)] for c, ts in own.items()}
    medians = {c: statistics.median(rs) for c, rs in ratios.items()}
    # the noise from the rounds timed again (the sweep chose the window, so it leans fast)
    noise = NOISE_OVER_CONFIGS([max(rs[1:]) - min(rs[1:]) for rs in ratios.values()])
    band = max(least, noise)
    if band > WINDOW * least:  # too noisy to tell near-ties apart: a band this wide would cost more than the floor
        return Picked(
            fastest, fastest, band, floor, noise, [fastest], dict(medians), True, rounds_ms, held, resolution=unresolved
        )
    best = min(medians.values())
    inside = [c for c in near if medians[c] <= best * (1 + band)]
    return Picked(
        inside[0],
        fastest,
        band,
        floor,
        noise,
        list(inside),
        dict(medians),
        False,
        rounds_ms,
        held,
        resolution=unresolved,
    )


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


def window(order: Sequence[C], ran: dict[C, float], fastest: C, floor: float, held: float) -> list[C]:
    """The configs timed again: within ``WINDOW`` x the floor of the fastest, each timing
    less ``held`` (what every timing shares), in the autotuner's order."""
    edge = (ran[fastest] - held) * (1 + WINDOW * floor)
    return [c for c in order if c in ran and ran[c] - held <= edge]
