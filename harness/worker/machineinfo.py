"""What a run's environment says about the machine beyond its Python packages: the CPU's
vector-instruction flags and the CI runner's image (``env.cpu_flags``, ``env.runner_image``).

Both explain why one runner's numbers differ from another's for the same code: a BLAS or
FFmpeg build picks kernels by CPU flags (AVX-512 or AMX on one host, AVX2 on the next), and a
runner image pins the system libraries. Only flags that select kernels are kept, so two hosts
of one CPU family record the same list.

Example::

    cpu_flags()      # ["avx", "avx2", "f16c", "fma", "sse4_2"]
    runner_image()   # {"name": "ubuntu22", "version": "20241201.1.0"} on GitHub Actions
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import harness.cpuinfo

__all__ = ["KERNEL_FLAGS", "cpu_flags", "runner_image"]

# Flags that numeric libraries dispatch on (x86: SSE4.2 up to AVX-512 and AMX; Arm: NEON/ASIMD,
# SVE, the dot-product and matrix extensions). Others (virtualization, power) are left out.
KERNEL_FLAGS = re.compile(
    r"sse4_2|avx|avx2|fma|f16c|avx512\w*|amx\w*|avx_vnni\w*"
    r"|asimd\w*|sve\w*|sme\d?|sme[ifb]\w*|bf16|i8mm|dotprod|fphp"
)
# (image name variable, image version variable) of the CI providers that export them, then the
# harness's own for other runners (a container image tag, an AMI id).
_IMAGE_VARS: tuple[tuple[str, str], ...] = (
    ("ImageOS", "ImageVersion"),  # GitHub-hosted runners
    ("HARNESS_RUNNER_IMAGE", "HARNESS_RUNNER_IMAGE_VERSION"),
)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> list[str] | None:
    """The kernel-selecting flags of the first CPU in ``cpuinfo``, sorted; None where the
    file does not exist or names none (not Linux)."""
    found = harness.cpuinfo.flags(cpuinfo)
    return None if found is None else sorted(f for f in found if KERNEL_FLAGS.fullmatch(f))


def runner_image(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The CI runner's image, ``{name, version}``, from the first provider variables set."""
    env = os.environ if environ is None else environ
    for name_var, version_var in _IMAGE_VARS:
        name = env.get(name_var)
        if name:
            return {"name": name, "version": env.get(version_var, "")}
    return None
