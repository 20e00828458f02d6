"""The environment fingerprint of a run: the ``env`` object of ``report.json``.

:func:`collect_env` records what is needed to tell whether two runs are comparable and to
reproduce one: interpreter, OS, torch and its CUDA/HIP build, devices, driver, the versions of
the numeric and media libraries, host / CI runner, the git state of the code under test, and
``packages`` (every installed distribution, name -> version, which is what tells two
environments apart in ``harness compare --base-env --head-env``).
:func:`env_digest` condenses the fields that make two runs comparable into one short string,
so a comparison can refuse to call a difference between two different runners a regression.

Example::

    env = collect_env(Path("targets/tinyav"))
    env["git"]["dirty"], env_digest(env)

Package versions come from installed metadata (nothing is imported for them); torch and av are
imported only inside the functions that need them, so importing this module stays cheap.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform as _platform
import shutil
import socket
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import platforms
from harness.worker.distributions import packages
from harness.worker.machineinfo import cpu_flags, runner_image

__all__ = ["ENV_KEYS", "OPTIONAL_ENV_KEYS", "collect_env", "env_digest", "git_state", "packages"]

# Top-level keys collect_env always produces; the report schema requires them.
ENV_KEYS: tuple[str, ...] = (
    "python",
    "platform",
    "torch",
    "devices",
    "device_count",
    "driver",
    "triton",
    "numpy",
    "scipy",
    "scikit_image",
    "av",
    "ffmpeg",
    "safetensors",
    "blake3",
    "hostname",
    "runner_name",
    "ci",
    "ci_provider",
    "git",
)
# Keys collect_env also produces that the schema does not require (reports written before them
# stay valid): the fingerprint of every real platform, ``packages`` (every installed
# distribution, name -> version), the CPU's kernel-selecting flags and the CI runner's image.
OPTIONAL_ENV_KEYS: tuple[str, ...] = (
    "platform_fingerprints",
    "packages",
    "cpu_flags",
    "runner_image",
)

# Long enough for a loaded nvidia-smi, short enough that a wedged driver cannot stall a run.
_DRIVER_TIMEOUT_S = 5.0
_GIT_TIMEOUT_S = 30.0
_DRIVER_OUTPUT_MAX = 4000

# (env var holding the runner's name, provider); first one set wins.
_RUNNER_VARS: tuple[tuple[str, str], ...] = (
    ("RUNNER_NAME", "github-actions"),
    ("CI_RUNNER_DESCRIPTION", "gitlab"),
    ("BUILDKITE_AGENT_NAME", "buildkite"),
    ("NODE_NAME", "jenkins"),
    ("AGENT_NAME", "azure-pipelines"),
)
# Variables whose presence marks a CI job even when no runner name is exported.
_CI_VARS: tuple[str, ...] = (
    "CI",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "BUILDKITE",
    "JENKINS_URL",
    "TF_BUILD",
)


def collect_env(code_root: Path | None) -> dict[str, Any]:
    """Collect the environment fingerprint of this process and of the code under test.

    ``code_root`` is the checkout (or a folder inside one) whose git state is recorded as
    ``git: {sha, dirty, tree_hash, reason}``; ``tree_hash`` covers the tracked files under it as
    they are in the working tree, so uncommitted edits change it and untracked files do not.
    Fields that cannot be determined are ``None``; nothing here raises for a missing tool.
    """
    torch_info, devices = _torch_and_devices()
    runner_name, ci, provider = _runner()
    installed = packages()
    return {
        "python": {
            "version": _platform.python_version(),
            "implementation": _platform.python_implementation(),
            "executable": sys.executable,
            "prefix": sys.prefix,
        },
        "platform": {
            "os": _platform.system(),
            "release": _platform.release(),
            "machine": _platform.machine(),
        },
        "torch": torch_info,
        "devices": devices,
        "device_count": len(devices),
        "driver": _driver(),
        "triton": installed.get("triton") or installed.get("pytorch-triton-rocm"),
        "numpy": installed.get("numpy"),
        "scipy": installed.get("scipy"),
        "scikit_image": installed.get("scikit-image"),
        "av": installed.get("av"),
        "ffmpeg": _ffmpeg_version(),
        "safetensors": installed.get("safetensors"),
        "blake3": installed.get("blake3"),
        "hostname": socket.gethostname(),
        "runner_name": runner_name,
        "ci": ci,
        "ci_provider": provider,
        "git": git_state(code_root),
        # Per real platform (the CPU too): driver, runtime, arch, devices, memory, clocks.
        "platform_fingerprints": _platform_fingerprints(),
        "packages": installed,
        # What else tells two runners apart (harness.worker.machineinfo).
        "cpu_flags": cpu_flags(),
        "runner_image": runner_image(),
    }


def _platform_fingerprints() -> dict[str, Any]:
    try:
        return platforms.fingerprints()
    except Exception as exc:  # never lose the record for a broken plugin or driver
        return {"error": _oneline(exc)}


def _fingerprint_basis(fps: Any) -> Any:
    """The comparable part of the platform fingerprints (free-text reasons left out)."""
    if not isinstance(fps, Mapping):
        return None
    return {
        name: {k: v for k, v in fp.items() if k not in ("reason",)}
        if isinstance(fp, Mapping)
        else fp
        for name, fp in sorted(fps.items())
    }


def env_basis(env: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that make two runs comparable (what :func:`env_digest` hashes).

    Covers the Python version, torch version and its CUDA/HIP build, device names, the numeric
    and media library versions, the host / runner name, and the fingerprint of each real
    platform (driver and runtime versions, architecture, device names, memory, multiprocessor
    count and clocks where readable). Paths, git state and driver text
    are left out: they differ between base and head, or between two jobs on one runner, without
    making latencies incomparable. Missing keys (an older report) hash as ``None``.
    """

    def get(*keys: str) -> Any:
        cur: Any = env
        for k in keys:
            if not isinstance(cur, Mapping):
                return None
            cur = cur.get(k)
        return cur

    devices = env.get("devices") or []
    return {
        "python": get("python", "version"),
        "torch": get("torch", "version"),
        "cuda": get("torch", "cuda"),
        "hip": get("torch", "hip"),
        "devices": [d.get("name") if isinstance(d, Mapping) else d for d in devices],
        "numpy": env.get("numpy"),
        "scipy": env.get("scipy"),
        "scikit_image": env.get("scikit_image"),
        "av": env.get("av"),
        "ffmpeg": env.get("ffmpeg"),
        "hostname": env.get("hostname"),
        "runner_name": env.get("runner_name"),
        "platform_fingerprints": _fingerprint_basis(env.get("platform_fingerprints")),
    }


def env_digest(env: Mapping[str, Any]) -> str:
    """A short stable hash of :func:`env_basis`: equal digests, comparable environments."""
    basis = env_basis(env)
    text = json.dumps(basis, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _ffmpeg_version() -> str | None:
    try:
        import av
    except Exception:  # av missing or its shared libraries broken: record, don't fail
        return None
    info = getattr(av, "ffmpeg_version_info", None)
    if isinstance(info, str) and info:
        return info
    libs = getattr(av, "library_versions", None)
    if isinstance(libs, Mapping) and "libavcodec" in libs:
        # Older av exposes only the per-library versions; libavcodec identifies the build.
        return "libavcodec " + ".".join(str(p) for p in libs["libavcodec"])
    return None


# --- torch and devices ---------------------------------------------------------------------


def _torch_and_devices() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """torch's version and build, and the devices it sees. A build for no device runtime (a
    CPU build) sees none: where this process has not imported torch (a runner profile's
    ``preimport = []``), its build is read without importing it, which would cost a worker
    of a stack that does not use torch about a second of CPU for the same record."""
    if "torch" not in sys.modules:
        build = platforms.torch_build()
        if build is not None and not build.accelerated:
            return {"version": build.version, "cuda": None, "hip": None, "reason": None}, []
    try:
        import torch
    except Exception as exc:  # not installed, or a broken build: still a valid env record
        return {"version": None, "cuda": None, "hip": None, "reason": _oneline(exc)}, []
    info: dict[str, Any] = {
        "version": str(torch.__version__),
        "cuda": getattr(torch.version, "cuda", None),
        "hip": getattr(torch.version, "hip", None),
        "reason": None,
    }
    devices: list[dict[str, Any]] = []
    try:
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                major, minor = torch.cuda.get_device_capability(i)
                # ROCm builds report a gfx name; CUDA builds a compute capability.
                arch = getattr(props, "gcnArchName", None) or f"sm_{major}{minor}"
                devices.append(
                    {
                        "index": i,
                        "name": str(props.name),
                        "arch": str(arch),
                        "capability": f"{major}.{minor}",
                        "memory_bytes": int(props.total_memory),
                    }
                )
    except Exception as exc:  # a driver/runtime mismatch must not lose the whole record
        info["reason"] = f"device query failed: {_oneline(exc)}"
    return info, devices


def _driver() -> dict[str, Any] | None:
    queries = (
        ("nvidia-smi", ["--query-gpu=name,driver_version", "--format=csv,noheader"]),
        ("rocm-smi", ["--showdriverversion"]),
    )
    for tool, args in queries:
        exe = shutil.which(tool)
        if exe is None:
            continue
        try:
            proc = subprocess.run(
                [exe, *args],
                capture_output=True,
                text=True,
                timeout=_DRIVER_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"tool": tool, "output": None, "reason": f"timed out after {_DRIVER_TIMEOUT_S}s"}
        except OSError as exc:
            return {"tool": tool, "output": None, "reason": _oneline(exc)}
        out = (proc.stdout or proc.stderr).strip()[:_DRIVER_OUTPUT_MAX]
        reason = None if proc.returncode == 0 else f"exit status {proc.returncode}"
        return {"tool": tool, "output": out, "reason": reason}
    return None


# --- host and CI ---------------------------------------------------------------------------


def _runner() -> tuple[str, bool, str | None]:
    """(runner name, whether this is a CI job, CI provider or None)."""
    env = os.environ
    ci = any(env.get(v, "").lower() not in ("", "0", "false") for v in _CI_VARS)
    for var, provider in _RUNNER_VARS:
        name = env.get(var)
        if name:
            return name, True, provider
    return env.get("HOSTNAME") or socket.gethostname(), ci, None


# --- git -----------------------------------------------------------------------------------


def git_state(code_root: Path | None) -> dict[str, Any]:
    """``{sha, dirty, tree_hash, reason}`` of the checkout at ``code_root``.

    ``sha`` is ``HEAD`` (None before the first commit), ``dirty`` whether a tracked file under
    ``code_root`` differs from ``HEAD``, ``tree_hash`` a ``blake3:`` hash over (path, content)
    of every tracked file under ``code_root`` as it is on disk. When ``code_root`` is not a git
    checkout every field is None and ``reason`` says why.
    """
    none: dict[str, Any] = {"sha": None, "dirty": None, "tree_hash": None}
    if code_root is None:
        return {**none, "reason": "no code root given"}
    root = Path(code_root)
    if not root.is_dir():
        return {**none, "reason": f"code root {root} is not a directory"}
    if shutil.which("git") is None:
        return {**none, "reason": "git executable not found"}
    probe = _git(root, "rev-parse", "--is-inside-work-tree")
    if probe.returncode != 0 or probe.stdout.strip() != b"true":
        why = probe.stderr.decode(errors="replace").strip() or "not inside a work tree"
        return {**none, "reason": f"{root} is not a git checkout: {_oneline(why)}"}

    reasons: list[str] = []
    head = _git(root, "rev-parse", "--verify", "-q", "HEAD")
    sha: str | None = head.stdout.decode().strip() if head.returncode == 0 else None
    if sha is None:
        reasons.append("no commit yet")

    # "." limits status and ls-files to code_root, so a subfolder is fingerprinted on its own.
    status = _git(root, "status", "--porcelain", "--untracked-files=no", "--", ".")
    dirty: bool | None = None
    if status.returncode == 0:
        dirty = bool(status.stdout.strip())
    else:
        reasons.append("git status failed: " + _oneline(status.stderr.decode(errors="replace")))

    listing = _git(root, "ls-files", "-z", "--", ".")
    tree_hash: str | None = None
    if listing.returncode == 0:
        paths = [p for p in listing.stdout.split(b"\0") if p]
        tree_hash = _tree_hash(root, paths)
    else:
        reasons.append("git ls-files failed: " + _oneline(listing.stderr.decode(errors="replace")))
    return {
        "sha": sha,
        "dirty": dirty,
        "tree_hash": tree_hash,
        "reason": "; ".join(reasons) or None,
    }


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    # A GIT_DIR etc. inherited from a hook or a wrapper would point git at another repository.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["LC_ALL"] = "C"
    try:
        return subprocess.run(
            # --no-optional-locks: a read-only query must not take index.lock from a concurrent git.
            ["git", "--no-optional-locks", *args],
            cwd=root,
            capture_output=True,
            env=env,
            timeout=_GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(["git", *args], 1, b"", str(exc).encode())


def _tree_hash(root: Path, paths: list[bytes]) -> str:
    """blake3 over length-framed (path, kind, content digest) records, in git's path order."""
    import blake3

    outer = blake3.blake3()
    for rel in paths:
        full = os.path.join(os.fsencode(root), rel)
        try:
            st = os.lstat(full)
        except FileNotFoundError:
            kind, digest = b"missing", b""
        else:
            if stat.S_ISLNK(st.st_mode):
                kind, digest = b"link", blake3.blake3(os.readlink(full)).digest()
            elif stat.S_ISDIR(st.st_mode):
                # A submodule (gitlink): its own sha is what git tracks; record presence only.
                kind, digest = b"dir", b""
            else:
                # The executable bit is tracked by git, so a chmod is a change too.
                kind = b"exec" if st.st_mode & stat.S_IXUSR else b"file"
                digest = _file_digest(full)
        for part in (rel, kind, digest):
            outer.update(len(part).to_bytes(8, "little"))
            outer.update(part)
    return "blake3:" + outer.hexdigest()


def _file_digest(path: bytes) -> bytes:
    import blake3

    h = blake3.blake3()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.digest()


def _oneline(x: object) -> str:
    text = " ".join(str(x).split())
    return text[:300]
