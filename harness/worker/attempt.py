"""One attempt, inside a worker: seed, call the target, record everything, run the checks.

A call is recorded, never allowed to escape: whatever the target does (returns, fails an
assertion, raises, prints), the result is one attempt record. Only a crash of the whole
interpreter escapes, and the manager records that one.
"""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.abc
import importlib.util
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from harness import probe
from harness.checks import evaluate_attempt_checks
from harness.errors import InfrastructureError
from harness.model import Attempt, Case, ErrorInfo
from harness.model.infra import looks_like_infrastructure
from harness.platforms.base import Identity
from harness.platforms.policy import threshold_chain
from harness.probe.clocks import perf_counter, process_time
from harness.probe.sched import CLOCKS
from harness.worker.case_errors import CaseProcessError
from harness.worker.layers import explain_attempt, quality_failed, write_intermediates
from harness.worker.protocol import AttemptJob
from harness.worker.target import resolve_target, seed_everything, stage_device

if TYPE_CHECKING:
    from harness.model.hang import HangDiagnosis
    from harness.model.ranks import Consistency, RanksRecord

# Captured at import: a target that replaces os.getpid must not fool the worker's own checks.
_getpid = os.getpid


_HARNESS_DIR = str(Path(__file__).resolve().parent.parent)


def innermost_frame(exc: BaseException) -> str:
    """``module:function`` of the innermost frame of ``exc`` outside the harness and the
    standard library: where the code under test raised (empty when no such frame)."""
    stdlib = os.path.dirname(os.__file__)
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = os.path.abspath(frame.filename)
        if path.startswith(_HARNESS_DIR) or (
            path.startswith(stdlib) and "site-packages" not in path
        ):
            continue
        files = {name: getattr(mod, "__file__", None) for name, mod in list(sys.modules.items())}
        module = next(
            (name for name, f in files.items() if f and os.path.abspath(f) == path),
            Path(path).stem,
        )
        return f"{module}:{frame.name}"
    return ""


def _run_command(case: Case, result_file: Path, timeout_s: float) -> None:
    """Run a ``command`` case; a non-zero exit fails it. It may write JSON to the result file."""
    result_file.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HARNESS_RESULT_FILE=str(result_file))
    proc = subprocess.run(
        list(case.command or ()),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        tail = (proc.stdout[-2000:] + proc.stderr[-2000:]).strip()
        what = f"command {list(case.command or ())} exited {proc.returncode}\n{tail}"
        if looks_like_infrastructure(tail):
            # A download answering 403, a host that does not resolve: the command could not
            # run the code under test, so this is an infrastructure error (retried as such,
            # with its signature), not a failed case.
            raise InfrastructureError(what)
        raise AssertionError(what)
    if result_file.is_file():
        data = json.loads(result_file.read_text())
        for k, v in data.get("notes", {}).items():
            probe.note(k, v)


def _exc_message(exc: Exception) -> str:
    """``str(exc)``, with the URL it names when the text does not (urllib's HTTPError says
    "HTTP Error 403: Forbidden" and keeps the URL in ``.url``): the infrastructure signature
    of the failure needs it."""
    message = str(exc)
    url = getattr(exc, "url", None)
    return f"{message} ({url})" if isinstance(url, str) and url and url not in message else message


def _child_status(exc: BaseException | None) -> int:
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr, flush=True)
        return 1
    traceback.print_exception(exc, file=sys.stderr)
    sys.stderr.flush()
    return 1


def _base_message(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return (
            f"the target called sys.exit({exc.code!r}) (raised SystemExit); it ends this "
            "attempt, not the worker"
        )
    detail = f": {exc}" if str(exc) else ""
    return f"the target raised {type(exc).__name__}{detail}"


def _unclosed_error(names: tuple[str, ...]) -> ErrorInfo:
    """A stage entered and never left has no time: the attempt is an error naming it."""
    listed = ", ".join(f"'{n}'" for n in dict.fromkeys(names))
    return ErrorInfo.make(
        "UnclosedStage",
        f"probe.stage {listed} was entered and never left before the target returned (a "
        "stage's __enter__ without its __exit__, or a thread or generator still inside it); "
        "an unclosed stage has no time, so the attempt is an error, not a 0.0 s stage",
    )


def missing_requirements(case: Case) -> list[str]:
    """The modules of ``case.requires`` this interpreter cannot find (nothing is imported)."""
    missing = []
    for name in case.requires:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a dotted name whose parent package is missing
            found = False
        if not found:
            missing.append(name)
    return missing


def _skipped(job: AttemptJob, missing: list[str]) -> Attempt:
    names = ", ".join(repr(m) for m in missing)
    reason = (
        f"requires {names}, which the worker's Python ({sys.executable}) cannot import; "
        f"install it to run this case (case file: {job.case.source})"
    )
    return Attempt(
        case_id=job.case.id,
        platform=job.platform,
        index=job.index,
        status="skipped",
        seed=job.seed,
        warmup=job.warmup,
        retry=job.retry,
        repeat=job.repeat,
        notes={"harness.skipped": reason},
        error=ErrorInfo.make("MissingRequirement", reason),
        worker_pid=_getpid(),
        started_at=dt.datetime.now(dt.UTC).isoformat(),
        fresh_process=job.case.fresh_process,
        side=job.side,  # type: ignore[arg-type]
        round=job.round,
    )


def run_attempt(job: AttemptJob) -> Attempt:
    """Execute one attempt described by ``job`` and record it, whatever the target does.

    A case whose ``requires`` names a module this interpreter cannot find is not run: the
    attempt is ``skipped`` with the missing names and the interpreter.
    """
    case = job.case
    missing = missing_requirements(case)
    if missing:
        return _skipped(job, missing)
    seed, platform = job.seed, job.platform
    output_dir = Path(job.output_dir) if job.output_dir else None
    started = dt.datetime.now(dt.UTC).isoformat()
    seed_everything(seed)
    identity = Identity.from_json(job.identity) if job.identity is not None else None
    rec = probe._begin(seed, platform, output_dir, device=stage_device(platform), info=job.identity)
    status = "passed"
    error: ErrorInfo | None = None
    hang: HangDiagnosis | None = None
    ranks: RanksRecord | None = None
    consistency: Consistency | None = None
    pid = _getpid()
    # The attempt's run-queue delay, beside its duration (the threads listed afresh).
    threads = CLOCKS.sample(relist=True)
    cpu0 = process_time()
    t0 = perf_counter()
    try:
        if case.server is not None:
            # Start-up gets at most what the attempt's limit leaves for a hang diagnosis and
            # the stop, so that a readiness timeout is this worker's report, not the manager's
            # kill.
            from harness.worker.hang_diagnosis import DEADLINE_S
            from harness.worker.server_case import run_server_case

            stop_s = case.server.stop_timeout_s + DEADLINE_S
            limit = max(case.timeout_s * 0.5, case.timeout_s - stop_s - 10.0)
            tag = f"{case.id}-{job.index}"
            run_server_case(case, output_dir, tag, limit, platform, last_use=job.server_last)
        elif case.ranks > 1:
            from harness.worker.ranks_case import ranks_limits, run_ranks_case

            limit, diagnosis_s = ranks_limits(case.timeout_s)
            ranks, consistency = run_ranks_case(
                case,
                output_dir,
                limit,
                seed=seed,
                platform=platform,
                identity=job.identity,
                diagnosis_s=diagnosis_s,
            )
        elif case.command is not None:
            # The command gets most of the attempt's time, so that its own timeout is reported
            # by this worker (with what it printed) before the manager's deadline kills us.
            limit = max(case.timeout_s * 0.9, case.timeout_s - 5.0)
            _run_command(case, (output_dir or Path(".")) / "result.json", limit)
        else:
            fn = resolve_target(str(case.target))
            # Which file the target really came from: a comparison shows (and tests) that
            # base and head imported their own checkouts, not one installed copy.
            module = sys.modules.get(getattr(fn, "__module__", "") or "")
            file = getattr(module, "__file__", None)
            probe.note("harness.target_file", os.path.abspath(file) if file else "None")
            try:
                fn(**dict(case.params))
            finally:
                if _getpid() != pid:
                    # A child the target forked returned from it: it is not the worker, so it
                    # must not record, check or answer anything. Leave at once, with the exit
                    # status Python would have given it (the target may wait for it).
                    os._exit(_child_status(sys.exc_info()[1]))
    except AssertionError as exc:
        status = "failed"
        error = ErrorInfo.make(
            "AssertionError",
            str(exc) or "assertion failed",
            traceback.format_exc(),
            innermost_frame(exc),
        )
    except CaseProcessError as exc:  # a server case's or a multi-rank case's
        status = exc.status
        error = ErrorInfo.make(exc.kind, str(exc), traceback.format_exc())
        hang, ranks = exc.diagnosis, exc.record
    except subprocess.TimeoutExpired as exc:
        status = "timeout"
        error = ErrorInfo.make("Timeout", f"command timed out: {exc}", traceback.format_exc())
    except Exception as exc:
        status = "error"
        error = ErrorInfo.make(
            type(exc).__name__, _exc_message(exc), traceback.format_exc(), innermost_frame(exc)
        )
    except BaseException as exc:  # sys.exit(), KeyboardInterrupt, pytest.skip() in a target
        status = "error"
        error = ErrorInfo.make(
            type(exc).__name__, _base_message(exc), traceback.format_exc(), innermost_frame(exc)
        )
    finally:
        duration = perf_counter() - t0
        wait_s = CLOCKS.finish(threads, process_time() - cpu0, duration)
        probe._end()
    if rec.unclosed and status == "passed":
        status, error = "error", _unclosed_error(rec.unclosed)
    checks = evaluate_attempt_checks(
        case,
        platform_chain=job.platform_chain,
        outputs=rec.outputs,
        arrays=rec.output_arrays,
        notes=rec.notes,
        references_root=job.references_root,
        ran=status == "passed",
        threshold_chain=threshold_chain(job.platform_chain, identity),
        simulated=identity.reason if identity is not None and identity.simulated else None,
    )
    if consistency is not None:
        from harness.worker.ranks_case import consistency_check

        checks = [*checks, consistency_check(consistency)]
    samples = rec.layers if not job.warmup else {}
    recorded = not job.warmup and bool(rec.inputs or rec.fingerprints)
    intermediates = write_intermediates(samples, output_dir, recorded=recorded)
    layers = None
    if not job.warmup and (job.explain or quality_failed(checks)):
        layers = explain_attempt(
            reference_id=case.reference or case.id,
            references_root=job.references_root,
            chain=job.platform_chain,
            inputs=rec.inputs,
            fingerprints=rec.fingerprints,
            samples=samples,
            tolerances=job.layer_tolerances or {"rel_l2": 1e-3},
        )
    if status == "passed" and any(c.blocking for c in checks):
        status = "failed"
        failed = [
            f"{c.name}: {c.reason or f'{c.value} (want {c.op} {c.threshold})'}"
            for c in checks
            if c.blocking
        ]
        error = ErrorInfo.make("CheckFailed", "checks failed: " + "; ".join(failed))
    elif status == "passed" and any(c.unjudged for c in checks):
        # A check that must pass but could not run (no CLIP model, say) is never a pass: the
        # case is an error that names the check and why, and only `policy = "warn"` goes on.
        status = "error"
        missing = [f"{c.name}: {c.reason}" for c in checks if c.unjudged]
        error = ErrorInfo.make(
            "CheckNotRun",
            'checks with policy "fail" could not run: ' + "; ".join(missing),
        )
    return Attempt(
        case_id=case.id,
        platform=platform,
        index=job.index,
        status=status,  # type: ignore[arg-type]
        seed=seed,
        warmup=job.warmup,
        retry=job.retry,
        repeat=job.repeat,
        inputs=rec.inputs,
        stages=rec.stages,
        fingerprints=rec.fingerprints,
        notes=rec.notes,
        outputs=rec.outputs,
        checks=tuple(checks),
        error=error,
        duration_s=duration,
        worker_pid=_getpid(),
        started_at=started,
        fresh_process=case.fresh_process,
        side=job.side,  # type: ignore[arg-type]
        round=job.round,
        stage_device=rec.stage_device,
        stage_memory=rec.stage_memory,
        stage_cpu=dict(rec.stage_cpu),
        stage_wait=dict(rec.stage_wait),
        wait_s=wait_s,
        hang=hang,
        ranks=ranks,
        intermediates=intermediates,
        reference_layers=layers,
    )
