"""A Triton autotuning call, recorded so that ``cleanflush ab`` can make it again and time its
picks (``_ab.prices``).

When an ``@triton.autotune`` kernel tunes a key for the first time in an ``ab`` run, the
arguments of that call are saved with ``torch.save`` (tensors with their storage, strides and
offsets, copied from the GPU; a ``TensorDescriptor`` with its tensor; scalars as they are),
with the kernel's module and name and the launch grid each config gave.  Later, in a process
of its own, ``Call.load`` imports the kernel's module, finds its ``Autotuner`` and makes the
same call again under any config: the config's pre-hook, the autotuner's own pre- and
post-hooks (``restore_value``, ``reset_to_zero``) and the launch, as Triton's autotuner times
one config.  One record per kernel and key, whichever run made it first: the runs tune the
same calls, with the same shapes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any

# The record of a call whose arguments' storages are larger than this is not made: what it
# copies to the host and the disk would be far larger than the kernel's own data (a view
# into a large cache, say).
MAX_BYTES = 4 << 30
NOT_ARGUMENTS = ("grid", "warmup")  # what the autotuner's caller passes beside the kernel's arguments


def file_for(op: str, key: str) -> str:
    """The record's file name for a kernel and key: the same in every run."""
    return hashlib.sha1(f"{op}\n{key}".encode()).hexdigest()[:20] + ".pt"


class GridRecorder:
    """Stands in for a launch's grid function and keeps what it gave for each config's
    meta-parameters: the grid of a config the record can make again without the caller's
    closure."""

    def __init__(self, grid: Callable[[dict[str, Any]], Any], names: list[str]) -> None:
        self.grid, self.names = grid, names
        self.seen: dict[tuple[Any, ...], tuple[int, ...]] = {}

    def __call__(self, meta: dict[str, Any]) -> Any:
        found = self.grid(meta)
        self.seen[tuple(meta.get(name) for name in self.names)] = tuple(int(n) for n in found)
        return found


def config_names(tuner: Any) -> list[str]:
    """The meta-parameters the tuner's configs set, in a fixed order."""
    return sorted({name for config in getattr(tuner, "configs", ()) for name in getattr(config, "kwargs", {})})


CONFIG_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


def config_spec(config: Any) -> dict[str, Any]:
    """What makes a ``triton.Config`` again: its meta-parameters and launch options (a
    pruner may hand the autotuner configs that are not in its list)."""
    spec = {name: getattr(config, name) for name in CONFIG_OPTIONS if hasattr(config, name)}
    return {"kwargs": dict(getattr(config, "kwargs", {})), **spec}


def record(
    tuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any], grids: Any, configs: list[Any], path: str
) -> str | None:
    """Save the call to ``path`` (unless a run saved it already), with the ``configs`` it was
    timed under; why it cannot be, or None."""
    if os.path.exists(path):
        return None
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        return f"the folder it would be recorded in, {folder!r}, is not a folder"
    import torch

    fn = getattr(tuner, "base_fn", None)
    module = getattr(fn, "__module__", None)
    if fn is None or module is None or module == "__main__":
        return "its kernel is defined in __main__ (or nowhere importable): it cannot be made again elsewhere"
    # views of one storage (q, k and v of one qkv buffer) are saved, and counted, once
    storages = {a.untyped_storage().data_ptr(): a.untyped_storage().nbytes() for a in _tensors(args, kwargs)}
    size = sum(storages.values())
    if size > MAX_BYTES:
        return f"its arguments' storages hold {size / (1 << 30):.1f} GiB: too large to record"
    meta = {k: v for k, v in kwargs.items() if k not in NOT_ARGUMENTS}
    grid = kwargs.get("grid")
    payload = {
        "module": module,
        "name": fn.__name__,
        "args": list(args),
        "kwargs": meta,
        "grid": grid if isinstance(grid, tuple) else None,
        "grids": dict(grids.seen) if isinstance(grids, GridRecorder) else {},
        "grid_names": grids.names if isinstance(grids, GridRecorder) else [],
        "configs": {str(config): config_spec(config) for config in configs},
    }
    # a name no one can guess, in the same folder, then renamed: whole, or not there (two runs
    # may record the same key), and never written through a link planted where it goes
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".call-", suffix=".tmp")
        with os.fdopen(handle, "wb") as f:
            torch.save(payload, f)
        os.replace(temporary, path)
    except Exception as exc:  # an argument pickle cannot take, a full disk: this decision is not priced
        if temporary is not None and os.path.exists(temporary):
            os.unlink(temporary)
        return f"its arguments could not be saved ({type(exc).__name__}: {exc})"[:300]
    return None


def before_call(tuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """The arguments of an in-place kernel (``reset_to_zero``, ``restore_value``) as they are
    before a call that will tune a new key: its tensors that the call writes, copied, the rest
    as they are; None where nothing needs keeping (the record is then made of ``args``).  The
    key is computed as Triton's ``Autotuner.run`` does; where it is not found in the cache the
    copy is made (another layout costs a copy, never a record of changed data)."""
    written = set(getattr(tuner, "reset_to_zero", None) or []) | set(getattr(tuner, "restore_value", None) or [])
    names = list(getattr(tuner, "arg_names", []) or [])
    if not written or not names:
        return None
    cache = getattr(tuner, "cache", None)
    cache = getattr(cache, "data", cache)  # the dict a TunerCache keeps: asked without a count
    if isinstance(cache, dict) and tuning_key(tuner, args, kwargs) in cache:  # tuned already: no record comes
        return None
    import torch

    copies: dict[int, torch.UntypedStorage] = {}  # storage -> its copy: views of one storage stay views of one copy

    def before(arg: Any) -> Any:
        if not isinstance(arg, torch.Tensor):
            return arg
        storage = arg.untyped_storage()
        if storage.data_ptr() not in copies:
            copies[storage.data_ptr()] = storage.clone()  # type: ignore[no-untyped-call]
        copy: torch.UntypedStorage = copies[storage.data_ptr()]
        return arg.new_empty(0).set_(copy, arg.storage_offset(), arg.size(), arg.stride())

    return tuple(before(arg) if name in written else arg for name, arg in zip(names, args)) + tuple(args[len(names) :])


def tuning_key(tuner: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The key Triton's ``Autotuner.run`` looks the call up by: the tuner's key arguments, then
    the dtype of every argument that has one (triton-lang/triton 0094017; 3.0-3.9 alike)."""
    names = list(getattr(tuner, "arg_names", []) or [])
    given = {**dict(zip(names, args)), **kwargs}
    named = {name: value for name, value in given.items() if name in names}
    key = [named[k] for k in getattr(tuner, "keys", []) if k in named]
    key += [str(value.dtype) for value in named.values() if hasattr(value, "dtype")]
    return tuple(key)


def _tensors(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    import torch

    found = []
    for value in [*args, *kwargs.values()]:
        base = getattr(value, "base", value)  # a TensorDescriptor's tensor
        if isinstance(base, torch.Tensor):
            found.append(base)
    return found


@dataclass
class Call:
    """A recorded call, loaded onto the GPU with its kernel's autotuner."""

    tuner: Any
    args: list[Any]
    kwargs: dict[str, Any]
    grid: tuple[int, ...] | None
    grids: dict[tuple[Any, ...], tuple[int, ...]]
    grid_names: list[str]
    configs: dict[str, dict[str, Any]]  # label -> its spec, as the run timed it

    @classmethod
    def load(cls, path: str, device: Any) -> Call:
        """The call in ``path``, its tensors on ``device``; raises (with a reason a user can
        act on) where the kernel cannot be found."""
        import torch

        with _loadable():  # nothing in the file runs: only the types a record holds are made
            payload = torch.load(path, map_location=device, weights_only=True)
        module = import_module(payload["module"])
        tuner = _autotuner_in(module, payload["name"])
        return cls(
            tuner,
            payload["args"],
            payload["kwargs"],
            payload["grid"],
            payload["grids"],
            payload["grid_names"],
            payload.get("configs", {}),
        )

    def config(self, label: str) -> Any:
        """The config that ``label`` (its ``str``) names: the tuner's own (with its pre-hook), or
        one made again from what the run recorded (a pruner's config: its pre-hook is that of
        the tuner's config with the same meta-parameters, where there is one)."""
        for config in self.tuner.configs:
            if str(config) == label:
                return config
        spec = self.configs.get(label)
        if spec is None:
            raise LookupError(f"no config of {self.tuner.base_fn.__name__} is {label!r} here")
        import triton

        same = next((c for c in self.tuner.configs if dict(c.kwargs) == spec["kwargs"]), None)
        options = {name: spec[name] for name in CONFIG_OPTIONS if name in spec}
        return triton.Config(spec["kwargs"], **options, pre_hook=getattr(same, "pre_hook", None))

    def launch(
        self, label: str, before_kernel: Callable[[], object] | None = None, tuning_hooks: bool = True
    ) -> Callable[[], None]:
        """The call under the config ``label``, as Triton's autotuner times one config: its
        pre-hook, the autotuner's pre-hook, the kernel, the autotuner's post-hook.

        ``before_kernel`` runs after the pre-hooks, just before the kernel: a read there leaves
        L2 clean for the kernel whatever the hooks left in it (``restore_value``'s clones read
        the kernel's data into L2 and write their copies dirty).  ``tuning_hooks=False`` leaves
        out the autotuner's own hooks (``restore_value``, ``reset_to_zero``, or a ``pre_hook``
        and ``post_hook`` given to ``autotune``): the kernel as it runs outside tuning, its
        config's pre-hook kept (it may set what the launch needs)."""
        config = self.config(label)
        grid = self.grid or self.grids.get(tuple(config.kwargs.get(name) for name in self.grid_names))
        if grid is None:
            raise LookupError(f"the grid of config {label!r} was not recorded (the job's run never launched it)")
        current = {**self.kwargs, "grid": grid, "warmup": False, **config.all_kwargs()}
        tuner = self.tuner
        full = {**dict(zip(tuner.arg_names, self.args)), **current}

        def call() -> None:
            if config.pre_hook:
                config.pre_hook(full)
            if tuning_hooks:
                tuner.pre_hook(full)
            if before_kernel is not None:
                before_kernel()
            tuner.fn.run(*self.args, **current)
            if tuning_hooks:
                tuner.post_hook(full, exception=None)

        return call


def _loadable() -> Any:
    """The context in which ``torch.load(weights_only=True)`` takes the classes a record may
    hold besides tensors and plain values: Triton's ``TensorDescriptor`` and ``dtype``."""
    import contextlib

    import torch

    allowed = []
    for module, name in (("triton.tools.tensor_descriptor", "TensorDescriptor"), ("triton.language", "dtype")):
        try:
            allowed.append(getattr(import_module(module), name))
        except (ImportError, AttributeError):  # an older triton: its records hold none of them
            continue
    safe = getattr(torch.serialization, "safe_globals", None)
    return safe(allowed) if safe is not None else contextlib.nullcontext()


def _autotuner_in(module: Any, name: str) -> Any:
    """The ``Autotuner`` of kernel ``name`` in ``module``: under the kernel's own name, or
    under a name of its own (``tuned = triton.autotune(...)(kernel)``)."""
    try:
        return _autotuner(getattr(module, name, None), name)
    except LookupError:
        for value in list(vars(module).values()):
            try:
                return _autotuner(value, name)
            except LookupError:
                continue
        raise


def _autotuner(found: Any, name: str) -> Any:
    """The ``Autotuner`` behind a module attribute (under ``@triton.heuristics`` too)."""
    for _ in range(4):
        if found is None:
            break
        if hasattr(found, "configs") and getattr(getattr(found, "base_fn", None), "__name__", None) == name:
            return found
        found = getattr(found, "fn", None)
    raise LookupError(f"{name} is not a @triton.autotune kernel of its module here")


def kernel_name(call: Call) -> str:
    """The name the GPU profiler gives the kernel's launches."""
    return str(call.tuner.base_fn.__name__)
