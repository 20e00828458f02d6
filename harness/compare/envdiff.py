"""What differs between the environments of a comparison's two sides (pure, over env records).

- :func:`env_differences`: the fields of the environment fingerprint (less the code under
  test) that differ; a saved-run comparison refuses on these unless allowed;
- :func:`machine_differences`: the ones that say the sides ran on different machines (host,
  CI runner, devices), which is what ``same_runner`` means in a comparison of environments,
  where differing packages are the point rather than a reason to refuse;
- :func:`env_diff`: the Python version, the machine-level facts (:func:`system_facts`: FFmpeg
  build, driver, runner image, CPU flags, OS, torch's CUDA/HIP build, devices, runner) and the
  packages added, removed and changed.

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


def _get(env: Mapping[str, Any], *keys: str) -> Any:
    cur: Any = env
    for k in keys:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(k)
    return cur


def _text(value: Any) -> str | None:
    if value is None or value == "" or value == []:
        return None
    if isinstance(value, list | tuple):
        return " ".join(str(v) for v in value) or None
    return " ".join(str(value).split())[:120] or None


# Facts read from one env field each, recorded as None where the machine has none of it.
_FIELDS = {"runner image": "runner_image", "cpu flags": "cpu_flags", "ffmpeg": "ffmpeg"}


def system_facts(env: Mapping[str, Any]) -> dict[str, str | None]:
    """What a run's ``env`` records about the machine beyond Python packages, one string per
    fact (None where it recorded none), in the order a reader scans them."""
    image = env.get("runner_image")
    driver = _get(env, "driver", "output")
    facts: dict[str, str | None] = {
        "ffmpeg": _text(env.get("ffmpeg")),
        "driver": _text(driver.splitlines()[0]) if isinstance(driver, str) and driver else None,
        "runner image": _text(
            f"{image.get('name', '')} {image.get('version', '')}"
            if isinstance(image, Mapping)
            else None
        ),
        "cpu flags": _text(env.get("cpu_flags")),
        "os": _text(
            f"{_get(env, 'platform', 'os') or ''} {_get(env, 'platform', 'release') or ''}"
        ),
        "machine": _text(_get(env, "platform", "machine")),
        "torch cuda": _text(_get(env, "torch", "cuda")),
        "torch hip": _text(_get(env, "torch", "hip")),
        "devices": _text(
            [d.get("name") for d in env.get("devices") or [] if isinstance(d, Mapping)]
        ),
        "runner": _text(env.get("runner_name")),
    }
    fps = env.get("platform_fingerprints")
    for name, fp in sorted(fps.items()) if isinstance(fps, Mapping) else ():
        if isinstance(fp, Mapping) and name != "cpu":  # the CPU's are the fields above
            for key in ("driver", "runtime", "arch"):
                facts[f"{name} {key}"] = _text(fp.get(key))
    return facts


def system_diff(
    base: Mapping[str, Any], head: Mapping[str, Any]
) -> dict[str, tuple[str | None, str | None]]:
    """The :func:`system_facts` that differ, name -> (base, head). A fact a side's report
    has no field for (written before it was recorded) is unknown, not changed, and left out;
    one recorded as absent (no runner image outside CI) differs from one that is there."""
    b, h = system_facts(base), system_facts(head)

    def known(env: Mapping[str, Any], facts: Mapping[str, str | None], name: str) -> bool:
        return facts.get(name) is not None or _FIELDS.get(name, "") in env

    return {
        k: (b[k], h.get(k))
        for k in b
        if b[k] != h.get(k) and known(base, b, k) and known(head, h, k)
    }


def env_diff(base: Mapping[str, Any], head: Mapping[str, Any]) -> EnvDiff:
    """The Python version (when it differs), the machine-level facts and the package versions
    that differ.

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
            system=system_diff(base, head),
        )
    return EnvDiff(
        python=python,
        system=system_diff(base, head),
        added={k: str(v) for k, v in sorted(hp.items()) if k not in bp},
        removed={k: str(v) for k, v in sorted(bp.items()) if k not in hp},
        changed={
            k: (str(bp[k]), str(hp[k])) for k in sorted(bp) if k in hp and str(bp[k]) != str(hp[k])
        },
    )
