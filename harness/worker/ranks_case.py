"""One attempt of a multi-rank case (``ranks`` > 1), inside the worker: one process per rank.

Each rank is ``python -m harness.worker.rank_main`` (:mod:`harness.worker.rank_main`) with
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` (127.0.0.1) and a free
``MASTER_PORT``; where the platform pins devices and the worker owns several, rank R sees the
R-th of them (round-robin when it owns fewer). Rank 0 leads a process group of its own and
every other rank joins it, so one ``killpg`` ends them all and :func:`diagnose` sees every
rank. Each rank's output goes to ``<attempt output>/ranks/rank<R>.log``, its record to
``rank<R>.json`` there.

Rank 0's stages, fingerprints, notes, inputs and outputs become the attempt's, as if the
target had run in the worker (so its outputs are checked); the other ranks' fingerprints are
the attempt's too under ``rank<R>.``, their stage seconds the notes ``rank<R>.<stage>``, and
every rank's stage seconds are in ``Attempt.ranks`` (the report's slowest rank per stage).

A rank that does not end within the limit is a ``timeout``: every rank's stacks are captured
(:func:`harness.worker.hang_diagnosis.diagnose`) before the group is killed. A rank that failed
while others run on (waiting for it in a collective, say) gets them killed after
``FAILED_GRACE_S``. Whatever happens, the group is killed and reaped before returning.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness import platforms, probe
from harness.model import Case, CheckResult
from harness.model.provenance import TARGET_FILE
from harness.model.ranks import RANK_PREFIX, Consistency, RanksRecord, check_consistency
from harness.platforms.devices import PINNED_ENV
from harness.worker.case_errors import RanksError
from harness.worker.hang_diagnosis import DEADLINE_S, diagnose
from harness.worker.server_case import diagnosis_summary
from harness.worker.server_process import (
    _harness_root,
    _reap,
    exit_text,
    free_port,
    group_members,
    log_tail,
)

FAILED_GRACE_S = 5.0
STOP_GRACE_S = 1.0
_HOST = "127.0.0.1"


def ranks_limits(timeout_s: float) -> tuple[float, float]:
    """How long the ranks may run and how long their hang diagnosis may take, so that a hang
    is this worker's report (with every rank's stacks) before the manager's deadline: the
    diagnosis and the kill get up to ``DEADLINE_S`` + ``STOP_GRACE_S`` + 3 s, at most half of
    ``timeout_s``."""
    reserve = min(DEADLINE_S + STOP_GRACE_S + 3.0, timeout_s * 0.5)
    return timeout_s - reserve, max(0.5, min(DEADLINE_S, reserve - STOP_GRACE_S - 0.5))


def consistency_check(verdict: Consistency) -> CheckResult:
    """The always-on ``rank_consistency`` check of a case that declares ``replicated``
    fingerprints: passed, failed (naming each disagreeing fingerprint), or not run when no
    rank recorded one (which a ``fail`` check makes an error)."""
    return CheckResult(
        name="rank_consistency",
        metric="rank_consistency",
        value=len(verdict.mismatches) if verdict.passed is not None else None,
        op="==",
        threshold=0,
        policy="fail",
        passed=verdict.passed,
        reason=verdict.reason,
        settings={"compared": list(verdict.compared)},
    )


def rank_devices(platform: str, rank: int, env: Mapping[str, str]) -> dict[str, str]:
    """The environment pinning ``rank`` to its device: the R-th of the worker's pinned devices
    (round-robin), through the platform's visibility variable; empty where nothing is pinned."""
    try:
        var = platforms.get(platform).visible_devices_env
    except KeyError:
        return {}
    owned = [d.strip() for d in env.get(var or "", "").split(",") if d.strip()]
    if var is None or not owned:
        return {}
    mine = owned[rank % len(owned)]
    return {var: mine, PINNED_ENV: mine}


def rank_env(rank: int, world: int, port: int, platform: str) -> dict[str, str]:
    """One rank's environment: the worker's (with the harness on ``PYTHONPATH``), the standard
    ``torch.distributed`` variables and its device pinning."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("HARNESS_PERF_LOG", "HARNESS_RESULT_FILE")
    }
    paths = [env.get("PYTHONPATH", ""), _harness_root() or ""]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR=_HOST,
        MASTER_PORT=str(port),
    )
    env.update(rank_devices(platform, rank, os.environ))
    return env


class Ranks:
    """The started ranks: rank 0 leads the process group, the others join it."""

    def __init__(self, folder: Path, jobs: list[dict[str, Any]], envs: list[dict[str, str]]):
        self.folder = folder
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs = [folder / f"rank{r}.log" for r in range(len(jobs))]
        self.started = time.monotonic()
        try:
            for rank, (job, env) in enumerate(zip(jobs, envs, strict=True)):
                self._start(rank, job, env)
        except BaseException:
            if self.procs:  # never leave a started rank behind
                self.kill()
            raise

    def _start(self, rank: int, job: dict[str, Any], env: dict[str, str]) -> None:
        job_file = self.folder / f"rank{rank}.job.json"
        job_file.write_text(json.dumps(job), encoding="utf-8")
        # -P: the code under test comes from PYTHONPATH (the side's code roots first), never
        # from the working folder that ``-m`` would put first (the working tree, in a
        # comparison run from it): as the worker itself is started (code provenance).
        argv = [sys.executable, "-P", "-m", "harness.worker.rank_main", str(job_file)]
        with self.logs[rank].open("wb") as fh:
            self.procs.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    env=env,
                    # rank 0 leads a new group (in the worker's session), the rest join it
                    process_group=0 if rank == 0 else self.pgid,
                )
            )

    @property
    def pgid(self) -> int:
        return self.procs[0].pid

    def wait(self, limit_s: float) -> tuple[str, int | None]:
        """Wait until every rank has ended (``("done", None)``), the limit passes
        (``("timeout", None)``) or a rank failed while others ran on for ``FAILED_GRACE_S``
        (``("failed", rank)``)."""
        failed_at: float | None = None
        while True:
            codes = [p.poll() for p in self.procs]
            if all(c is not None for c in codes):
                return "done", None
            now = time.monotonic()
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad and failed_at is None:
                failed_at = now
            if failed_at is not None and now - failed_at > FAILED_GRACE_S:
                return "failed", bad[0]
            if now - self.started > limit_s:
                return "timeout", None
            time.sleep(0.02)

    def exits(self) -> dict[str, str]:
        """rank -> ``exit 0``, ``killed by signal SIGKILL`` or ``running at the kill``."""
        return {
            str(r): "running at the kill"
            if p.poll() is None
            else exit_text(p.returncode).replace("with exit code", "exit")
            for r, p in enumerate(self.procs)
        }

    def kill(self) -> dict[int, str]:
        """SIGTERM to the group, ``STOP_GRACE_S``, then SIGKILL; returns the processes other
        than the ranks that were in the group (a rank's leftover children), killed too."""
        pgid = self.pgid
        ranks = {p.pid for p in self.procs}
        # listed before the SIGTERM, which a leftover child may well obey
        left = {pid: cmd for pid, cmd in group_members(pgid).items() if pid not in ranks}
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline:
            for p in self.procs:
                p.poll()
            if all(p.returncode is not None for p in self.procs) and not group_members(pgid):
                break
            _reap(list(group_members(pgid, zombies=True)), block=False)
            time.sleep(0.02)
        left.update((pid, cmd) for pid, cmd in group_members(pgid).items() if pid not in ranks)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        for p in self.procs:
            p.wait()
        _reap(list(left), block=True)
        _reap(list(group_members(pgid, zombies=True)), block=False)
        return left


def _read(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _absorb_rank0(result: Mapping[str, Any]) -> None:
    """Rank 0's record into the attempt, as if the target had run in the worker."""
    probe._absorb(result.get("stages", {}), result.get("stage_cpu", {}), result["fingerprints"])
    rec = probe._current
    if rec is None:
        return
    rec.recorded_inputs.update(result.get("inputs", {}))
    rec.outputs.update(result.get("outputs", {}))
    rec.notes.update(result.get("notes", {}))


def _absorb_other(rank: int, result: Mapping[str, Any]) -> None:
    prefix = RANK_PREFIX.format(rank=rank)
    probe._absorb({}, {}, result.get("fingerprints", {}), prefix)
    for stage, seconds in result.get("stages", {}).items():
        probe.note(f"{prefix}{stage}", seconds)
    file = result.get("notes", {}).get(TARGET_FILE)
    if file is not None:  # which file this rank ran (code provenance checks every rank's)
        probe.note(f"{prefix}{TARGET_FILE}", file)


def _outcome(results: Mapping[int, Mapping[str, Any] | None], ranks: Ranks) -> RanksError | None:
    """The attempt's error from how the ranks ended: that of the rank that failed first (a
    rank that ended without a result, else by the time its target raised: the others most
    likely failed because it did, a peer gone from a collective), ties to the lowest rank;
    None when every rank passed."""

    def when(rank: int) -> float:
        res = results[rank]
        if res is None:
            return -math.inf
        return float((res.get("error") or {}).get("failed_at", math.inf))

    for rank in sorted(results, key=lambda r: (when(r), r)):
        res = results[rank]
        proc = ranks.procs[rank]
        if res is None:
            return RanksError(
                "error",
                "RankExited",
                f"rank {rank} exited {exit_text(proc.returncode)} without a result; last 50 "
                f"lines of its log {ranks.logs[rank]}:\n{log_tail(ranks.logs[rank], 50)}",
            )
        if res.get("status") != "passed":
            err = res.get("error") or {}
            tb = err.get("traceback", "")
            return RanksError(
                str(res.get("status", "error")),
                str(err.get("type", "Error")),
                f"rank {rank}: {err.get('message', '')}\n{tb}".rstrip(),
            )
        if res.get("unclosed"):
            return RanksError(
                "error",
                "UnclosedStage",
                f"rank {rank}: probe.stage {res['unclosed']} entered and never left",
            )
    return None


def run_ranks_case(
    case: Case,
    output_dir: Path | None,
    limit_s: float,
    *,
    seed: int,
    platform: str,
    identity: Mapping[str, Any] | None,
    diagnosis_s: float = DEADLINE_S,
) -> tuple[RanksRecord, Consistency | None]:
    """Run ``case`` once in ``case.ranks`` processes; record rank 0's record as the attempt's
    and the others' under ``rank<R>.``. Returns the per-rank record and the rank-consistency
    verdict (None when nothing is declared replicated); raises :class:`RanksError` when the
    attempt did not pass (on a timeout with every rank's stacks)."""
    from harness.model.case import case_to_json

    world = case.ranks
    scratch = None if output_dir is not None else Path(tempfile.mkdtemp(prefix="harness-ranks-"))
    base = output_dir if output_dir is not None else scratch
    assert base is not None
    folder = base / "ranks"
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    jobs, envs = [], []
    for rank in range(world):
        jobs.append(
            {
                "case": case_to_json(case),
                "seed": seed,
                "platform": platform,
                "identity": dict(identity) if identity is not None else None,
                "output_dir": str(output_dir) if rank == 0 and output_dir is not None else None,
                "result": str(folder / f"rank{rank}.json"),
            }
        )
        envs.append(rank_env(rank, world, port, platform))
    probe.note("ranks.world_size", world)
    probe.note("ranks.master_port", port)
    probe.note("ranks.logs", str(folder))
    ranks = Ranks(folder, jobs, envs)
    error: RanksError | None = None
    left: dict[int, str] = {}
    try:
        how, failed = ranks.wait(limit_s)
        if how == "timeout":
            error = RanksError(
                "timeout",
                "RanksTimeout",
                f"rank(s) {[r for r, p in enumerate(ranks.procs) if p.poll() is None]} of "
                f"{world} still running after {limit_s:g} s; rank logs in {folder}",
            )
            error.diagnosis = diagnose(
                ranks.pgid, trigger="rank timeout", platform=platform, deadline_s=diagnosis_s
            )
            error.args = (f"{error.args[0]}\n{diagnosis_summary(error.diagnosis)}",)
        elif how == "failed":
            running = [r for r, p in enumerate(ranks.procs) if p.poll() is None]
            probe.note(
                "ranks.killed",
                f"rank(s) {running} still running {FAILED_GRACE_S:g} s after rank {failed} "
                f"failed: killed",
            )
    finally:
        exits = ranks.exits()
        left = ranks.kill()
    results = {r: _read(folder / f"rank{r}.json") for r in range(world)}
    if scratch is not None:  # no output folder: nothing of the ranks is kept
        shutil.rmtree(scratch, ignore_errors=True)
    per_rank_fps: dict[int, Mapping[str, Mapping[str, Any]]] = {}
    stages: dict[str, dict[str, float]] = {}
    for rank, res in results.items():
        if res is None:
            continue
        stages[str(rank)] = {k: float(v) for k, v in res.get("stages", {}).items()}
        per_rank_fps[rank] = res.get("fingerprints", {})
        if rank == 0:
            _absorb_rank0(res)
        else:
            _absorb_other(rank, res)
    verdict = check_consistency(per_rank_fps, case.replicated) if case.replicated else None
    record = RanksRecord(
        world_size=world,
        master_port=port,
        stages=stages,
        exits=exits,
        devices={
            str(r): rank_devices(platform, r, os.environ).get(PINNED_ENV, "") for r in range(world)
        },
        replicated=case.replicated,
        consistency=verdict.reason if verdict is not None else "",
    )
    listed = "; ".join(f"pid {pid}: {cmd[:200]}" for pid, cmd in sorted(left.items()))
    if left:
        probe.note("ranks.left_behind", listed)
    error = error or _outcome(results, ranks)
    if error is None and left:
        error = RanksError(
            "error",
            "RanksLeftProcesses",
            f"the ranks' process group still had {len(left)} process(es) running after every "
            f"rank ended (killed): {listed}",
        )
    if error is not None:
        error.record = record
        raise error
    return record, verdict
