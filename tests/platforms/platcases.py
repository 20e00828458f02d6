"""Stand-ins for device runtimes that cannot exist on this CPU machine, and a way to run code
against them in a subprocess, so the real torch of the test process is never touched.

A module with a unique name, not conftest: several test folders have a conftest.

* :data:`FAKE_TORCH` is a ``torch`` package stand-in configured by the ``FAKE_TORCH`` JSON
  environment variable: a CUDA or a ROCm/HIP build (``version.cuda`` / ``version.hip``) with a
  list of devices, device events whose ``elapsed_time`` is ``elapsed_ms``, an allocator whose
  peak the script drives with ``torch.cuda._alloc(n)``, and a ``synchronize`` that raises
  ``torch.cuda._fault`` when it is set (an asynchronous device fault surfacing there).
* :data:`FAKE_TORCH_NPU` is a ``torch_npu`` stand-in that, imported next to the real torch,
  gives it a ``torch.npu`` reporting 8 Ascend910B3 devices, like torch_npu on an Ascend host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

FAKE_TORCH = '''
"""torch stand-in for the harness's platform tests (not torch)."""
import json as _json
import os as _os
import types as _types

_CFG = _json.loads(_os.environ["FAKE_TORCH"])
__version__ = _CFG.get("version", "2.99.0+fake")
version = _types.SimpleNamespace(cuda=_CFG.get("cuda"), hip=_CFG.get("hip"))
calls = []  # what the harness asked of this runtime, in order


class _Props:
    def __init__(self, d):
        self.name = d["name"]
        self.total_memory = d["memory"]
        self.multi_processor_count = d["mp"]
        self.major, self.minor = d.get("cap", (9, 0))
        if "gcn" in d:
            self.gcnArchName = d["gcn"]


class _Event:
    def __init__(self, enable_timing=False):
        assert enable_timing, "the harness must ask for timing events"

    def record(self):
        calls.append("event.record")

    def synchronize(self):
        calls.append("event.synchronize")

    def elapsed_time(self, other):
        return float(_CFG.get("elapsed_ms", 0.0))


class _Cuda:
    Event = _Event

    def __init__(self):
        self._current = 0
        self._peak = 0
        self._fault = None
        self._initialized = _CFG.get("initialized", True)

    def is_available(self):
        return bool(_CFG.get("devices"))

    def is_initialized(self):
        return self._initialized

    def device_count(self):
        return len(_CFG.get("devices", []))

    def get_device_name(self, i=0):
        return _CFG["devices"][i]["name"]

    def get_device_properties(self, i=0):
        return _Props(_CFG["devices"][i])

    def get_device_capability(self, i=0):
        return tuple(_CFG["devices"][i].get("cap", (9, 0)))

    def synchronize(self):
        calls.append("synchronize")
        if self._fault:
            raise RuntimeError(self._fault)

    def _alloc(self, n):
        self._current = n
        self._peak = max(self._peak, n)

    def max_memory_allocated(self):
        return self._peak

    def reset_peak_memory_stats(self):
        calls.append("reset_peak")
        self._peak = self._current


cuda = _Cuda()
_C = _types.SimpleNamespace()
if "driver" in _CFG:
    _C._cuda_getDriverVersion = lambda: _CFG["driver"]
backends = _types.SimpleNamespace(mps=_types.SimpleNamespace(is_available=lambda: False))


def manual_seed(seed):
    return None
'''

FAKE_TORCH_NPU = '''
"""torch_npu stand-in: gives the real torch a torch.npu with 8 Ascend910B3 devices."""
import types as _types

import torch

__version__ = "2.5.1.fake"
version = _types.SimpleNamespace(cann="8.0.RC3.fake")
calls = []


class _Props:
    name = "Ascend910B3"
    total_memory = 64 * 2**30


class _Event:
    def __init__(self, enable_timing=False):
        assert enable_timing

    def record(self):
        calls.append("event.record")

    def elapsed_time(self, other):
        return 4.0


class _Npu:
    Event = _Event

    def __init__(self):
        self._peak = 0

    def is_available(self):
        return True

    def is_initialized(self):
        return True

    def device_count(self):
        return 8

    def get_device_name(self, i=0):
        return "Ascend910B3"

    def get_device_properties(self, i=0):
        return _Props()

    def get_soc_version(self):
        return 223

    def synchronize(self):
        calls.append("synchronize")

    def max_memory_allocated(self):
        return self._peak

    def reset_peak_memory_stats(self):
        self._peak = 0


torch.npu = _Npu()
'''

H100 = {"name": "NVIDIA H100 80GB HBM3", "memory": 85_000_000_000, "mp": 132, "cap": [9, 0]}
MI300X = {
    "name": "AMD Instinct MI300X",
    "memory": 206_000_000_000,
    "mp": 304,
    "gcn": "gfx942:sramecc+:xnack-",
}
MI355X = {
    "name": "AMD Instinct MI355X",
    "memory": 288_000_000_000,
    "mp": 256,
    "gcn": "gfx950:sramecc+:xnack-",
}


def fake_cuda_torch(n: int = 1, **extra: Any) -> dict[str, Any]:
    return {"cuda": "12.4", "hip": None, "devices": [H100] * n, "driver": 12040, **extra}


def fake_hip_torch(device: dict[str, Any] = MI300X, n: int = 1, **extra: Any) -> dict[str, Any]:
    return {"cuda": None, "hip": "6.3.42131-fa1d09cbd", "devices": [device] * n, **extra}


def write_fake_torch(root: Path) -> Path:
    """A folder holding the torch stand-in package; put it first on PYTHONPATH."""
    pkg = root / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(FAKE_TORCH)
    return root


def write_torch_build(root: Path, version_py: str | None, *, version: str, cuda: str) -> Path:
    """A bare ``torch`` stand-in (not torch) for reading a build: imported, it says ``version``
    and a CUDA build ``cuda`` with no device available; ``version_py``, when given, is its
    ``torch/version.py``. A folder to put first on the import path."""
    pkg = root / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(
        f"import types\n__version__ = {version!r}\n"
        f"version = types.SimpleNamespace(cuda={cuda!r}, hip=None, xpu=None)\n"
        "cuda = types.SimpleNamespace(is_available=lambda: False, device_count=lambda: 0)\n"
    )
    if version_py is not None:
        (pkg / "version.py").write_text(version_py)
    return root


def write_fake_torch_npu(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "torch_npu.py").write_text(FAKE_TORCH_NPU)
    return root


def run_py(
    code: str,
    *,
    paths: tuple[Path, ...] = (),
    fake_torch: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter with ``paths`` first on its import path (then the
    worktree); it prints one JSON document last, which is returned."""
    child = dict(os.environ if env is None else env)
    child["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(REPO)])
    if fake_torch is not None:
        child["FAKE_TORCH"] = json.dumps(fake_torch)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=child,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
