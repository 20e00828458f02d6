"""What differs between the environments of a comparison's two sides (pure, over env records).

- :func:`env_differences`: the fields of the environment fingerprint (less the code under
  test) that differ; a saved-run comparison refuses on these unless allowed;
- :func:`machine_differences`: the ones that say the sides ran on different machines (host,
  CI runner, devices), which is what ``same_runner`` means in a comparison of environments,
  where differing packages are the point rather than a reason to refuse;
- :func:`env_diff`: the Python version and the packages added, removed and changed.

Example::

    env_diff(base_report.env, head_report.env).changed   # {"torch": ("2.12.0", "2.13.0")}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.model import EnvDiff
from harness.worker.envinfo import env_basis

# Fields of env_basis that belong to the machine rather than to the Python environment.
MACHINE_FIELDS: tuple[str, ...] = ("devices", "hostname", "runner_name")


def env_differences(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    """The fields of the environment fingerprint (less the code under test) that differ."""
    b, h = env_basis(base), env_basis(head)
    return sorted(k for k in b if b[k] != h.get(k))


def machine_differences(base: Mapping[str, Any], head: Mapping[str, Any]) -> list[str]:
    """The fingerprint fields that differ because the sides ran on different machines."""
    return [k for k in env_differences(base, head) if k in MACHINE_FIELDS]


def _python_version(env: Mapping[str, Any]) -> str | None:
    py = env.get("python")
    version = py.get("version") if isinstance(py, Mapping) else None
    return str(version) if version is not None else None


def env_diff(base: Mapping[str, Any], head: Mapping[str, Any]) -> EnvDiff:
    """The Python version (when it differs) and the package versions that differ.

    A side whose record has no ``packages`` (a report written before they were recorded, or a
    worker that never started) gives a diff with a ``reason`` and no package entries.
    """
    bpy, hpy = _python_version(base), _python_version(head)
    python = (bpy, hpy) if bpy != hpy else None
    bp, hp = base.get("packages"), head.get("packages")
    if not isinstance(bp, Mapping) or not isinstance(hp, Mapping):
        sides = [s for s, p in (("base", bp), ("head", hp)) if not isinstance(p, Mapping)]
        return EnvDiff(
            python=python,
            reason=f"{' and '.join(sides)} recorded no package versions "
            "(a report written before they were recorded, or no worker started)",
        )
    return EnvDiff(
        python=python,
        added={k: str(v) for k, v in sorted(hp.items()) if k not in bp},
        removed={k: str(v) for k, v in sorted(bp.items()) if k not in hp},
        changed={
            k: (str(bp[k]), str(hp[k])) for k in sorted(bp) if k in hp and str(bp[k]) != str(hp[k])
        },
    )
