"""Installing, applying, reverting and reporting the registry's targets: the generic half of
every patch, written once.

A target's patch module is imported by the hook of its first trigger module; its ``apply``
says what it did per site (``Site``), and this module turns that, a disabled name, a failed
patch or a package not imported yet into the rows of ``cleanflush.status()``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import import_module
from typing import Any

import wrapt

from . import _children, _env, _flush, _pick, _policy, _report
from ._registry import NAMES, TARGETS, Target
from ._state import STATE, Site, State, TargetStatus, record, say_once, warn_once


@dataclass
class _Install:
    """What install remembers besides ``STATE.installed``."""

    env_before: str | None = None  # CLEANFLUSH before the install: what uninstall puts back
    pick_before: str | None = None  # CLEANFLUSH_PICK before the install, likewise
    hooks_registered: bool = False  # once per process, also across importlib.reload(cleanflush)
    autotuning_loaded: bool = False  # the modules that hook autotuners are loaded and registered


INSTALL = _Install()

# The modules that hook autotuners (each with register, apply and revert), in the order their
# hooks go on: the pick rule's wrappers before the decision recorder's, which sit outside them
# and record what the rule kept (``_patching.PatchSet``); uninstall takes them off in reverse.
# They load at the first import of a module they hook (``AUTOTUNERS``: each one's ``HOOKS``),
# so a process that never autotunes never pays for them.
AUTOTUNING = ("cleanflush._inductor_pick", "cleanflush._autotuner", "cleanflush._decisions")
AUTOTUNERS = (
    "triton.runtime.autotuner",
    "torch._inductor.select_algorithm",
    "torch._inductor.runtime.triton_heuristics",
    "torch._inductor.runtime.coordinate_descent_tuner",
)


def autotuning() -> list[Any]:
    """The modules that hook autotuners, those loaded so far, in order."""
    return [sys.modules[name] for name in AUTOTUNING if name in sys.modules]


def _load_autotuning(module: Any = None) -> None:
    """At the first import of an autotuner: load the modules that hook autotuners, and register
    each, in order (a post-import hook: each registers hooks of its own, which fire at once for
    what is imported already)."""
    if INSTALL.autotuning_loaded:
        return
    INSTALL.autotuning_loaded = True
    for name in AUTOTUNING:
        import_module(name).register()


def resolve(path: str) -> Callable[..., Any]:
    """The function a ``"module:function"`` string names (importing the module)."""
    module, _, function = path.partition(":")
    found: Callable[..., Any] = getattr(import_module(module), function)
    return found


@cache
def version(target: Target) -> str | None:
    """The version of the first of the target's distributions that is installed."""
    from importlib import metadata  # 10-20 ms: only when a version is asked for

    for dist in target.distributions:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def disabled() -> frozenset[str]:
    """The names ``CLEANFLUSH_DISABLE`` keeps stock; an unknown name is said once (the
    valid ones still apply)."""
    names = _env.disabled_from_environ(NAMES)
    problem = names.problem(NAMES)
    if problem:
        say_once(f"disable:{names.unknown}", problem)
    return names.names


def _set(target: Target, sites: list[Site]) -> None:
    """The target's rows are now ``sites`` (an apply sees every module loaded so far)."""
    with STATE.lock:
        STATE.sites[target.name] = {}
        for site in sites:
            record(target.name, site, version(target))


def apply(target: Target) -> None:
    """Patch one target now; on any failure undo it, say why in status, keep it stock."""
    if not STATE.installed:
        return
    if target.name in disabled():
        if target.module in sys.modules:  # patched before the name was disabled (a re-install)
            resolve(target.revert)()
        _set(target, [Site(target.title, "disabled", f"disabled by {_env.DISABLE_VAR}; stock flush kept")])
        return
    sites, failed = _guarded(target.apply)
    if failed is not None:
        reason = f"could not patch {target.name} ({failed!r}); its stock flush is kept"
        _, undo = _guarded(target.revert)
        if undo is not None:  # the stock objects may not all be back: say that too
            reason += f"; undoing it failed too ({undo!r})"
        _set(target, [Site(target.title, "failed", reason)])
        warn_once(f"apply:{target.name}", reason)
        return
    _set(target, sites)


def _guarded(path: str) -> tuple[Any, Exception | None]:
    """What a patch module's function returns, or the exception it raised instead."""
    try:
        return resolve(path)(), None
    except Exception as exc:  # a layout we could not read, or not undo: it must not break the user's import
        return None, exc


def revert(target: Target) -> None:
    """Put back every object the target's patch replaced; its patched rows say so."""
    if target.module not in sys.modules:
        return  # never applied in this process
    resolve(target.revert)()
    with STATE.lock:
        rows = STATE.sites.get(target.name, {})
        for site, row in list(rows.items()):
            if row.patched:
                rows[site] = TargetStatus(row.name, row.target, row.version, "off", "uninstalled")


def _hook(target: Target) -> Callable[[Any], None]:
    def hook(module: Any) -> None:
        apply(target)

    return hook


def install(policy: str | None, source: str) -> bool:
    """Install with ``policy`` as the process default; False (nothing done) where
    ``CLEANFLUSH`` says off."""
    if _env.is_off(_env.value(_env.POLICY_VAR)):
        return False
    if policy is not None:
        _policy.set_default(policy)
    with STATE.lock:
        if not STATE.installed:
            STATE.installed = True
            STATE.source = source
            INSTALL.env_before = _env.value(_env.POLICY_VAR)
            INSTALL.pick_before = _env.value(_env.PICK_VAR)
            _pick.from_environ()
        _policy.export(True, _policy.default())
        _pick.PICK.export(True, INSTALL.pick_before)
        first_install, INSTALL.hooks_registered = not INSTALL.hooks_registered, True
    disabled()  # a name it does not know is said here, at the user's import or install()
    # Hooks run outside our lock: they may fire inside another thread's import.
    if first_install:
        _report.register()
        _children.register()
        for target in TARGETS:
            hook = _hook(target)
            for module in target.triggers:
                # wrapt fires the hook at once if the module is already imported
                wrapt.register_post_import_hook(hook, module)
        for module in AUTOTUNERS:
            wrapt.register_post_import_hook(_load_autotuning, module)
        return True
    for target in TARGETS:
        if any(module in sys.modules for module in target.triggers):
            apply(target)
    for hooks in autotuning():
        hooks.apply()
    if "multiprocessing.process" in sys.modules:
        _children.apply()
    return True


def uninstall() -> None:
    """Revert every target and put ``CLEANFLUSH`` back as it was before the install."""
    with STATE.lock:
        if not STATE.installed:
            return
        STATE.installed = False
        for target in TARGETS:
            revert(target)
        for hooks in reversed(autotuning()):
            hooks.revert()
        if "cleanflush._tunercache" in sys.modules:  # every autotuner its own cache dict back
            sys.modules["cleanflush._tunercache"].revert()
        _children.revert()
        _policy.export(False, INSTALL.env_before)
        _pick.PICK.export(False, INSTALL.pick_before)


def adopt(value: str | None) -> None:
    """In a multiprocessing child whose cleanflush was loaded before it started (forked from a
    server that had it): run under the parent's ``CLEANFLUSH`` value from now on."""
    try:
        policy = _env.parse_policy(value)
    except ValueError:
        return  # an invalid value was said where it was set; the child keeps what it has
    if policy is None:
        uninstall()
    elif STATE.installed:
        _policy.set_default(policy)
        _policy.export(True, policy)


def rows(target: Target) -> list[TargetStatus]:
    """The target's status rows: what its patch recorded and computed, else why there is none."""
    found = list(STATE.sites.get(target.name, {}).values())
    if target.derived and target.module in sys.modules:
        found += [
            TargetStatus(target.name, s.target, version(target), s.state, s.detail) for s in resolve(target.derived)()
        ]
    if found:
        return found
    installed = version(target)
    state: State
    if installed is None and target.distributions:
        state, detail = "absent", f"{target.distributions[0]} is not installed"
    elif not STATE.installed:
        state, detail = "off", _why_off()
    elif target.name in disabled():
        state, detail = "disabled", f"disabled by {_env.DISABLE_VAR}; stays stock when imported"
    elif not target.distributions:
        state, detail = "pending", f"a script's own module: patched when a script imports {target.triggers[0]}"
    else:
        state, detail = "pending", "not imported yet; patched when it is"
    return [TargetStatus(target.name, target.title, installed, state, detail)]


def _why_off() -> str:
    value = _env.value(_env.POLICY_VAR)
    if _env.is_off(value):
        return f"{_env.POLICY_VAR}={value}: off"
    return "cleanflush is not installed"


def status() -> list[TargetStatus]:
    return [row for target in TARGETS for row in rows(target)] + _flush.status_rows()
