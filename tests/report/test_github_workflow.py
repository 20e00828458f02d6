"""The example GitHub Actions workflow (runners/ci/github-actions.yml) cannot rot: it parses,
its jobs are wired as the README says, and every `harness` command in it is accepted by the
real argument parser of the CLI."""

from __future__ import annotations

import argparse
import fnmatch
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

import harness
from harness.cli import build_parser

REPO = Path(harness.__file__).resolve().parent.parent
WORKFLOW = REPO / "runners" / "ci" / "github-actions.yml"

# Sample values for the expressions the workflow uses; a new expression must be added here.
EXPRESSIONS = {
    "matrix.profile": "cpu",
    "matrix.shard": "2",
    "env.SHARDS": "4",
    "github.workflow": "harness",
    "github.ref": "refs/pull/42/merge",
    "github.event_name == 'pull_request'": "true",
    "github.event.pull_request.base.sha": "0123456789abcdef0123456789abcdef01234567",
    "github.event.pull_request.number": "42",
    "github.token": "ghs_sample",
    "github.run_id": "1234567890",
    "!cancelled() && github.event_name == 'schedule'": "true",
    "!cancelled()": "true",
}
# Commands of issue #10 part 4 (branch shard-merge): until the CLI has them, their check is an
# expected failure that says so; once it does, they are parsed like every other command.
PENDING = {
    ("plan", "--shards"): "harness plan --shards N",
    ("run", "--shard"): "harness run --shard i/N",
    ("merge", None): "harness merge DIR... --out DIR",
}


def _doc() -> dict[str, Any]:
    doc = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert isinstance(doc, dict), WORKFLOW
    return doc


def _expand(text: str, env: dict[str, str]) -> str:
    def expression(m: re.Match[str]) -> str:
        expr = m.group(1).strip()
        if expr not in EXPRESSIONS:
            raise AssertionError(f"{WORKFLOW.name}: no sample value for ${{{{ {expr} }}}}")
        return EXPRESSIONS[expr]

    text = re.sub(r"\$\{\{(.*?)\}\}", expression, text)
    return re.sub(r"\$\{?([A-Z_]+)\}?", lambda m: env.get(m.group(1), m.group(0)), text)


def _commands() -> list[tuple[str, list[str]]]:
    """(job/step, argv after `harness`) for every harness command in a `run:` script."""
    doc = _doc()
    env = {k: str(v) for k, v in doc.get("env", {}).items()}
    found = []
    for job_name, job in doc["jobs"].items():
        for step in job["steps"]:
            if "run" not in step:
                continue
            # the values a script reads come through env: (never ${{ }} inside `run:`)
            local = {**env, **{k: _expand(str(v), env) for k, v in step.get("env", {}).items()}}
            assert "${{" not in step["run"], f"{job_name}: ${{{{ }}}} inside run: {step['run']}"
            script = _expand(step["run"], local)
            for line in script.replace("\\\n", " ").splitlines():
                lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
                lexer.whitespace_split = True
                words = list(lexer)
                segment: list[str] = []
                for word in [*words, ";"]:
                    if word in ("|", "||", "&&", ";", ">", ">>"):
                        if segment[:1] == ["harness"]:
                            found.append((f"{job_name}: {step.get('name', '')}", segment[1:]))
                        segment = [] if word != ">" and word != ">>" else ["<redirect>"]
                    else:
                        segment.append(word)
    return found


def _subparser(name: str) -> argparse.ArgumentParser | None:
    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices.get(name)
    return None


def _pending(argv: list[str]) -> str | None:
    """What of issue #10 part 4 the command needs that this CLI does not have yet, or None."""
    sub = _subparser(argv[0])
    for (command, option), what in PENDING.items():
        if argv[0] != command:
            continue
        if sub is None or (
            option is not None and option in argv and option not in sub._option_string_actions
        ):
            return what
    return None


def test_the_workflow_runs_harness_commands() -> None:
    commands = [argv[0] for _, argv in _commands()]
    assert {"plan", "run", "merge", "compare", "history"} <= set(commands), commands


def test_the_nightly_history_job_ingests_main_checks_and_publishes_the_site() -> None:
    doc = _doc()
    on = doc.get("on", doc.get(True))
    assert on["schedule"][0]["cron"]
    job = doc["jobs"]["history"]
    assert job["needs"] == "merge" and "github.event_name == 'schedule'" in job["if"]
    runs = [s.get("run", "") for s in job["steps"]]
    order = [
        next(i for i, r in enumerate(runs) if f"harness history {cmd}" in r)
        for cmd in ("ingest", "check", "site")
    ]
    assert order == sorted(order)
    check = next(s for s in job["steps"] if "harness history check" in s.get("run", ""))
    assert check.get("shell") == "bash"  # pipefail: the exit code survives `| tee`
    assert any("--no-deps apache-otava" in r for r in runs)
    # this run's merged report, and the database restored and saved under one key
    download = next(s for s in job["steps"] if "download-artifact" in s.get("uses", ""))
    assert download["with"]["name"] == doc["jobs"]["merge"]["steps"][-1]["with"]["name"]
    restore = next(s for s in job["steps"] if "cache/restore" in s.get("uses", ""))
    save = next(s for s in job["steps"] if "cache/save" in s.get("uses", ""))
    assert restore["with"]["path"] == save["with"]["path"] == "history.db"
    site = next(s for s in job["steps"] if "upload-artifact" in s.get("uses", ""))
    assert "site/" in site["with"]["path"] and "!cancelled()" in site["if"]


@pytest.mark.parametrize(
    ("where", "argv"), _commands(), ids=lambda x: " ".join(x) if isinstance(x, list) else x
)
def test_every_harness_command_parses(where: str, argv: list[str]) -> None:
    missing = _pending(argv)
    if missing is not None:
        pytest.xfail(f"{missing} lands with branch shard-merge (issue #10 part 4)")
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"{WORKFLOW.name} ({where}): harness {shlex.join(argv)}") from exc
    assert args.command == argv[0] and callable(args.func)
    runner = getattr(args, "runner", None)
    if runner is not None:
        assert (REPO / "runners" / f"{runner}.toml").is_file(), f"no runner profile {runner}"


def test_the_jobs_are_wired_plan_shards_merge_compare() -> None:
    doc = _doc()
    on = doc.get("on", doc.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "pull_request" in on
    jobs = doc["jobs"]
    assert list(jobs) == ["plan", "shard", "merge", "compare", "history"]
    shard = jobs["shard"]
    assert shard["needs"] == "plan"
    strategy = shard["strategy"]
    assert strategy["fail-fast"] is False
    matrix = strategy["matrix"]
    assert matrix["shard"] == list(range(1, int(doc["env"]["SHARDS"]) + 1))
    for profile in matrix["profile"]:
        assert (REPO / "runners" / f"{profile}.toml").is_file(), profile
    assert {i["profile"]: i["runs-on"] for i in matrix["include"]}["cpu"] == "ubuntu-latest"
    assert shard["runs-on"] == "${{ matrix.runs-on }}"
    # the commented self-hosted accelerator runners name profiles that exist
    text = WORKFLOW.read_text(encoding="utf-8")
    for profile in ("h100", "mi300x"):
        assert re.search(rf"#\s*- profile: {profile}\n\s*#\s*runs-on: \[self-hosted", text)
        assert (REPO / "runners" / f"{profile}.toml").is_file()
    # every shard uploads its run folder, passed or not; merge downloads exactly those
    upload = next(s for s in shard["steps"] if "upload-artifact" in s.get("uses", ""))
    assert "cancelled()" in upload["if"]
    name = _expand(upload["with"]["name"], {})
    merge = jobs["merge"]
    assert merge["needs"] == "shard" and "!cancelled()" in merge["if"]
    download = next(s for s in merge["steps"] if "download-artifact" in s.get("uses", ""))
    assert fnmatch.fnmatch(name, download["with"]["pattern"])
    merge_cmd = next(s["run"] for s in merge["steps"] if "harness merge" in s.get("run", ""))
    assert merge_cmd.split()[2].startswith(download["with"]["path"])
    merged = next(s for s in merge["steps"] if "upload-artifact" in s.get("uses", ""))
    assert merged["with"]["path"].rstrip("/") == merge_cmd.split("--out")[1].split()[0]
    # compare only when the suite failed on a pull request, with the whole history
    compare = jobs["compare"]
    assert "shard" in compare["needs"] and "failure()" in compare["if"]
    assert "pull_request" in compare["if"]
    checkout = next(s for s in compare["steps"] if "checkout" in s.get("uses", ""))
    assert checkout["with"]["fetch-depth"] == 0
    step = next(s for s in compare["steps"] if "harness compare" in s.get("run", ""))
    assert '--base "$BASE_SHA"' in step["run"]
    assert step["env"]["BASE_SHA"] == "${{ github.event.pull_request.base.sha }}"
    # the shard's index and count reach `--shard auto` from the matrix, as docs say
    run = next(s for s in shard["steps"] if "harness run" in s.get("run", ""))
    assert "--shard auto" in run["run"]
    assert run["env"]["HARNESS_SHARD_INDEX"] == "${{ matrix.shard }}"
    assert run["env"]["HARNESS_SHARD_COUNT"] == "${{ env.SHARDS }}"
