"""torch's build read without importing torch (``harness.platforms.torch_build``): a worker of a
stack that does not use torch (``preimport = []``) answers the platform and environment probes
on a CPU build of torch without importing it, with the same answers as when torch is imported;
a build for a device runtime, or a version file it cannot read, still asks the imported torch.
Each check runs in a fresh interpreter, where nothing has imported torch yet."""

from __future__ import annotations

from pathlib import Path

import pytest
from platcases import run_py, write_torch_build

PROBES = """
import json, sys
from pathlib import Path
from harness import platforms
from harness.worker.envinfo import collect_env, env_digest

def probes():
    env = collect_env(Path("targets/tinyav"))
    return {
        "check": {n: list(platforms.check(n)) for n in platforms.known()},
        "fingerprints": sorted(platforms.fingerprints()),
        "torch": env["torch"],
        "devices": env["devices"],
        "digest": env_digest(env),
    }

before = probes()
imported_by_probes = "torch" in sys.modules
import torch
after = probes()
print(json.dumps({"before": before, "after": after, "imported": imported_by_probes}))
"""


def test_on_a_cpu_build_the_probes_answer_without_importing_torch_and_as_torch_would() -> None:
    import torch

    if torch.version.cuda or torch.version.hip or getattr(torch.version, "xpu", None):
        pytest.skip(f"this torch ({torch.__version__}) is built for a device runtime")
    out = run_py(PROBES)
    assert out["imported"] is False
    assert out["before"] == out["after"]
    before = out["before"]
    assert isinstance(before, dict)
    assert before["torch"]["version"] == torch.__version__
    assert before["devices"] == [] and before["fingerprints"] == ["cpu"]
    without_cuda = f"this torch ({torch.__version__}) is built without CUDA"
    assert before["check"]["cuda"] == [False, without_cuda]


BUILD = """
import json, sys
from harness.platforms import torch_build
b = torch_build()
print(json.dumps({"build": None if b is None else [b.version, b.cuda, b.hip, b.xpu],
                  "accelerated": b is not None and b.accelerated,
                  "imported": "torch" in sys.modules}))
"""


def fake_torch(root: Path, version_py: str | None) -> Path:
    """A torch stand-in whose import is visible: imported, it says another version."""
    return write_torch_build(root, version_py, version="9.9.9+imported", cuda="99.9")


def test_a_cuda_build_is_read_from_its_version_file_and_counts_as_accelerated(
    tmp_path: Path,
) -> None:
    path = fake_torch(
        tmp_path,
        "from typing import Optional\n__version__ = '2.13.0+cu128'\ndebug = False\n"
        "cuda: Optional[str] = '12.8'\nhip: Optional[str] = None\nxpu: Optional[str] = None\n",
    )
    out = run_py(BUILD, paths=(path,))
    assert out == {
        "build": ["2.13.0+cu128", "12.8", None, None],
        "accelerated": True,
        "imported": False,
    }


@pytest.mark.parametrize(
    "version_py",
    [
        None,  # no version file
        "__version__ = '2.3.0'\ncuda = None\nhip = None\n",  # older than its xpu field
        "__version__ = '2.13.0'\ncuda = None\nhip = None\nxpu = 3\n",  # not a version string
        "__version__ = (\n",  # unreadable
    ],
)
def test_a_version_file_it_cannot_trust_makes_it_ask_the_imported_torch(
    tmp_path: Path, version_py: str | None
) -> None:
    out = run_py(BUILD, paths=(fake_torch(tmp_path, version_py),))
    assert out == {
        "build": ["9.9.9+imported", "99.9", None, None],
        "accelerated": True,
        "imported": True,
    }
