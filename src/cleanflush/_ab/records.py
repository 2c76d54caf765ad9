"""What ``cleanflush ab``'s parts hand each other, typed: the runs' decision lines, the prices of
their picks, each decision's class, the comparison and the record ``--json`` writes (schema 3,
docs/ab.md).  Keys that only some records have are ``NotRequired``; mypy checks every key.
The lines a run records are ``_decisions.DecisionLine``s (the writer owns their format)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from .._decisions import DecisionLine as DecisionLine  # re-exported: what ab reads

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
    pick: NotRequired[dict[str, Any]]  # what the rule found (``_pick.Picked.line``; ``decision`` checked it)
    rank: NotRequired[int]  # the rank of a distributed job that made it


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
    """One decision under ``--compare pick``: each rule's picks, and their prices where they differ.
    Each mapping is keyed by the rules' names, the first rule first."""

    kind: str
    op: str
    key: str
    winners: dict[str, list[str]]  # each run's pick (its first rank's), in run order
    bands: dict[str, list[float]]  # each run's band, where the rule made a pick of its own
    candidates: dict[str, list[str]]  # every config a run found alike with its pick
    shared_ms: NotRequired[dict[str, list[float]]]  # each run's hooks' time taken off its timings, where any
    ranks: NotRequired[dict[str, list[int]]]  # each run of several ranks: how many configs its ranks kept
    calls: float | None
    priced: bool
    not_priced: NotRequired[str]
    prices_us: NotRequired[dict[str, PickPrice]]
    noise: NotRequired[float]
    us: NotRequired[dict[str, float]]  # the mean price of each rule's picks, each run counted
    ratio: NotRequired[float]  # the second rule's mean price over the first's: what it costs here


class PickTotal(TypedDict):
    """The decisions whose picks differed and were priced, weighted by their calls."""

    priced: int
    counted: int  # of those, the ones the runs counted calls of
    us: dict[str, float]  # per rule: the sum over the counted of calls x mean price
    ratio: float | None  # the second rule's over the first's


class RankAgreement(TypedDict):
    """Per rule, over the runs of several ranks: the decisions every rank of a run picked alike."""

    runs: int  # the runs with more than one rank
    decisions: int  # the decisions those runs made on several ranks
    alike: int  # of those, every rank of every run picked the same config


class PickComparison(TypedDict):
    rules: list[str]  # the two rules, the first ran first
    decisions: list[PickDecision]
    agreement: dict[str, Agreement]
    ranks: NotRequired[dict[str, RankAgreement]]  # where a run had several ranks
    total: PickTotal
    wall_s: dict[str, list[float]]  # each rule's runs' wall times
    again_s: NotRequired[dict[str, list[float]]]  # each run's time in the rule's own timing (again, hooks alone)
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
