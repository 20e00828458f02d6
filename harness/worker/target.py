"""What runs a target, light enough for a rank process to import (no checks, no metrics):
seeding every generator from the case seed, resolving ``module:function``, and the platform
object the attempt's stages measure through. Used by the worker (:mod:`.attempt`) and by each
rank of a multi-rank case (:mod:`.rank_main`)."""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import random
import sys
from collections.abc import Callable
from typing import Any

from harness import platforms


def seed_everything(seed: int) -> None:
    """Seed Python's random, numpy and torch from the case seed.

    torch is seeded only where it is imported: a fresh interpreter starts bare (a cold-import
    case must be able to see an eager ``import torch``), so when torch is not imported yet a
    one-shot import hook seeds it the moment the target imports it.
    """
    random.seed(seed)
    np_mod = sys.modules.get("numpy")
    if np_mod is not None:
        np_mod.random.seed(seed % (2**32))
    else:
        _seed_on_import("numpy", lambda m: m.random.seed(seed % (2**32)))
    torch = sys.modules.get("torch")
    if torch is not None:
        _seed_torch(torch, seed)
    else:
        _seed_on_import("torch", lambda m: _seed_torch(m, seed))


def _seed_torch(torch: Any, seed: int) -> None:
    """``torch.manual_seed(seed)``, minus what cannot matter in this process: where no device
    runtime can start (CUDA, XPU and MPS unavailable, no custom backend such as torch_npu),
    the CPU generator is all that torch.manual_seed seeds, and its queued lazy seeds for
    CUDA and XPU each record a call stack: 0.4-1.2 ms an attempt, most of a cheap case's
    per-attempt overhead (``bench/bench_runner.py``). Anything unusual gets the full call."""
    try:
        cpu_only = not (
            torch.cuda.is_available()
            or torch.xpu.is_available()
            or torch.backends.mps.is_available()
            or torch._C._get_privateuse1_backend_name() != "privateuseone"
        )
        generator = torch.default_generator if cpu_only else None
    except Exception:  # a torch without one of these: seed the documented way
        generator = None
    if generator is not None:
        generator.manual_seed(seed)
    else:
        torch.manual_seed(seed)


class _SeedOnImport(importlib.abc.MetaPathFinder):
    """Runs ``then(module)`` right after ``name`` is first imported, then removes itself."""

    def __init__(self, name: str, then: Callable[[Any], Any]) -> None:
        self.name = name
        self.then = then

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        loader, then = spec.loader, self.then
        exec_module = loader.exec_module

        def exec_and_seed(module: Any) -> None:
            exec_module(module)
            then(module)

        loader.exec_module = exec_and_seed  # type: ignore[method-assign]
        return spec


def _seed_on_import(name: str, then: Callable[[Any], Any]) -> None:
    for finder in list(sys.meta_path):
        if isinstance(finder, _SeedOnImport) and finder.name == name:
            sys.meta_path.remove(finder)
    sys.meta_path.insert(0, _SeedOnImport(name, then))


def resolve_target(spec: str) -> Any:
    module_name, _, func_name = spec.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, func_name)
    except AttributeError:
        raise AttributeError(
            f"target '{spec}': module '{module_name}' ({getattr(module, '__file__', '?')}) "
            f"has no attribute '{func_name}'"
        ) from None


def stage_device(platform: str) -> platforms.Platform | None:
    """The platform object the attempt's stages measure through (synchronize, device events,
    peak memory). It acts only where that platform's runtime is loaded and initialized in this
    process, so a simulated platform measures wall time alone; an unknown name (a third-party
    platform that did not load in this worker) falls back to wall time too. So does a platform
    that can have no device runtime (the CPU: its ``backend`` is the base class's, always
    None), without the two calls into it that every stage would make for nothing."""
    try:
        found = platforms.get(platform)
    except KeyError:
        return None
    return None if type(found).backend is platforms.Platform.backend else found
