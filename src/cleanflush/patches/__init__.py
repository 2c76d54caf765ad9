"""One module per patched harness, each loaded only when its harness is imported
(``cleanflush._registry`` names them).  A patch module has ``apply() -> list[Site]`` (what it
did per site, idempotent), ``revert()``, and optionally ``derived() -> list[Site]`` (rows
computed from other targets' state); none imports torch or triton at module level.
"""

from __future__ import annotations

from typing import Any


def current_cuda_device() -> Any:
    """The current CUDA device as a ``torch.device`` with its index (what a harness's bare
    ``"cuda"`` means), or None where torch has no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.device("cuda", torch.cuda.current_device())
