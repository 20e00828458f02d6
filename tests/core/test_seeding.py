"""Every attempt seeds Python's random, numpy and torch from its seed, as torch.manual_seed
would, and where a device runtime could start it is torch.manual_seed itself."""

from __future__ import annotations

import random
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from harness.worker.attempt import seed_everything


def draws() -> tuple[float, float, list[float]]:
    return random.random(), float(np.random.random()), torch.rand(3).tolist()


def test_an_attempt_draws_what_torch_manual_seed_gives() -> None:
    seed_everything(1234)
    ours = draws()
    random.seed(1234)
    np.random.seed(1234)
    torch.manual_seed(1234)
    assert draws() == ours
    seed_everything(1234)
    assert draws() == ours  # whatever ran in between
    seed_everything(99)
    assert draws() != ours


def _fake_torch(calls: list[str], *, cuda: bool) -> Any:
    gen = SimpleNamespace(manual_seed=lambda s: calls.append(f"cpu {s}"))
    return SimpleNamespace(
        manual_seed=lambda s: calls.append(f"all {s}"),
        default_generator=gen,
        cuda=SimpleNamespace(is_available=lambda: cuda),
        xpu=SimpleNamespace(is_available=lambda: False),
        backends=SimpleNamespace(mps=SimpleNamespace(is_available=lambda: False)),
        _C=SimpleNamespace(_get_privateuse1_backend_name=lambda: "privateuseone"),
    )


def test_a_stand_in_cuda_runtime_gets_torch_manual_seed_for_every_device(
    monkeypatch: Any,
) -> None:
    # A stand-in for a CUDA torch (none exists here): the devices must be seeded too.
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(calls, cuda=True))
    seed_everything(7)
    assert calls == ["all 7"]
    calls.clear()
    monkeypatch.setitem(sys.modules, "torch", _fake_torch(calls, cuda=False))
    seed_everything(7)
    assert calls == ["cpu 7"]
    broken = SimpleNamespace(manual_seed=lambda s: calls.append(f"all {s}"))
    monkeypatch.setitem(sys.modules, "torch", broken)
    seed_everything(8)
    assert calls[-1] == "all 8"  # a torch without the probes: the documented call
