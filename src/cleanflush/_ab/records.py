"""What ``cleanflush ab``'s parts hand each other, typed: the runs' decision lines, the prices of
their picks, each decision's class, the comparison and the record ``--json`` writes (schema 3,
docs/ab.md).  Keys that only some records have are ``NotRequired``; mypy checks every key.
The lines a run records are ``_decisions.DecisionLine``s (the writer owns their format)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from .._decisions import DecisionLine as DecisionLine  # re-exported: what ab reads
from .._decisions import PickLine

if TYPE_CHECKING:  # 3.10's typing has no NotRequired; the annotations are strings at run time
    from typing_extensions import NotRequired


Run = list[DecisionLine]


class Made(TypedDict):
    """A decision line that made a pick (the lines ``compare.by_key`` keeps)."""

    kind: str
    op: str
    key: str
    winner: str
    timings_ms: dict[str, float]
    failed_choices: NotRequired[list[str]]
    call: NotRequired[dict[str, Any]]
    pick: NotRequired[PickLine]  # what the stable rule found (a run under it)


class ToPrice(TypedDict):
    """A decision the runs picked differently, for the pricing process."""

    key: list[str]
    file: str | None
    error: str | None
    candidates: list[str]


class PickPrice(TypedDict):
    us: float  # the median of the rounds
    low: float
    high: float
    rounds: NotRequired[list[float]]


class Prices(TypedDict):
    """One decision's picks, priced (``prices.price_one``)."""

    prices: dict[str, PickPrice]
    rounds: int
    calls: int
    kernel: str


class Price(TypedDict):
    """The pricing process's answer for one decision: its picks' prices, or why it has none."""

    key: list[str]
    prices: NotRequired[dict[str, PickPrice]]
    rounds: NotRequired[int]
    calls: NotRequired[int]
    kernel: NotRequired[str]
    error: NotRequired[str | None]


class StockPick(TypedDict):
    pick: str
    runs: int
    cost: float
    cost_low: float
    cost_high: float


# "class" is a keyword: the functional form names it
_Classed = TypedDict("_Classed", {"class": str})


class Judged(_Classed):
    """One decision's class and why, by price or by the clean runs' own timing."""

    reason: str
    cost: NotRequired[float | None]
    cost_low: NotRequired[float | None]
    cost_high: NotRequired[float | None]
    clean_spread: NotRequired[float | None]
    noise: NotRequired[float]
    rounds: NotRequired[int | None]
    gap: NotRequired[float]
    unstable_side: NotRequired[str]
    stock_picks: NotRequired[list[StockPick]]
    priced: NotRequired[bool]
    not_priced: NotRequired[str]


class Timing(TypedDict):
    stock: float
    clean: float


class Decision(Judged):
    """One decision as the comparison judged it."""

    kind: str
    op: str
    key: str
    changed: bool
    stock_winner: str
    clean_winner: str
    stock_winners: list[str]
    clean_winners: list[str]
    stock_winner_slower_by: float | None
    calls: float | None
    choices: int
    timings_ms: dict[str, Timing]
    prices_us: NotRequired[dict[str, PickPrice]]
    ratio: NotRequired[float]
    cost_us: NotRequired[float]
    mean_ratio: NotRequired[float]


class Agreement(TypedDict):
    runs: int
    made_in_every_run: int
    agree: int
    agree_by_price: int


class Ratios(TypedDict):
    n: int
    q1: float | None
    median: float | None
    q3: float | None
    values: list[float]


class Total(TypedDict):
    changed_priced: int
    us_per_call_sum: float
    counted: int
    us_over_calls: float
    calls: float


class Comparison(TypedDict):
    decisions: list[Decision]
    changed: list[Decision]
    classes: dict[str, int]
    agreement: dict[str, Agreement]
    only_stock: list[list[str]]
    only_clean: list[list[str]]
    ratio_stock_over_clean: Ratios
    total: Total
    min_effect: float


class RunCode(TypedDict):
    index: int
    policy: str  # the run's flush
    code: int
    side: NotRequired[str]  # its side's label (the policy, or the pick rule with --compare pick)
    wall_s: NotRequired[float]  # the job's wall time


class PickDecision(TypedDict):
    """One decision under ``--compare pick``: each side's picks, and their prices where they differ."""

    kind: str
    op: str
    key: str
    fastest_winners: list[str]
    stable_winners: list[str]
    bands: list[float]  # each stable run's band
    candidates: list[str]  # every config a stable run kept within its band
    shared_ms: NotRequired[list[float]]  # each stable run's hooks' time taken off its timings, where any
    calls: float | None
    priced: bool
    not_priced: NotRequired[str]
    prices_us: NotRequired[dict[str, PickPrice]]
    noise: NotRequired[float]
    fastest_us: NotRequired[float]  # the mean price of the fastest runs' picks, each run counted
    stable_us: NotRequired[float]
    stable_over_fastest: NotRequired[float]  # the ratio of those: what the stable rule costs here


class PickTotal(TypedDict):
    """The decisions whose picks differed and were priced, weighted by their calls."""

    priced: int
    counted: int  # of those, the ones the runs counted calls of
    fastest_us: float  # sum over the counted of calls x mean price
    stable_us: float
    ratio: float | None


class PickComparison(TypedDict):
    decisions: list[PickDecision]
    agreement: dict[str, Agreement]
    total: PickTotal
    wall_s: dict[str, list[float]]  # each side's runs' wall times
    again_s: NotRequired[list[float]]  # each stable run's time in the rule's own timing (again, hooks alone)
    only_one_side: list[list[str]]


class Result(TypedDict):
    """The record of one ``ab`` (what ``--json`` writes)."""

    schema: int
    command: list[str]
    policy: str
    runs: int
    runs_compared: int
    work_dir: str | None
    run_codes: list[RunCode]
    skipped_lines: list[str]
    not_patched: list[str]
    compare: NotRequired[str]  # "flush" (the stock flush against a clean one) or "pick" (the rules)
    comparison: NotRequired[Comparison]  # --compare flush
    picks: NotRequired[PickComparison]  # --compare pick
    pricing_s: float
    interrupted: NotRequired[bool]
    end_to_end: NotRequired[EndToEnd | None]
    elapsed_s: NotRequired[float]
    figure: NotRequired[str | None]


class ProgramRun(TypedDict):
    """One run's compiled programs, for the end-to-end timing."""

    side: str  # its side's label
    paths: list[str]
    policy: NotRequired[str]  # the flush it tuned under (absent: the label)
    pick: NotRequired[str]  # the pick rule it tuned under (absent: the autotuners' own)


class Loaded(TypedDict):
    run: int  # its index in the runs
    path: str
    module: Any
    cuda: bool


class RatioSummary(TypedDict):
    q1: float
    median: float
    q3: float


class Summary(TypedDict):
    """The stock and clean programs of one graph (or the whole job) against each other."""

    ms: dict[str, float]
    ratio: RatioSummary
    program_ms: dict[str, list[float]]
    same_side: dict[str, float | None]
    verdict: str
    program_samples: NotRequired[dict[str, list[list[float]]]]


class Graph(Summary):
    name: str
    inputs: str
    programs: dict[str, list[str]]


class EndToEnd(TypedDict):
    """``programs.time_programs``'s record: every graph every run compiled, timed."""

    graphs: list[Graph]
    problems: list[str]
    sides: NotRequired[list[str]]  # absent where the timing process failed
    reps: NotRequired[int]
    total: NotRequired[Summary]
