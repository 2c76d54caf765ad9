"""The two statistics every timing comparison here uses; plain Python, no torch."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable


def central_mean(samples: Iterable[float]) -> float:
    """Mean of the middle 80% of samples.

    CUDA event timestamps tick in steps of about 1 us on an H200, so a median of samples is
    quantised to that step; a mean is not, but a rare host hiccup moves it.  Trimming the
    tails keeps both problems out.
    """
    xs = sorted(samples)
    cut = len(xs) // 10
    return statistics.fmean(xs[cut : len(xs) - cut])


def quartiles(values: Iterable[float]) -> tuple[float, float, float]:
    """(q1, median, q3), inclusive method; one value gives it three times."""
    xs = sorted(values)
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q1, _, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, statistics.median(xs), q3


def ran(timing: object) -> bool:
    """Whether ``timing`` is a timing that ran: a real number, finite and not negative.  Autotuners
    time a config that failed as inf (or NaN); anything else is no timing."""
    return isinstance(timing, (int, float)) and not isinstance(timing, bool) and math.isfinite(timing) and timing >= 0
