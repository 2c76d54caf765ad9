"""One module per patched harness, each loaded only when its harness is imported
(``cleanflush._registry`` names them).  A patch module has ``apply() -> list[Site]`` (what it
did per site, idempotent), ``revert()``, and optionally ``derived() -> list[Site]`` (rows
computed from other targets' state); none imports torch or triton at module level.
"""
