"""How an autotuning decision's choices are named: the same in every process, run and rank, so
that decisions can be matched across runs (``cleanflush ab``), agreed across ranks and kept
across runs (``_agree``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any


def choice_label(choice: Any) -> str:
    """An Inductor algorithm-selection choice: its kind, without Inductor's running index
    (``triton_mm_12``), and its description (the config)."""
    name = re.sub(r"_\d+$", "", str(getattr(choice, "name", type(choice).__name__)))
    description = str(getattr(choice, "description", "") or "")
    return f"{name} {description}".strip()


def launcher_label(launcher: Any) -> str:
    """An Inductor kernel's launcher, named by its config (a name already made: itself)."""
    return str(getattr(launcher, "config", launcher))


def shape(node: Any) -> str:
    """An input node's size and dtype (``1x4096 bfloat16``), or its kind where it has none."""
    try:
        return f"{'x'.join(str(s) for s in node.get_size())} {node.get_dtype()}".replace("torch.", "")
    except (AttributeError, TypeError, NotImplementedError):  # a node without a size or dtype: named by its kind
        return type(node).__name__


def shapes_key(input_nodes: Iterable[Any]) -> str:
    """An algorithm selection's key: its inputs' shapes (their kind where they are no list)."""
    try:
        return ", ".join(shape(n) for n in input_nodes)
    except TypeError:  # not an iterable of nodes: named by its kind
        return type(input_nodes).__name__
