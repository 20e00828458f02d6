"""``harness dispatch --ray ADDRESS``: run each shard of a plan as a Ray job, follow them, and
merge their run folders.

The harness schedules nothing itself: each shard is one job submitted with Ray's
``JobSubmissionClient`` (the entrypoint is the shard's ``harness run ... --shard i/N``, run in
this repository's folder; its device slots are ``entrypoint_num_gpus``, or the ``NPU``
resource on Ascend), and Ray places it. A shard whose job failed for infrastructure (its
supervisor or node died, its runtime environment failed, its driver was killed by a signal,
or the harness itself exited 3) is submitted once more; a shard that ran and found a failure
(exit 1, 2, 5 or 7) never is. Run folders land in ``--out`` (``shard-<i>``, an earlier try's
folder moved to ``retried/``), which must be a folder every Ray node writes and this machine
reads (one machine, or a shared filesystem); ``harness merge`` then joins them into
``--out/merged``, listing the cases of any shard that never reported (exit 3).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.cli.emit import shard_command
from harness.cli.sharding import add_split_args, shard_plan
from harness.cli.suite import add_suite_args, load, platforms
from harness.errors import InfrastructureError, UsageError

DISPATCH_EXAMPLE = """\
examples:
  harness dispatch --ray http://127.0.0.1:8265 --shards 4 --out /shared/runs/pr-42
  harness dispatch --ray http://head:8265 --shards 8 --runner h100 --out /nfs/harness/nightly
"""

# Exit codes of a shard that ran: what it found does not change on a second try.
RAN = {0: "passed", 1: "failed", 2: "usage or input error", 5: "nothing ran", 7: "flaky"}
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
POLL_S = 0.5
# A job API that answers before its job agent is ready refuses submissions (Ray: HTTP 500
# RuntimeError): the submission is tried again after these pauses, then the shard is given up.
SUBMIT_BACKOFF_S = (1.0, 2.0, 4.0, 8.0)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "dispatch",
        help="run each shard of the plan as a Ray job, then merge them",
        description="Split the plan into N shards (as `harness plan --shards N`), submit each "
        "as a Ray job, print a line per shard as its status changes, retry a shard once when "
        "its job failed for infrastructure, and merge the shards' run folders.",
        epilog=DISPATCH_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_suite_args(p)
    p.add_argument(
        "--ray",
        required=True,
        metavar="ADDRESS",
        help="the Ray cluster's job API (its dashboard), e.g. http://127.0.0.1:8265",
    )
    p.add_argument("--shards", type=int, required=True, metavar="N", help="how many shards")
    add_split_args(p)
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="a new folder every Ray node can write and this machine can read: shard i's run "
        "folder lands in DIR/shard-i, the merged report in DIR/merged",
    )
    p.add_argument(
        "--code-root",
        action="append",
        dest="code_roots",
        metavar="DIR",
        help="passed to each shard's harness run (repeatable; default: targets/tinyav)",
    )
    p.add_argument(
        "--python",
        default="python",
        metavar="EXE",
        help="the interpreter on the Ray nodes that has the harness installed (default: python)",
    )
    p.set_defaults(func=main)


def retry_reason(status: str, exit_code: int | None, error_type: str | None) -> str | None:
    """Why a finished job is worth one more try (infrastructure), or None (it ran, or it was
    stopped on purpose)."""
    if status != "FAILED":
        return None
    if exit_code in RAN:
        return None
    if exit_code == 3:
        return "the harness exited 3 (infrastructure or incomplete)"
    if exit_code is not None and exit_code < 0:
        return f"its driver was killed by signal {-exit_code}"
    if error_type and error_type != "JOB_ENTRYPOINT_COMMAND_ERROR":
        return f"Ray: {error_type}"
    return f"exit {exit_code}" if exit_code is not None else "no exit code (the job died)"


@dataclass
class Shard:
    index: int
    devices: int
    tries: int = 0
    job: str = ""
    status: str = ""
    exit_code: int | None = None
    message: str = ""
    started: float = 0.0
    submit_s: list[float] = field(default_factory=list)


def _client(address: str) -> Any:
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        raise UsageError(
            "--ray: needs Ray's job client on this machine: pip install 'ray[default]'"
        ) from None
    try:
        return JobSubmissionClient(address)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError
        raise InfrastructureError(f"--ray {address}: cannot reach the job API: {exc}") from None


def _resources(platform: str | None, devices: int) -> dict[str, Any]:
    if not devices or platform is None:
        return {}
    if platform == "npu":
        return {"entrypoint_resources": {"NPU": devices}}
    return {"entrypoint_num_gpus": devices}


def main(args: argparse.Namespace) -> int:
    from harness.cases import build_plan
    from harness.cases.shard import check_shard_count
    from harness.cli.merge import merge_into
    from harness.platforms.profile import resolve_profile

    check_shard_count(args.shards)
    out: Path = args.out.resolve()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {args.out}: exists and is not an empty folder; pick a new one")
    if args.plan_nonce is None:  # one per dispatch: shards of another dispatch never merge
        args.plan_nonce = f"ray-{uuid.uuid4().hex[:12]}"
    profile = resolve_profile(args.runner, Path("runners"))
    suite = load(args.paths)
    if suite.errors:
        for err in suite.errors:
            print(f"error: {err}", file=sys.stderr)
        return 2
    items = build_plan(suite.cases, platforms(args, profile.platform), args.keyword)
    split = shard_plan(args, items, args.shards)
    client = _client(args.ray)
    out.mkdir(parents=True, exist_ok=True)
    base = shard_command(args)[1:-2]  # `harness` and `--shard auto` off
    for root in args.code_roots or ():
        base += ["--code-root", root]
    repo = Path.cwd().resolve()
    t0 = time.monotonic()

    def line(text: str) -> None:
        print(f"[{time.monotonic() - t0:7.1f}s] {text}", file=sys.stderr, flush=True)

    def submit(shard: Shard) -> None:
        shard.tries += 1
        folder = out / f"shard-{shard.index}"
        if folder.exists():  # an earlier try's folder: kept, out of the merge's way
            (out / "retried").mkdir(exist_ok=True)
            folder.rename(out / "retried" / f"shard-{shard.index}-try{shard.tries - 1}")
        argv = [args.python, "-m", "harness.cli", *base, "--shard", f"{shard.index}/{split.count}"]
        argv += ["--out", str(out), "--run-id", f"shard-{shard.index}", "-q"]
        entrypoint = f"cd {shlex.quote(str(repo))} && exec {shlex.join(argv)}"
        started = time.monotonic()
        job = submit_job(
            client,
            line,
            entrypoint=entrypoint,
            submission_id=f"harness-{args.plan_nonce}-shard-{shard.index}-try{shard.tries}",
            entrypoint_num_cpus=1,
            metadata={"harness_plan": split.digest, "shard": f"{shard.index}/{split.count}"},
            **_resources(profile.platform if shard.devices else None, shard.devices),
        )
        if isinstance(job, Exception):
            shard.status, shard.message = "FAILED", f"not submitted: {job}"
            line(
                f"shard {shard.index}/{split.count}: infrastructure: the job API refused it "
                f"{len(SUBMIT_BACKOFF_S) + 1} times ({job}); merge lists it"
            )
            return
        shard.job = job
        shard.submit_s.append(time.monotonic() - started)
        shard.status, shard.started = "SUBMITTED", time.monotonic()
        line(f"shard {shard.index}/{split.count}: submitted as {shard.job} (try {shard.tries})")

    shards = []
    for index in range(1, split.count + 1):
        if not split.items_of(index):
            line(f"shard {index}/{split.count}: no case, not submitted")
            continue
        shards.append(Shard(index, split.devices_of(index)))
    line(
        f"plan {split.digest}, nonce {args.plan_nonce}: {len(items)} item(s) in "
        f"{len(shards)} Ray job(s) on {args.ray}"
    )
    try:
        for shard in shards:
            submit(shard)
        _follow(client, shards, split.count, line, submit)
    except KeyboardInterrupt:
        for shard in shards:
            if shard.status not in TERMINAL:
                client.stop_job(shard.job)
        line("interrupted: the running jobs were stopped (exit 3)")
        return 3
    submit_s = sorted(s for shard in shards for s in shard.submit_s)
    if submit_s:
        line(
            f"dispatch: {len(submit_s)} job(s) submitted, {submit_s[len(submit_s) // 2]:.2f} s "
            f"median, {submit_s[-1]:.2f} s at most (Ray's job API)"
        )
    reports = sorted(p for p in out.glob("shard-*/report.json"))
    if not reports:
        line("no shard wrote a report; nothing to merge (exit 3)")
        return 3
    return merge_into(reports, out / "merged")


def submit_job(client: Any, line: Any, **job: Any) -> str | Exception:
    """``client.submit_job(**job)``: the job's id, or the last refusal after the backoff.

    Ray raises RuntimeError (an HTTP 500 from the dashboard while its job agent starts),
    ConnectionError or ValueError; none of them is a harness bug, and a shard that cannot be
    submitted is one the merge lists as missing (exit 3)."""
    for pause in (*SUBMIT_BACKOFF_S, None):
        try:
            return str(client.submit_job(**job))
        except (RuntimeError, ConnectionError, ValueError, OSError) as exc:
            if pause is None:
                return exc
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            name = job.get("submission_id")
            line(f"{name}: the job API refused it ({first}); again in {pause:g} s")
            time.sleep(pause)
    raise AssertionError("unreachable")


def _follow(client: Any, shards: list[Shard], count: int, line: Any, submit: Any) -> None:
    """Poll until every shard's job finished; a line per change of status; one retry for
    infrastructure."""
    while any(s.status not in TERMINAL for s in shards):
        time.sleep(POLL_S)
        for shard in shards:
            if shard.status in TERMINAL:
                continue
            info = client.get_job_info(shard.job)
            status = str(getattr(info.status, "value", info.status))
            if status == shard.status:
                continue
            shard.status = status
            label = f"shard {shard.index}/{count}"
            if status not in TERMINAL:
                line(f"{label}: {status.lower()}")
                continue
            shard.exit_code = getattr(info, "driver_exit_code", None)
            took = time.monotonic() - shard.started
            what = RAN.get(shard.exit_code or 0, "") if shard.exit_code in RAN else ""
            why = retry_reason(status, shard.exit_code, getattr(info, "error_type", None))
            exit_text = "" if shard.exit_code is None else f" exit {shard.exit_code}"
            line(
                f"{label}: {status.lower()},{exit_text}{f' ({what})' if what else ''} "
                f"after {took:.1f} s"
                + (f"; {str(info.message).splitlines()[0]}" if why and info.message else "")
            )
            if why is not None and shard.tries < 2:
                line(f"{label}: infrastructure ({why}): submitting it once more")
                submit(shard)
            elif why is not None:
                line(f"{label}: infrastructure again ({why}): not retried; merge lists it")
