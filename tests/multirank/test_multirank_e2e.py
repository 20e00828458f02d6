"""Multi-rank cases end to end through ``harness run``, on a toy two-rank target (a sum over
a real TCP rendezvous at MASTER_ADDR:MASTER_PORT, tests/multirank/toy_ranks.py): every rank's
stages and fingerprints are recorded, rank 0's outputs are checked, the rank-consistency check
passes and summary.md shows the slowest rank per stage; a rank that fails first is the
attempt's error; a rank that skips the all_reduce
times out the attempt with both ranks' stacks, rank 0 waiting in the collective. The cases
share one run (module fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.report.detail import decode
from harness.report.schema import validate_report

# the toy cases share one run of their own (module fixture), so they stay on one xdist worker;
# the bundled tinyav TP 2 case is read from the session's run of the whole suite
pytestmark = [pytest.mark.slow]
TOY = pytest.mark.xdist_group("multirank")

REPO = Path(__file__).resolve().parents[2]
CASES = """
[[case]]
id = "sum"
kind = "pipeline"
target = "toy_ranks:allreduce"
ranks = 2
replicated = ["summed"]
timeout_s = 60

[[case]]
id = "rank1-fails"
kind = "pipeline"
target = "toy_ranks:allreduce"
params = { fail_on = 1 }
ranks = 2
retries = 0
timeout_s = 60

[[case]]
id = "leaves-a-child"
kind = "pipeline"
target = "toy_ranks:allreduce"
params = { leave_child = true, work_s = 0.0 }
ranks = 2
retries = 0
timeout_s = 60

[[case]]
id = "skips-allreduce"
kind = "pipeline"
target = "toy_ranks:allreduce"
params = { skip_on = 1 }
ranks = 2
retries = 0
timeout_s = 6
"""


def out_args(tmp: Path) -> list[str]:
    return ["--out", str(tmp / "out"), "--run-id", "r", "-q"]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("multirank")
    (tmp / "cases.toml").write_text(CASES)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(Path(__file__).parent)])
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(tmp / "cases.toml"), *out_args(tmp)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    doc: dict[str, Any] = json.loads((tmp / "out" / "r" / "report.json").read_text())
    validate_report(doc)
    doc["proc"] = proc
    doc["summary"] = (tmp / "out" / "r" / "summary.md").read_text()
    doc["page"] = decode((tmp / "out" / "r" / "index.html").read_text())
    return doc


def _case(doc: dict[str, Any], case_id: str) -> dict[str, Any]:
    (case,) = [c for c in doc["cases"] if c["id"] == case_id]
    return case


@TOY
def test_every_rank_is_recorded_and_rank_0_is_judged(run: dict[str, Any]) -> None:
    case = _case(run, "sum")
    assert case["status"] == "passed", case["reason"]
    (attempt,) = case["attempts"]
    fps = attempt["fingerprints"]
    # rank 0's names as recorded, rank 1's under rank1.; each rank's own shard differs
    assert {"shard", "summed", "rank", "rank1.shard", "rank1.summed", "rank1.rank"} <= set(fps)
    assert (fps["summed"]["min"], fps["rank1.summed"]["min"]) == (3.0, 3.0)
    assert (fps["rank"]["min"], fps["rank1.rank"]["min"]) == (0, 1)
    assert list(attempt["stages"]) == ["init", "work", "allreduce"]  # rank 0's
    assert {"rank1.init", "rank1.work", "rank1.allreduce"} <= set(attempt["notes"])
    # every rank noted the file its target came from (code provenance checks each rank's)
    notes = attempt["notes"]
    assert notes["harness.target_file"].endswith("toy_ranks.py"), notes
    assert notes["rank1.harness.target_file"] == notes["harness.target_file"]
    ranks = attempt["ranks"]
    assert ranks["world_size"] == 2 and set(ranks["stages"]) == {"0", "1"}
    assert ranks["exits"] == {"0": "exit 0", "1": "exit 0"}
    assert list(attempt["outputs"]) == ["summed"]  # rank 0's only
    checks = {c["name"]: c for c in attempt["checks"]}
    assert checks["finite(summed)"]["passed"] is True
    consistency = checks["rank_consistency"]
    assert consistency["passed"] is True, consistency
    assert consistency["settings"]["compared"] == ["summed"]


@TOY
def test_the_summary_shows_the_slowest_rank_per_stage(run: dict[str, Any]) -> None:
    summary = run["summary"]
    assert "**Ranks** of `pipeline/sum[cpu]` attempt #0: 2 ranks" in summary
    assert "| stage | slowest rank | seconds | rank 0 | rank 1 |" in summary
    section = summary.split("**Ranks** of `pipeline/sum[cpu]`")[1].split("\n\n")[1]
    (work,) = [line for line in section.splitlines() if line.startswith("| `work` |")]
    assert work.split("|")[2].strip() == "1"  # rank 1 sleeps in it; rank 0 does not
    # the HTML report draws the same table
    (page,) = [c for c in run["page"] if "ranks" in c and "rank consistency" in c["ranks"][0]]
    title, heads, rows = page["ranks"]
    assert title.startswith("ranks, attempt #0: 2 ranks (rank 0: exit 0, rank 1: exit 0)")
    assert heads == ["stage", "slowest rank", "seconds", "rank 0", "rank 1"]
    assert [r[:2] for r in rows if r[0] == "work"] == [["work", "1"]]


@TOY
def test_a_rank_skipping_the_all_reduce_times_out_with_every_ranks_stacks(
    run: dict[str, Any],
) -> None:
    case = _case(run, "skips-allreduce")
    assert case["status"] == "timeout"
    (attempt,) = case["attempts"]
    assert attempt["error"]["type"] == "RanksTimeout"
    hang = attempt["hang"]
    assert hang["trigger"] == "rank timeout"
    by_rank = {p["rank"]: p for p in hang["processes"]}
    assert set(by_rank) == {0, 1}
    assert "all_reduce" in by_rank[0]["stack"], by_rank[0]  # waiting in the collective
    assert "wait_elsewhere" in by_rank[1]["stack"], by_rank[1]
    assert attempt["ranks"]["exits"] == {"0": "running at the kill", "1": "running at the kill"}
    assert "**Hang diagnosis** of `pipeline/skips-allreduce[cpu]`" in run["summary"]
    # the run went on and nothing of the ranks is left
    assert run["proc"].returncode == 1, run["proc"].stderr


@pytest.mark.xdist_group("bundled-suite")
def test_the_bundled_tp2_case_passes_with_its_ranks_consistent(bundled_suite: Any) -> None:
    """cases/multirank/tinyav.toml in the session's run of the whole suite: tinyav at TP 2
    over gloo, judged against its blessed reference, every replicated fingerprint equal."""
    doc = json.loads((bundled_suite.dir / "report.json").read_text())
    (case,) = [c for c in doc["cases"] if c["id"] == "tp2-int8"]
    assert case["status"] == "passed", case["reason"]
    attempt = case["attempts"][0]
    checks = {c["name"]: c for c in attempt["checks"]}
    assert checks["rank_consistency"]["passed"] is True
    assert "denoise.step01" in checks["rank_consistency"]["settings"]["compared"]
    assert "rank1.denoise.step01" in attempt["fingerprints"]
    assert set(attempt["ranks"]["stages"]) == {"0", "1"}
    assert "DenoisingStage" in attempt["ranks"]["stages"]["1"]


@TOY
def test_the_rank_that_failed_first_is_the_attempts_error(run: dict[str, Any]) -> None:
    """Rank 1 fails an assertion; rank 0 then loses its peer in the collective and fails too:
    the attempt is rank 1's failure, and both ranks' exits are recorded."""
    case = _case(run, "rank1-fails")
    (attempt,) = case["attempts"]
    assert attempt["status"] == "failed", attempt["error"]
    assert attempt["error"]["type"] == "AssertionError"
    assert attempt["error"]["message"].startswith("rank 1: rank 1 refuses to sum")
    assert attempt["ranks"]["exits"] == {"0": "exit 1", "1": "exit 1"}
    assert "shard" in attempt["fingerprints"] and "rank1.shard" not in attempt["fingerprints"]


@TOY
def test_a_process_a_rank_left_behind_fails_the_attempt_and_is_killed(
    run: dict[str, Any],
) -> None:
    (attempt,) = _case(run, "leaves-a-child")["attempts"]
    assert attempt["status"] == "error", attempt["error"]
    assert attempt["error"]["type"] == "RanksLeftProcesses"
    message = attempt["error"]["message"]
    assert "1 process(es)" in message and "sleep 30" in message
    pid = int(message.split("pid ")[1].split(":")[0])
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped
