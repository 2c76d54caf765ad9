"""What ``cleanflush audit``'s parts hand each other, typed: the entries to price, the pricing
process's answer, each entry as judged, and the record ``--json`` writes (docs/audit.md).
The lines the job's recorder writes are ``_audit.served.Served`` (the writer owns their format)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from .._ab.records import PickPrice as PickPrice  # re-exported: a price, as ab's timer gives it
from .served import Served as Served  # re-exported: what the audit reads

if TYPE_CHECKING:  # 3.10's typing has no NotRequired; the annotations are strings at run time
    from typing_extensions import NotRequired

CUPTI, GRAPH = "cupti", "graph"  # the two timers: ab's kernel time after a plain read, the served graph
TIMERS = (CUPTI, GRAPH)


class ToPrice(TypedDict):
    """An entry for the pricing process."""

    id: int
    file: str  # the recorded call, in the calls folder
    shipped: str
    offered: list[str]  # the autotuner's search for the call, in its order


class Settings(TypedDict):
    """How the pricing process times (``price.main``'s spec, beside the entries)."""

    leaders: int  # a search larger than this is cut to its fastest this many by the first sweep
    sweep_calls: int  # calls per config in the first sweep
    rounds: int  # rounds of each timer's side-by-side price
    calls: int  # calls per config and round of ab's timer
    floor: float  # the stable rule's floor among the leaders


class Priced(TypedDict):
    """The pricing process's answer for one entry: the clean re-tune and both timers' prices, or why none."""

    id: int
    error: NotRequired[str]
    kernel: NotRequired[str]
    sweep_us: NotRequired[dict[str, float]]  # the first clean sweep: each config that ran, us
    failed: NotRequired[list[str]]  # configs that could not run here, left out of the sweep
    leaders: NotRequired[list[str]]  # the configs the stable rule settled among, in the autotuner's order
    pick: NotRequired[dict[str, Any]]  # the stable rule's pick (``_pick.Picked.line``)
    clean: NotRequired[str]
    prices: NotRequired[dict[str, dict[str, PickPrice]]]  # timer -> label -> price (us)
    copies: NotRequired[int]  # the graph timer's copies of the call's inputs
    seconds: NotRequired[dict[str, float]]  # where the entry's wall time went


# "class" is a keyword: the functional form names it
_Classed = TypedDict("_Classed", {"class": str})


class Audited(_Classed):
    """One served entry, judged."""

    op: str
    key: str
    source: str  # preloaded, disk cache, stored untimed, pruner, or a library's name
    shipped: str
    reason: str
    provenance: NotRequired[str]  # where the entry came from, in words (a library's table, another GPU's)
    other_gpu: NotRequired[bool]  # tuned on another GPU than the one it served
    clean: NotRequired[str]
    offered: NotRequired[int]
    leaders: NotRequired[int]
    prices_us: NotRequired[dict[str, dict[str, PickPrice]]]
    ratio: NotRequired[dict[str, float]]  # timer -> shipped over clean
    noise: NotRequired[dict[str, float]]  # timer -> the rounds' spread, relative
    cost_us: NotRequired[float | None]  # per call: the smaller of the two timers' (wrong entries)
    calls: NotRequired[int | None]  # the job's calls with this key
    cost_job_us: NotRequired[float | None]  # cost_us x calls
    seconds: NotRequired[dict[str, float]]
    written: NotRequired[str]  # where the corrected entry was written, or why not


class Headline(TypedDict):
    entries: int
    classes: dict[str, int]
    other_gpu: int  # entries tuned on another GPU
    cost_us_per_call: float  # the wrong entries' costs per call, summed (one call of each key)
    cost_job_us: float  # weighted by the job's calls of each key (the wrong entries it counted)
    counted: int  # the wrong entries whose calls the job counted


class Written(TypedDict):
    """A corrected table: where, how many entries replaced, how to use it."""

    path: str
    library: str
    replaced: int
    use: str


class AuditResult(TypedDict):
    """The record of one audit (what ``--json`` writes)."""

    schema: int
    command: list[str]
    code: int  # the job's exit code
    min_effect: float
    entries: list[Audited]
    headline: Headline
    tuned_here: int  # decisions the job tuned itself (not audited)
    skipped_lines: list[str]
    problems: list[str]  # tables that could not be read, a pricing process that failed
    written: list[Written]
    elapsed_s: float
    pricing_s: float
    interrupted: NotRequired[bool]
    work_dir: NotRequired[str | None]
