"""plan -> run the shards -> merge, as CI runs them: the real ``harness`` command in a
subprocess, real workers, the bundled tinyav target's fast cases (loader, quant dispatch)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import harness
from harness.pytest_plugin.xdist_runs import merge_parts
from harness.report.io import read_report

pytestmark = pytest.mark.slow

REPO = Path(harness.__file__).resolve().parent.parent
TINYAV = REPO / "targets" / "tinyav"

# A loader case file whose first case fails on purpose (the INT8 file has 26 quantized layers).
FAILS_FIRST = """
[[case]]
id = "a-wrong-layer-count"
kind = "loader"
target = "tinyav.scenarios.loader:load_exact"
params = { fmt = "int8_convrot", variant = "full" }
[[case.checks]]
metric = "note.loader.quantized_layers"
op = "=="
threshold = 999

[[case]]
id = "b-loads"
kind = "loader"
target = "tinyav.scenarios.loader:load_exact"
params = { fmt = "bf16", variant = "full" }

[[case]]
id = "c-loads"
kind = "loader"
target = "tinyav.scenarios.loader:load_exact"
params = { fmt = "fp8", variant = "full" }
"""


def harness_cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A CI checkout in miniature: the bundled loader and dispatch case files."""
    (tmp_path / "cases").mkdir()
    shutil.copy(REPO / "cases" / "loader" / "exact.toml", tmp_path / "cases")
    shutil.copy(REPO / "cases" / "quant" / "dispatch.toml", tmp_path / "cases")
    return tmp_path


def run_shard(project: Path, spec: str, *extra: str) -> subprocess.CompletedProcess[str]:
    out = f"reports/shard-{spec.split('/')[0]}"
    return harness_cli(
        project, "run", "--shard", spec, "--code-root", str(TINYAV), "--out", out, "-q",
        "--run-id", "r", *extra,
    )  # fmt: skip


def pytest_harness(
    project: Path, out: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`pytest harness/` over the project's cases, as a stack's CI job runs it."""
    return subprocess.run(
        [
            sys.executable, "-m", "pytest", str(REPO / "harness"), "-p", "no:cacheprovider",
            f"--rootdir={project}", "--harness-cases", "cases", "--harness-code-root",
            str(TINYAV), "--harness-out", out, *args,
        ],
        cwd=project, capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip


def test_plan_run_two_shards_and_merge_covers_every_case(project: Path) -> None:
    planned = harness_cli(project, "plan", "--shards", "2", "--json")
    assert planned.returncode == 0, planned.stderr
    doc = json.loads(planned.stdout)
    names = {c["name"] for s in doc["shards"] for c in s["cases"]}
    assert len(names) == 13 and doc["estimated"] == 13  # no --durations: every one estimated
    assert all(c["estimate"].startswith("default for") for s in doc["shards"] for c in s["cases"])

    for i in (1, 2):
        proc = run_shard(project, f"{i}/2")
        assert proc.returncode == 0, proc.stderr
        report = read_report(project / f"reports/shard-{i}/r")
        assert report.shard is not None
        assert (report.shard.index, report.shard.count) == (i, 2)
        assert report.shard.digest == doc["plan_digest"]  # computed alone, the same plan
        mine = {c["name"] for c in doc["shards"][i - 1]["cases"]}
        assert {p.name for p in report.shard.planned()} == mine
        assert {c.name for c in report.cases} == mine
        assert {p.name for p in report.shard.plan} == names

    merged = harness_cli(project, "merge", "reports/shard-1", "reports/shard-2", "--out", "m")
    assert merged.returncode == 0, merged.stderr
    report = read_report(project / "m")
    assert {c.name for c in report.cases} == names
    assert report.missing == () and {c.status for c in report.cases} == {"passed"}
    assert (project / "m" / "junit.xml").is_file() and (project / "m" / "summary.md").is_file()

    # A shard report missing: its cases are missing with the reason, and the exit is not 0.
    alone = harness_cli(project, "merge", "reports/shard-1", "--out", "m1")
    assert alone.returncode == 3, alone.stderr
    lost = read_report(project / "m1").missing
    assert {m.name for m in lost} == {c["name"] for c in doc["shards"][1]["cases"]}
    assert {m.reason for m in lost} == {"shard 2/2 report not found (merged: 1/2)"}
    assert "shard 2/2 report not found" in alone.stderr
    assert "shard 2/2 report not found" in (project / "m1" / "summary.md").read_text()

    # The same shard twice is an error that names both folders.
    shutil.copytree(project / "reports/shard-1", project / "copy")
    twice = harness_cli(project, "merge", "reports/shard-1", "copy", "--out", "m2")
    assert twice.returncode == 2
    assert "shard 1/2 given twice" in twice.stderr and "copy" in twice.stderr


def test_a_fail_fast_shard_stops_and_merge_lists_what_it_did_not_run(project: Path) -> None:
    (project / "cases" / "aa_fails.toml").write_text(FAILS_FIRST)
    procs = {i: run_shard(project, f"{i}/2", "--shard-by", "file", "--fail-fast") for i in (1, 2)}
    reports = {i: read_report(project / f"reports/shard-{i}/r") for i in (1, 2)}
    (stopped,) = [i for i, r in reports.items() if r.missing]
    report = reports[stopped]
    assert procs[stopped].returncode == 1, procs[stopped].stderr
    assert [(c.id, c.status) for c in report.cases] == [("a-wrong-layer-count", "failed")]
    reason = (
        f"not run: shard {stopped}/2 stopped after loader/a-wrong-layer-count[cpu] failed "
        "(--fail-fast)"
    )
    # Every other case planned on that shard (the rest of the file, and any other file the
    # split put there) is listed, in plan order, with the reason; none has a result.
    assert report.shard is not None
    rest = [p.id for p in report.shard.planned() if p.id != "a-wrong-layer-count"]
    assert rest[:2] == ["b-loads", "c-loads"]
    assert [(m.id, m.reason, m.cause) for m in report.missing] == [
        (cid, reason, "fail_fast") for cid in rest
    ]
    assert f"missing  loader/b-loads[cpu]: {reason}" in procs[stopped].stderr
    other = 3 - stopped
    assert procs[other].returncode == 0, procs[other].stderr

    merged = harness_cli(project, "merge", "reports/shard-1", "reports/shard-2", "--out", "m")
    assert merged.returncode == 1, merged.stderr
    whole = read_report(project / "m")
    assert [m.reason for m in whole.missing] == [reason] * len(rest)
    assert len(whole.cases) == 1 + len(reports[other].cases)


def test_bad_shard_specs_are_one_line_usage_errors(project: Path) -> None:
    for spec in ("0/3", "4/3", "x/y"):
        proc = run_shard(project, spec)
        assert proc.returncode == 2, (spec, proc.stderr)
        assert proc.stderr.count("\n") == 1 and f"--shard {spec}" in proc.stderr.replace("'", "")
    assert not (project / "reports").exists()  # nothing run, nothing written


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")], ids=["serial", "xdist"])
def test_pytest_shards_merge_like_harness_run(project: Path, xdist: tuple[str, str]) -> None:
    def pytest_shard(spec: str, out: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                sys.executable, "-m", "pytest", str(REPO / "harness"), "-p", "no:cacheprovider",
                *xdist, f"--rootdir={project}", "--harness-cases", "cases",
                "--harness-code-root", str(TINYAV), "--harness-out", out, "--harness-shard", spec,
            ],
            cwd=project, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip

    one, two = pytest_shard("1/2", "p1"), pytest_shard("2/2", "p2")
    assert one.returncode == 0 and two.returncode == 0, one.stdout + two.stdout
    runs = [d.name for out in ("p1", "p2") for d in (project / out).iterdir() if not d.is_symlink()]
    # With xdist each worker that ran cases reports its part of the shard; merge joins them.
    assert len(runs) > 2 if xdist[0] == "-n" else len(runs) == 2, runs
    merged = harness_cli(project, "merge", "p1", "p2", "--out", "m")
    assert merged.returncode == 0, merged.stderr
    report = read_report(project / "m")
    assert len(report.cases) == 13 and report.missing == ()
    assert sorted(Path(m.path).name for m in report.merged_from) == sorted(runs)
    if xdist[0] == "-n":
        return

    bad = pytest_shard("3/2", "p3")
    assert bad.returncode == 4  # pytest's usage error
    assert "--harness-shard 3/2" in bad.stderr


def test_a_shard_the_split_left_empty_says_so(project: Path) -> None:
    proc = run_shard(project, "20/20")  # 13 cases over 20 shards: the last ones get none
    assert proc.returncode == 5
    assert "shard 20/20 has no case: the split put all 13 planned case(s) on other shards" in (
        proc.stderr
    )
    report = read_report(project / "reports/shard-20/r")
    assert report.shard is not None and report.shard.planned() == ()


def test_pytest_xdist_workers_parts_are_merged_into_one_run_folder(project: Path) -> None:
    """`pytest harness/ -n 2` without --harness-shard: one run folder (``latest``) holding
    every selected case, merged from the folder each xdist worker wrote of the part it ran;
    the same cases and outcomes as the run without xdist. Deselected cases (-k) are not
    planned, so not missing."""

    def plugin(out: str, *args: str) -> subprocess.CompletedProcess[str]:
        return pytest_harness(project, out, *args)

    def outcomes(run: Path) -> dict[str, str]:
        return {c.name: c.status for c in read_report(run).cases}

    serial = plugin("serial", "-p", "no:xdist")
    xdist = plugin("xdist", "-n", "2")
    assert serial.returncode == 0 and xdist.returncode == 0, serial.stdout + xdist.stdout
    latest = (project / "xdist" / "latest").resolve()
    parts = sorted(d for d in (project / "xdist").iterdir() if "-gw" in d.name)
    assert len(parts) == 2 and latest not in parts, parts
    assert f"harness report: {latest / 'report.json'}" in xdist.stdout
    merged = read_report(latest)
    assert outcomes(latest) == outcomes(project / "serial" / "latest")
    assert len(merged.cases) == 13 and merged.missing == ()
    assert sorted(Path(m.path).name for m in merged.merged_from) == [p.name for p in parts]
    # (these loader and dispatch cases write no outputs: the merged folder's copies of the
    # workers' MP4s are checked on the bundled suite's run, tests/server_cases)
    assert (latest / "index.html").is_file() and (latest / "junit.xml").is_file()
    # a worker whose part was lost (it crashed): its cases are missing, never left out
    lost = merge_parts([str(parts[0])], project / "lost", None)[1]
    gone = {c.name for c in read_report(parts[1]).cases}
    assert {m.name for m in lost.missing} == gone and {c.name for c in lost.cases} != set()
    assert all(m.cause == "not_reported" for m in lost.missing), lost.missing

    picked = plugin("picked", "-n", "2", "-k", "int8")
    assert picked.returncode == 0, picked.stdout
    chosen = read_report((project / "picked" / "latest").resolve())
    assert chosen.missing == () and 0 < len(chosen.cases) < 13
    assert all("int8" in c.name for c in chosen.cases)


# A pytest plugin for the controller of an xdist session: as each worker goes down, its part's
# report is damaged on disk (as a full disk or a killed write would leave it), before the
# controller merges the parts.
DAMAGE_PARTS = """
from pathlib import Path

def pytest_testnodedown(node, error):
    run = getattr(node, "workeroutput", {}).get("harness_run")
    if run is not None:
        (Path(run[0]) / "report.json").write_text('{"schema_version": ')
"""


def test_an_xdist_merge_that_fails_keeps_the_parts_says_why_and_changes_no_outcome(
    project: Path,
) -> None:
    """The controller cannot merge the workers' parts (one's report.json is damaged): the
    session's items keep their outcomes, the exit status is 3 (DESIGN: incomplete, a harness
    or infrastructure fault, never 0 or 1), the terminal summary says in red which parts were
    not merged and why, and the parts stay on disk; no merged folder, no ``latest`` pointing
    at half a run."""
    (project / "damage_parts.py").write_text(DAMAGE_PARTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), str(REPO)])}
    proc = pytest_harness(project, "out", "-n", "2", "-p", "damage_parts", env=env)
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    tally = proc.stdout.strip().splitlines()[-1]  # every item as it ran: passed or skipped
    assert re.fullmatch(r"=* \d+ passed(, \d+ skipped)? in .*", tally), tally
    parts = sorted(d for d in (project / "out").iterdir() if "-gw" in d.name)
    assert len(parts) == 2, parts
    line = next(x for x in proc.stdout.splitlines() if "were not merged" in x)
    assert line.startswith("harness: the xdist workers' runs were not merged ("), line
    assert "the parts are kept, the run is incomplete (exit 3)" in line, line
    assert all(str(p) in line for p in parts) and "report.json" in line, line
    assert "harness report:" not in proc.stdout
    assert not (project / "out" / "latest").exists()
    assert sorted(d for d in (project / "out").iterdir()) == parts


# A pytest plugin for the workers of an xdist session: gw0 dies (as the OOM killer or a crash of
# the harness's manager would end it) once its first item is done, once per project.
# (The worker is told by its workerinput, not by PYTEST_XDIST_WORKER: the controller inherits
# that variable from the xdist worker of the outer session that runs this test.)
CRASH_GW0 = """
import os

WORKER = []

def pytest_configure(config):
    WORKER.append(getattr(config, "workerinput", {}).get("workerid"))

def pytest_runtest_logfinish(nodeid, location):
    if WORKER == ["gw0"] and not os.path.exists("crashed"):
        open("crashed", "w").close()
        os._exit(9)
"""


def test_an_xdist_worker_that_dies_makes_the_session_incomplete_not_a_failed_check(
    project: Path,
) -> None:
    """pytest counts the item an xdist worker died in as failed (exit 1, "a check failed"); the
    cases run in harness workers of their own, so that death is the harness's fault: the
    session exits 3 and says which worker died in which item. The dead worker's part is not
    merged (it never handed it over); xdist's replacement runs the rest."""
    (project / "crash_gw0.py").write_text(CRASH_GW0)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(project), str(REPO)])}
    github = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(project / "summary.md")}
    proc = pytest_harness(project, "out", "-n", "2", "-p", "crash_gw0", env={**env, **github})
    assert (project / "crashed").exists()
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert re.search(r"\b1 failed\b", proc.stdout.strip().splitlines()[-1]), proc.stdout[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("harness: xdist worker"))
    # (which batch, loader or quant, xdist hands gw0 first is its scheduler's choice)
    assert re.match(r"harness: xdist worker gw0 crashed while running ::(loader|quant)/\S+: ", line)
    assert line.endswith("the run is incomplete (exit 3)"), line
    # under GitHub Actions the same words are an error annotation of the job
    title = "::error title=harness%3A the run is incomplete (exit 3)::"
    assert f"{title}{line.removeprefix('harness: ')}" in proc.stdout.splitlines()
    merged = read_report((project / "out" / "latest").resolve())
    merged_parts = [Path(m.path).name for m in merged.merged_from]
    assert merged_parts and not any(n.endswith("-gw0") for n in merged_parts), merged_parts

    # Without a replacement worker the dead worker's cases never run: the merged run lists them
    # missing, and the summary names them.
    (project / "crashed").unlink()
    proc = pytest_harness(
        project, "alone", "-n", "2", "-p", "crash_gw0", "--max-worker-restart", "0", env=env
    )
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-3000:]
    merged = read_report((project / "alone" / "latest").resolve())
    unreported = sorted(m.name for m in merged.missing if m.cause == "not_reported")
    # the dead worker's batch, every case of the kind it died in, never reported (the other
    # worker's may be too, where the shutdown reached it before it ran its batch)
    died = re.search(r"crashed while running ::(\w+)/", proc.stdout)
    assert died is not None and merged.shard is not None, proc.stdout[-3000:]
    planned = {f"{c.kind}/{c.id}[{c.platform}]": c.kind for c in merged.shard.planned()}
    batch = {name for name, kind in planned.items() if kind == died[1]}
    assert len(planned) == 13 and batch <= set(unreported) <= set(planned), merged.missing
    said = next(x for x in proc.stdout.splitlines() if "harness: no xdist worker reported" in x)
    assert all(n in said for n in unreported), said


def test_a_test_of_the_session_s_own_that_kills_its_xdist_worker_stays_a_failure(
    tmp_path: Path,
) -> None:
    """The plugin is loaded in every pytest session where it is installed: a test that is not
    a case and kills its xdist worker (a segfault of its own) is a failure, exit 1, not the
    harness's fault, and such a session keeps xdist's own scheduling (which runs the test that
    crashed once, where the plugin's case batches would hand it to each replacement worker)."""
    (tmp_path / "test_dies.py").write_text(
        "import os\n\ndef test_dies():\n    os._exit(9)\n\ndef test_lives():\n    pass\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "test_dies.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "crashed while running 'test_dies.py::test_dies'" in proc.stdout
    assert re.search(r"=+ 1 failed, 1 passed in ", proc.stdout), proc.stdout[-2000:]
    assert "harness:" not in proc.stdout
