"""``harness baselines propose``: latency budgets for a runner class from its history.

The rule is SGLang's for its hand-kept baselines, made mechanical: a stage is budgeted from at
least ``min_runs`` recent green runs (the case passed, not flaky) whose medians agree (max/min
at most ``max_spread``, 1.25; taken from the newest back while they agree, so that a window
never straddles a step); the budget is their largest median times (1 + a relative
tolerance) plus an absolute pad, both per stage kind (the first ``Rule`` whose glob matches the
stage name), rounded up to two significant digits, and commented with the run ids it came from.
An existing budget is lowered when the data allow it, never raised unless asked
(``allow_raise`` with a reason, which the comment records); what would have been raised is
listed with why. The result is the profile's text with ``[budgets.<case>]`` edited in place
(comments and everything else kept), to be shown as a diff and reviewed.

Example::

    plan = propose(db, load_profile(Path("runners/cpu.toml")))
    print(plan.diff())
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import math
import re
import sqlite3
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from harness.errors import InputError
from harness.history.series import Group, groups, runs_of
from harness.platforms.profile import Profile

__all__ = ["Plan", "Proposal", "Rule", "Settings", "apply_to_text", "propose"]


@dataclass(frozen=True)
class Rule:
    """Tolerance for the stages whose name matches ``pattern`` (a glob)."""

    pattern: str
    rel: float
    pad_s: float

    @classmethod
    def parse(cls, text: str) -> Rule:
        """``GLOB=REL,PAD`` (``Load*=0.5,0.05``)."""
        m = re.fullmatch(r"([^=]+)=([0-9.eE+-]+),([0-9.eE+-]+)", text.strip())
        if not m:
            raise InputError(
                f"--tolerance {text!r}: expected GLOB=REL,PAD, e.g. 'Load*=0.5,0.05' (relative "
                "tolerance, absolute pad in seconds)"
            )
        rel, pad = float(m[2]), float(m[3])
        if not (0 <= rel < 100 and 0 <= pad < 3600):
            raise InputError(f"--tolerance {text!r}: expected 0 <= REL < 100 and 0 <= PAD")
        return cls(m[1], rel, pad)


@dataclass(frozen=True)
class Settings:
    runs: int = 5  # at most this many of the newest green runs
    min_runs: int = 3
    max_spread: float = 1.25
    min_seconds: float = 0.01  # stages whose median is below this are not budgeted
    rules: tuple[Rule, ...] = (Rule("*", 0.10, 0.005),)
    allow_raise: bool = False
    reason: str = ""


@dataclass(frozen=True)
class Proposal:
    case_id: str
    stage: str
    value: float
    runs: tuple[str, ...]
    largest: float
    rule: Rule
    existing: float | None
    action: str  # "add" | "lower" | "raise" | "keep" | "would_raise"

    def comment(self, today: str, reason: str) -> str:
        text = (
            f"proposed {today} from {', '.join(self.runs)}: largest median "
            f"{self.largest:.4g} s x {1 + self.rule.rel:g} + {self.rule.pad_s:g} s"
        )
        if self.action == "raise":
            text += f"; raised from {self.existing:g}: {reason}"
        return text


@dataclass
class Plan:
    profile: Path
    old: str
    new: str
    proposals: list[Proposal] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def diff(self) -> str:
        name = self.profile.as_posix()
        return "".join(
            difflib.unified_diff(
                self.old.splitlines(keepends=True),
                self.new.splitlines(keepends=True),
                fromfile=f"a/{name}",
                tofile=f"b/{name}",
            )
        )

    @property
    def would_raise(self) -> list[Proposal]:
        return [p for p in self.proposals if p.action == "would_raise"]


def round_up(x: float, digits: int = 2) -> float:
    """``x`` rounded up to ``digits`` significant digits (0.9812 -> 0.99)."""
    if x <= 0:
        return 0.0
    scale = 10 ** (digits - 1 - math.floor(math.log10(x)))
    return math.ceil(x * scale - 1e-9) / scale


def _rule(stage: str, rules: tuple[Rule, ...]) -> Rule:
    return next((r for r in rules if fnmatch.fnmatchcase(stage, r.pattern)), Rule("*", 0.10, 0.005))


def _group(db: sqlite3.Connection, profile: Profile) -> Group:
    mine = [g for g in groups(db) if g.runner == profile.name]
    if not mine:
        known = sorted({g.runner for g in groups(db)})
        raise InputError(
            f"--runner {profile.name}: no run of that runner class in the history "
            f"(runner classes there: {', '.join(known) or 'none'})"
        )
    # several host platforms for one runner class: the one with the most runs
    return max(mine, key=lambda g: len(runs_of(db, g)))


def propose(db: sqlite3.Connection, profile: Profile, settings: Settings | None = None) -> Plan:
    settings = settings or Settings()
    path = Path(profile.source) if profile.source else Path(f"runners/{profile.name}.toml")
    try:
        old = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the runner profile: {exc}") from None
    group = _group(db, profile)
    runs = runs_of(db, group)
    order = {r.pk: i for i, r in enumerate(runs)}
    ids = {r.pk: r.run_id for r in runs}
    plan = Plan(path, old, old)
    suffix = f"[{profile.platform}]"
    names = [
        (n, cid)
        for n, cid in db.execute("SELECT DISTINCT name, case_id FROM cases ORDER BY name")
        if n.endswith(suffix)
    ]
    for name, case_id in names:
        green = sorted(
            (
                pk
                for (pk,) in db.execute(
                    "SELECT run FROM cases WHERE name = ? AND status = 'passed' AND flaky = 0",
                    (name,),
                )
                if pk in order
            ),
            key=order.__getitem__,
        )[-settings.runs :]
        if len(green) < settings.min_runs:
            plan.skipped.append(
                f"{case_id}: {len(green)} green run(s) on {group.label}, fewer than "
                f"{settings.min_runs}: nothing proposed"
            )
            continue
        marks = ",".join("?" * len(green))
        per_stage: dict[str, dict[int, float]] = {}
        for pk, stage, median in db.execute(
            f"SELECT run, stage, median FROM stages WHERE name = ? AND run IN ({marks})",
            (name, *green),
        ):
            per_stage.setdefault(stage, {})[pk] = median
        for stage, by_run in per_stage.items():
            if stage == "total":
                continue  # budgets are per stage
            existing = profile.budgets.get(case_id, {}).get(stage)
            newest = [(pk, by_run[pk]) for pk in reversed(green) if pk in by_run]
            # the newest green runs that agree: from the newest back while max/min holds (a
            # step in the history ends the window: a budget never straddles it)
            taken: list[tuple[int, float]] = []
            for pk, v in newest:
                vals = [x for _p, x in taken] + [v]
                if v <= 0 or max(vals) / min(vals) > settings.max_spread:
                    break
                taken.append((pk, v))
            if len(taken) < settings.min_runs:
                if len(newest) >= settings.min_runs or existing is not None:
                    head = [v for _p, v in newest[: settings.min_runs]]
                    lo_, hi_ = min(head), max(head)
                    spread = hi_ / lo_ if lo_ > 0 else math.inf
                    plan.skipped.append(
                        f"{case_id} {stage}: the newest {len(head)} green runs' medians spread "
                        f"{spread:.2f}x (> {settings.max_spread:g}; {lo_:.4g}-{hi_:.4g} s): not "
                        "stable, nothing proposed"
                    )
                continue
            taken.reverse()
            vals = [v for _p, v in taken]
            hi = max(vals)
            if hi < settings.min_seconds and existing is None:
                continue  # too small to budget on this runner
            rule = _rule(stage, settings.rules)
            value = round_up(hi * (1 + rule.rel) + rule.pad_s)
            if existing is None:
                action = "add"
            elif math.isclose(value, existing):
                action = "keep"
            elif value < existing:
                action = "lower"
            else:
                action = "raise" if settings.allow_raise else "would_raise"
            plan.proposals.append(
                Proposal(
                    case_id,
                    stage,
                    value,
                    tuple(ids[pk] for pk, _v in taken),
                    hi,
                    rule,
                    existing,
                    action,
                )
            )
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    plan.new = apply_to_text(old, plan.proposals, today, settings.reason)
    _verify(path, plan)
    return plan


_HEADER = re.compile(r"^\s*\[\s*budgets\s*\.\s*(?P<key>\"(?:[^\"\\]|\\.)*\"|[A-Za-z0-9_-]+)\s*\]")
_TABLE = re.compile(r"^\s*\[")


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _case_of(m: re.Match[str]) -> str:
    key = m["key"]
    return str(json.loads(key)) if key.startswith('"') else key


def apply_to_text(old: str, proposals: list[Proposal], today: str, reason: str) -> str:
    """``old`` with each written proposal (add, lower, raise) set in its ``[budgets.<case>]``
    table: a stage's line replaced, or added after the table's last key, or a new table at
    the end. Everything else, comments included, is kept."""
    lines = old.splitlines()
    todo: dict[str, list[Proposal]] = {}
    for p in proposals:
        if p.action in ("add", "lower", "raise"):
            todo.setdefault(p.case_id, []).append(p)
    for case_id, props in todo.items():
        start = next(
            (
                i
                for i, ln in enumerate(lines)
                if (m := _HEADER.match(ln)) and _case_of(m) == case_id
            ),
            None,
        )
        if start is None:
            if lines and lines[-1].strip():
                lines.append("")
            lines.append(f"[budgets.{_key(case_id)}]")
            start = len(lines) - 1
        end = next((i for i in range(start + 1, len(lines)) if _TABLE.match(lines[i])), len(lines))
        for p in props:
            new_line = f"{_key(p.stage)} = {p.value:g}  # {p.comment(today, reason)}"
            pat = re.compile(rf"^\s*(?:{re.escape(p.stage)}|{re.escape(json.dumps(p.stage))})\s*=")
            at = next((i for i in range(start + 1, end) if pat.match(lines[i])), None)
            if at is not None:
                lines[at] = new_line
                continue
            last_key = max(
                (i for i in range(start + 1, end) if lines[i].strip() and "=" in lines[i]),
                default=start,
            )
            lines.insert(last_key + 1, new_line)
            end += 1
    return "\n".join(lines) + ("\n" if old.endswith("\n") or not old else "")


def _verify(path: Path, plan: Plan) -> None:
    """The edited text is valid TOML and budgets exactly what was proposed."""
    try:
        data = tomllib.loads(plan.new)
    except tomllib.TOMLDecodeError as exc:  # a profile layout this editor does not follow
        raise InputError(
            f"{path}: could not write the proposal into this file's layout ({exc}); "
            "apply the proposed values by hand"
        ) from None
    budgets = data.get("budgets", {})
    for p in plan.proposals:
        if (
            p.action in ("add", "lower", "raise")
            and budgets.get(p.case_id, {}).get(p.stage) != p.value
        ):
            raise InputError(
                f"{path}: could not set budgets.{p.case_id}.{p.stage} in this file's layout; "
                f"apply {p.value:g} by hand"
            )
