"""``harness merge``: join the reports of a sharded run into one run folder, checking coverage."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.errors import InputError, UsageError
from harness.model import RunReport, exit_code
from harness.report.merge import write_merged
from harness.report.shard_io import read_shard_reports

MERGE_EXAMPLE = """\
examples:
  harness merge artifacts/shard-1 artifacts/shard-2 artifacts/shard-3 --out reports/merged
  harness merge artifacts/ --out reports/merged     # every run folder directly under artifacts/

Every planned case must have a result on some shard; one that has none is listed as missing
with the reason (shard report not found, not run after --fail-fast, not reported), and the
exit code counts it: 3 when a shard's report is absent or lacks a case, 1 after --fail-fast.
Shards must come from one plan (same plan digest and nonce: `--plan-nonce`, or the CI run's id)
and one commit (same git tree hash of the code under test); a shard that does not is refused,
naming its folder and what differed (exit 2: a stale input, not a harness fault).
"""


def add_parser(sub: Any) -> None:
    merge = sub.add_parser(
        "merge",
        help="merge shard reports (harness run --shard i/N) into one run folder",
        description="Merge shard reports into one report.json (and its junit.xml, summary.md "
        "and other renderings) and check that every planned case ran on some shard.",
        epilog=MERGE_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    merge.add_argument(
        "dirs",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="a shard's run folder (or its report.json), or a folder of shard run folders",
    )
    merge.add_argument(
        "--out", type=Path, required=True, metavar="DIR", help="the merged run folder (new)"
    )
    merge.set_defaults(func=main)


def _report_paths(dirs: list[Path]) -> list[Path]:
    """The report.json files given: each DIR is a run folder, a report.json, or a folder whose
    run folders (direct children holding a report.json; ``latest`` links left out) are shards."""
    out: list[Path] = []
    for d in dirs:
        if d.is_file():
            out.append(d)
        elif (d / "report.json").is_file():
            out.append(d / "report.json")
        elif d.is_dir():
            found = sorted(
                c / "report.json"
                for c in d.iterdir()
                if c.is_dir() and not c.is_symlink() and (c / "report.json").is_file()
            )
            if not found:
                raise InputError(
                    f"{d}: no report.json in it or in any folder directly under it; expected a "
                    "shard's run folder (harness run --shard i/N --out ...)"
                )
            out.extend(found)
        else:
            raise InputError(f"{d}: no such folder or report.json")
    unique = list(dict.fromkeys(p.resolve() for p in out))
    return [Path(p) for p in unique]


def main(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out}: exists and is not an empty folder; pick a new folder")
    return merge_into(_report_paths(args.dirs), out)


def merge_into(paths: list[Path], out: Path) -> int:
    """Merge the shard reports at ``paths`` into the new run folder ``out``; print what was
    merged and what is missing; the exit code of the merged report."""
    shards: list[tuple[Path, RunReport]] = []
    for path, report in zip(paths, read_shard_reports(paths), strict=True):
        shards.append((path.parent, report))
        print(f"read {path}", file=sys.stderr)
    merged, copied = write_merged(
        shards, out, run_id=out.resolve().name or "merged", argv=tuple(sys.argv)
    )
    info = merged.shard
    assert info is not None
    counts = {k: v for k, v in merged.counts().items() if v}
    present = sorted(m.index for m in merged.merged_from)
    print(
        f"{out}: {len(present)} of {info.count} shard(s) ({', '.join(map(str, present))}), "
        + (", ".join(f"{v} {k}" for k, v in counts.items()) or "no cases")
        + (f", {len(merged.missing)} missing" if merged.missing else "")
        + f"; {copied} output file(s) copied",
        file=sys.stderr,
    )
    for c in merged.cases:
        if c.status not in ("passed", "skipped"):
            print(f"  {c.status:8} {c.name}: {c.reason or ''}", file=sys.stderr)
    for m in merged.missing:
        print(f"  missing  {m.name}: {m.reason}", file=sys.stderr)
    for fault in merged.infra_errors:
        print(f"  harness  {fault}", file=sys.stderr)
    return exit_code(merged)
