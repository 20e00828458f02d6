"""``--shard auto``: which shard this machine runs, read from the engine that started it.

Each engine numbers its parallel jobs its own way; this module turns them into the harness's
1-based ``(index, count)`` and says where they came from (recorded in the shard's report):

====================  ==========================================  ===========================
engine                variables                                   numbering
====================  ==========================================  ===========================
harness / GitHub      ``HARNESS_SHARD_INDEX``, ``HARNESS_SHARD_   1-based; GitHub Actions has
Actions               COUNT``                                     no shard variable, so the
                                                                  workflow sets them from its
                                                                  matrix (``${{ matrix.shard
                                                                  }}``, ``${{ strategy.job-
                                                                  total }}``)
Buildkite             ``BUILDKITE_PARALLEL_JOB``,                 0-based (``parallelism``)
                      ``BUILDKITE_PARALLEL_JOB_COUNT``
GitLab CI             ``CI_NODE_INDEX``, ``CI_NODE_TOTAL``        1-based (``parallel``)
Kubernetes Indexed    ``JOB_COMPLETION_INDEX``, and the count     0-based
Job                   the manifest passes as
                      ``HARNESS_SHARD_COUNT``
Slurm job array       ``SLURM_ARRAY_TASK_ID`` - ``SLURM_ARRAY_    contiguous, step 1
                      TASK_MIN``, ``SLURM_ARRAY_TASK_COUNT``
====================  ==========================================  ===========================

The harness's own pair wins (it is what a user sets on purpose); among the engines, two that
disagree are refused rather than one picked silently. None found, a variable of a pair
missing, a value that is not an integer, or an index outside the count is a usage error that
names every variable looked for.

Example::

    detect_shard({"BUILDKITE_PARALLEL_JOB": "1", "BUILDKITE_PARALLEL_JOB_COUNT": "4"})
    # DetectedShard(index=2, count=4,
    #               source="buildkite: BUILDKITE_PARALLEL_JOB=1, BUILDKITE_PARALLEL_JOB_COUNT=4")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.cases.shard import parse_shard_spec
from harness.errors import UsageError

__all__ = ["ENGINES", "DetectedShard", "detect_shard", "looked_for", "resolve_shard"]


@dataclass(frozen=True)
class DetectedShard:
    """1-based ``index`` of ``count``, and ``source``: the engine and the variables read."""

    index: int
    count: int
    source: str


@dataclass(frozen=True)
class _Engine:
    name: str
    trigger: str  # the variable whose presence says this engine numbered the job
    variables: tuple[str, ...]  # every variable read, in the order shown in messages
    read: Callable[[Mapping[str, str], str], tuple[int, int]]  # -> (0-based index, count)


def _int(environ: Mapping[str, str], name: str, engine: str) -> int:
    value = environ.get(name)
    if value is None or not value.strip():
        raise UsageError(f"--shard auto: {engine} sets some of its variables but not {name}")
    try:
        return int(value.strip())
    except ValueError:
        raise UsageError(
            f"--shard auto: {name}={value!r} ({engine}): expected an integer"
        ) from None


def _zero_based(index: str, count: str) -> Callable[[Mapping[str, str], str], tuple[int, int]]:
    return lambda env, engine: (_int(env, index, engine), _int(env, count, engine))


def _one_based(index: str, count: str) -> Callable[[Mapping[str, str], str], tuple[int, int]]:
    return lambda env, engine: (_int(env, index, engine) - 1, _int(env, count, engine))


def _slurm(env: Mapping[str, str], engine: str) -> tuple[int, int]:
    task = _int(env, "SLURM_ARRAY_TASK_ID", engine)
    low = _int(env, "SLURM_ARRAY_TASK_MIN", engine)
    count = _int(env, "SLURM_ARRAY_TASK_COUNT", engine)
    high = (
        _int(env, "SLURM_ARRAY_TASK_MAX", engine)
        if "SLURM_ARRAY_TASK_MAX" in env
        else low + count - 1
    )
    step = env.get("SLURM_ARRAY_TASK_STEP", "1").strip() or "1"
    if step != "1" or high - low + 1 != count:
        raise UsageError(
            f"--shard auto: the Slurm array {low}-{high} (step {step}) has {count} task(s) that "
            "are not contiguous; expected an array such as --array=0-3 (or 1-4), one task per "
            "shard"
        )
    return task - low, count


ENGINES: tuple[_Engine, ...] = (
    _Engine(
        "harness",
        "HARNESS_SHARD_INDEX",
        ("HARNESS_SHARD_INDEX", "HARNESS_SHARD_COUNT"),
        _one_based("HARNESS_SHARD_INDEX", "HARNESS_SHARD_COUNT"),
    ),
    _Engine(
        "buildkite",
        "BUILDKITE_PARALLEL_JOB",
        ("BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT"),
        _zero_based("BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT"),
    ),
    _Engine(
        "gitlab",
        "CI_NODE_INDEX",
        ("CI_NODE_INDEX", "CI_NODE_TOTAL"),
        _one_based("CI_NODE_INDEX", "CI_NODE_TOTAL"),
    ),
    _Engine(
        "kubernetes",
        "JOB_COMPLETION_INDEX",
        ("JOB_COMPLETION_INDEX", "HARNESS_SHARD_COUNT"),
        _zero_based("JOB_COMPLETION_INDEX", "HARNESS_SHARD_COUNT"),
    ),
    _Engine(
        "slurm",
        "SLURM_ARRAY_TASK_ID",
        ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT"),
        _slurm,
    ),
)


def looked_for() -> str:
    """Every variable ``--shard auto`` reads, by engine, for messages and ``--help``."""
    return "; ".join(f"{e.name}: {', '.join(e.variables)}" for e in ENGINES)


def _label(engine: _Engine, environ: Mapping[str, str]) -> str:
    name = engine.name
    if name == "harness" and environ.get("GITHUB_ACTIONS") == "true":
        name = "github-actions"  # the workflow sets the pair from its matrix
    shown = [v for v in engine.variables if v in environ]
    shown += [v for v in ("SLURM_ARRAY_TASK_MAX",) if engine.name == "slurm" and v in environ]
    return f"{name}: " + ", ".join(f"{v}={environ[v].strip()}" for v in shown)


def _read(engine: _Engine, environ: Mapping[str, str]) -> DetectedShard:
    zero_index, count = engine.read(environ, engine.name)
    source = _label(engine, environ)
    if count < 1:
        raise UsageError(f"--shard auto: {source}: the count must be at least 1")
    if not 0 <= zero_index < count:
        raise UsageError(
            f"--shard auto: {source}: the index is outside the count (shard "
            f"{zero_index + 1} of {count}, 1-based); the engine's variables are inconsistent"
        )
    return DetectedShard(zero_index + 1, count, source)


def detect_shard(environ: Mapping[str, str]) -> DetectedShard:
    """This machine's shard from ``environ`` (see the module's table); a usage error when no
    engine numbered it, or its numbers do not fit together."""
    present = [e for e in ENGINES if environ.get(e.trigger, "").strip()]
    if not present:
        orphan = [v for e in ENGINES for v in e.variables if v != e.trigger and environ.get(v, "")]
        hint = f" (set without its index: {', '.join(dict.fromkeys(orphan))})" if orphan else ""
        raise UsageError(
            "--shard auto: no engine's shard variables are set" + hint + "; looked for "
            f"{looked_for()}. Give --shard I/N, or set HARNESS_SHARD_INDEX (1-based) and "
            "HARNESS_SHARD_COUNT"
        )
    if present[0].name == "harness":
        return _read(present[0], environ)
    found = [_read(e, environ) for e in present]
    if len({(f.index, f.count) for f in found}) > 1:
        raise UsageError(
            "--shard auto: engines disagree about this shard: "
            + "; ".join(f"{f.source} (shard {f.index}/{f.count})" for f in found)
            + "; set HARNESS_SHARD_INDEX and HARNESS_SHARD_COUNT to say which"
        )
    return found[0]


def resolve_shard(spec: str, environ: Mapping[str, str], option: str = "--shard") -> DetectedShard:
    """``--shard I/N`` as given (source None in the report: ``"given"``), or ``auto``: read
    from the engine's variables in ``environ``."""
    if spec.strip() == "auto":
        try:
            return detect_shard(environ)
        except UsageError as exc:
            raise UsageError(str(exc).replace("--shard auto", f"{option} auto", 1)) from None
    index, count = parse_shard_spec(spec, option)
    return DetectedShard(index, count, "given")
