"""The flush policies: one record each, defined here once.  Plain Python (the environment's
parser reads the names before anything else is loaded).

What a policy does is in its fields, and the flush (``_flush``), verify and the docs read
those fields, never a policy's name: adding one is a record here, its docs and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    """What a flush runs before a timed call under one policy."""

    name: str
    writes: bool  # the harness's own write runs (a write inline in the harness always does)
    reads: bool  # a clean float32 read of a region of our own follows
    # where cleanflush owns the write and the read can hold the stream, only the head of the
    # cache is written (``_flush.owned_write_bytes``), not all of it
    shrinks_owned_write: bool
    summary: str  # one line, for ``--help`` and the docs

    @property
    def is_stock(self) -> bool:
        """The harness's flush as it ships: the A/B control."""
        return self.writes and not self.reads


WRITE_READ = Policy(
    "write-read",
    writes=True,
    reads=True,
    shrinks_owned_write=True,
    summary="the stock write, then a float32 read of 2 x L2 of a separate region",
)
READ = Policy("read", writes=False, reads=True, shrinks_owned_write=False, summary="the read alone; nothing written")
WRITE = Policy("write", writes=True, reads=False, shrinks_owned_write=False, summary="the stock write alone")

BY_NAME = {p.name: p for p in (WRITE_READ, READ, WRITE)}
POLICIES = tuple(BY_NAME)  # the names, the default first
# The default: the stock write, then a clean read (docs/decisions/default-policy.md has the
# trade-off against `read`).
DEFAULT_POLICY = WRITE_READ.name
STOCK_POLICY = WRITE.name  # the policy that runs the harness's flush unchanged


def get(name: str) -> Policy:
    """The record of a valid policy name (``_policy.check`` validates user input)."""
    return BY_NAME[name]
