"""One revision in two Python environments (``harness compare --base-env PATH --head-env PATH``).

"Did the torch / diffusers upgrade change our outputs?" is a comparison whose two sides run
the same code (the working tree, or one ``--rev`` checked out once) under two interpreters,
each a Python executable or a virtual environment folder (``<venv>/bin/python``). Everything
else is the revision comparison's engine (:func:`harness.compare.run.run_live`): one runner,
A B B A rounds, sequential looks and confirmation, the same latency, quality, failure and
divergence verdicts and the same ``comparison.json``, which adds ``env_diff`` (the Python and
package versions that differ) and each side's ``env`` and ``python``. ``same_runner`` is about
the machine (host, CI runner, devices): packages that differ are the point of this comparison,
not a reason to refuse it, so no case is ``not_comparable`` for them.

Example::

    comparison = compare_environments(".venv-torch212", ".venv-torch213", request=request)
    comparison.env_diff.changed   # {"torch": ("2.12.0", "2.13.0")}
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from harness.compare.envdiff import env_differences, machine_differences
from harness.compare.run import CompareRequest, finish_comparison, run_live, utc_now
from harness.compare.sides import side_spec
from harness.compare.worktree import Checkouts, repo_root, resolve
from harness.errors import UsageError
from harness.execution.run import check_run_id, new_run_id
from harness.model import Comparison, Side

__all__ = ["Interpreter", "compare_environments", "find_interpreter", "probe_interpreter"]

# Long enough for a cold interpreter on a loaded runner to import the harness's worker.
PROBE_TIMEOUT_S = 120.0

# Run by each interpreter before any worker starts: what it is, and whether it can import
# the harness's worker (which is what every attempt of that side will run).
_PROBE = """\
import json, platform, sys
info = {"executable": sys.executable, "version": platform.python_version(), "prefix": sys.prefix}
try:
    import harness, harness.worker.main
    info["harness"] = harness.__file__
except BaseException as exc:
    info["harness_error"] = type(exc).__name__ + ": " + " ".join(str(exc).split())[:300]
print(json.dumps(info))
"""


@dataclass(frozen=True)
class Interpreter:
    """One side's Python: as given, what runs, its version and the harness it imports."""

    given: str
    python: str  # absolute, symlinks kept: a venv's bin/python is what activates that venv
    version: str
    harness: str
    prefix: str  # sys.prefix: the environment itself (two venvs over one Python differ here)


def find_interpreter(path: str, flag: str) -> str:
    """The interpreter ``path`` names: itself, ``<path>/bin/python`` for a virtual
    environment folder (``Scripts/python.exe`` on Windows), or a command on ``PATH``."""
    p = Path(path).expanduser()
    if p.is_dir():
        for rel in ("bin/python", "bin/python3", "Scripts/python.exe"):
            if (p / rel).is_file():
                return str((p / rel).absolute())
        raise UsageError(
            f"{flag} {path}: a folder without bin/python, so not a virtual environment "
            "(expected a Python interpreter or a virtual environment folder)"
        )
    if p.is_file():
        return str(p.absolute())
    if os.sep not in path and (found := shutil.which(path)):
        return found
    raise UsageError(
        f"{flag} {path}: no such file or folder "
        "(expected a Python interpreter or a virtual environment folder)"
    )


def probe_interpreter(path: str, flag: str) -> Interpreter:
    """Run the interpreter ``path`` names once: a usage error naming ``path`` when it does not
    run, is not Python, or cannot import the harness (which each of its workers must)."""
    python = find_interpreter(path, flag)
    try:
        proc = subprocess.run(
            [python, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(
            f"{flag} {path}: {python} did not answer within {PROBE_TIMEOUT_S:g} s"
        ) from None
    except OSError as exc:
        raise UsageError(f"{flag} {path}: {python} does not run: {exc}") from None
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1])
        assert isinstance(info, dict) and "version" in info
    except (IndexError, ValueError, AssertionError):
        tail = " ".join((proc.stderr or proc.stdout).split())[-300:]
        raise UsageError(
            f"{flag} {path}: {python} does not run as a Python 3 interpreter "
            f"(exit status {proc.returncode}: {tail or 'no output'})"
        ) from None
    if "harness_error" in info:
        raise UsageError(
            f"{flag} {path}: {python} (Python {info['version']}) cannot import the harness "
            f"({info['harness_error']}); install it into that environment, create the "
            "environment with --system-site-packages over one that has it, or put the "
            "harness's folder on PYTHONPATH"
        )
    return Interpreter(
        path,
        python,
        str(info["version"]),
        str(info.get("harness", "")),
        str(info.get("prefix", "")),
    )


def compare_environments(
    base_env: str, head_env: str, *, request: CompareRequest, rev: str | None = None
) -> Comparison:
    """Run one revision of ``request.repo`` (``rev``, or the working tree as it is) under the
    ``base_env`` and ``head_env`` interpreters, interleaved here, and judge every case."""
    say = request.progress or (lambda _l: None)
    started = utc_now()
    comparison_id = check_run_id(request.comparison_id) if request.comparison_id else new_run_id()
    interps: dict[Side, Interpreter] = {
        "base": probe_interpreter(base_env, "--base-env"),
        "head": probe_interpreter(head_env, "--head-env"),
    }
    if interps["base"].prefix == interps["head"].prefix:
        raise UsageError(
            f"--base-env {base_env} and --head-env {head_env} are one environment "
            f"({interps['base'].prefix}): that compares it with itself; to measure this "
            "runner's noise use --aa REV"
        )
    for side, it in interps.items():
        say(f"{side}: {it.python} (Python {it.version}), harness from {it.harness}")
    if interps["base"].harness != interps["head"].harness:
        say("note: the two environments import the harness from different places")
    with ExitStack() as stack:
        sha: str | None = None
        if rev is None:
            try:
                checkout = repo_root(request.repo)
            except UsageError:  # a plain folder: its files as they are, no git state
                checkout = request.repo.resolve()
            where = f"the working tree {checkout}"
        else:
            co = stack.enter_context(Checkouts(request.repo))
            sha = resolve(co.repo, rev)
            checkout = co.add(sha, "code")
            where = f"revision {rev} of {co.repo}"
        sides = {
            side: side_spec(
                side, checkout, request.code_roots, python=it.python, rev=sha, where=where
            )
            for side, it in interps.items()
        }
        live = run_live(
            request,
            comparison_id,
            sides,
            cases_root=checkout if request.cases_from == "head" else None,
            what=f"{rev or 'the working tree'} in {base_env} (base) vs {head_env} (head)",
            own_envs=True,
        )
    base, head = live.reports["base"].env, live.reports["head"].env
    return finish_comparison(
        comparison_id,
        live,
        request,
        {"base": rev, "head": rev},
        started_at=started,
        same_runner=not machine_differences(base, head),
        differences=env_differences(base, head),
        allowed=True,
        envs={"base": base_env, "head": head_env},
    )
