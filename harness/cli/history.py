"""``harness history ingest|check|site``: main's runs in an embedded database, change points
over commits, and a static site.

Exit codes: ingest 0, or 2 when a folder was refused (the others are still ingested); check 1
when a new regression appeared; 2 bad input; 3 a harness fault.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

HISTORY_EXAMPLE = """\
examples:
  harness history ingest reports/merged-* --db history.db
  harness history check --db history.db              # the change points of the last ingest
  harness history check --db history.db --since 3f2a9c1
  harness history site --db history.db --out site/
"""

INGEST_EXAMPLE = """\
A run folder holds report.json (a plain run, or the merged run of a sharded one); any other
folder is searched one level down. Each run is ingested in its own transaction: a corrupt or
half-written folder, a shard report, an interrupted run is refused by name (exit 2) and every
other run is still ingested. A run id already in the database is skipped.

example:
  harness history ingest reports/ ci-artifacts/merged --db history.db
"""


def add_parser(sub: Any) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser(
        "history",
        help="ingest runs into a history database; change points; a static site",
        description="Main's history: every case, stage and check over commits, per runner "
        "class and platform.",
        epilog=HISTORY_EXAMPLE,
        formatter_class=raw,
    )
    p.set_defaults(func=lambda _args: _no_subcommand(p))
    hsub = p.add_subparsers(dest="history_command", metavar="SUBCOMMAND")
    ing = hsub.add_parser(
        "ingest",
        help="add run folders to the database",
        description="Add run folders (plain or merged runs) to the history database.",
        epilog=INGEST_EXAMPLE,
        formatter_class=raw,
    )
    ing.add_argument("folders", nargs="+", type=Path, metavar="RUN_OR_MERGED_DIR")
    _db_arg(ing)
    ing.add_argument("-q", "--quiet", action="store_true", help="only refusals and the total")
    ing.set_defaults(func=main_ingest)

    chk = hsub.add_parser(
        "check",
        help="print the new change points (exit 1 on a new regression)",
        description="Detect change points per series (case x stage latency, case x check "
        "value, case pass rate; per runner class and platform) and print the new ones.",
        epilog=CHECK_EXAMPLE,
        formatter_class=raw,
    )
    _db_arg(chk)
    chk.add_argument(
        "--since",
        metavar="REV",
        help="new = runs after the last run of this commit (or prefix) or run id "
        "(default: the runs of the latest ingest)",
    )
    _detect_args(chk)
    chk.add_argument(
        "--context",
        type=int,
        default=60,
        metavar="N",
        help="runs before the new ones analysed with them (default 60)",
    )
    chk.set_defaults(func=main_check)

    site = hsub.add_parser(
        "site",
        help="write the history as static HTML",
        description="Write index.html (latest change points first, a sparkline per series) "
        "and a page per case under --out: self-contained, no script, no network.",
        epilog=SITE_EXAMPLE,
        formatter_class=raw,
    )
    _db_arg(site)
    site.add_argument("--out", type=Path, required=True, metavar="DIR", help="site folder")
    site.add_argument(
        "--last",
        type=int,
        default=200,
        metavar="N",
        help="runs drawn and analysed per runner class, newest last (default 200; 0: all)",
    )
    _detect_args(site)
    site.add_argument("-q", "--quiet", action="store_true")
    site.set_defaults(func=main_site)


CHECK_EXAMPLE = """\
Change points come from Apache Otava (E-Divisive means, t-test significance): each with its
commit range, its size (latency: the ratio of the two segments' geometric means) and p-value,
where both sides recorded fingerprints the first input or stage fingerprint that differs, and
the harness bisect command that would pin it. New: the first run after the step is new, and
its p-value meets --max-pvalue divided by the number of series analysed (Bonferroni). A
regression: slower latency by at least --min-step, a lower pass rate, a check value moved
toward its threshold, with at least --min-after runs after the step.
exit codes: 0 no new regression; 1 a new regression; 2 bad input.

example:
  harness history check --db history.db --since main~20
"""


SITE_EXAMPLE = """\
Links to run folders are relative to --out: publish the site beside the run folders (or open
it where it was written).

example:
  harness history site --db history.db --out site/ --last 500
"""


def _detect_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--max-pvalue", type=float, default=0.001, metavar="P", help="significance (0.001)"
    )
    p.add_argument(
        "--min-step",
        type=float,
        default=0.02,
        metavar="FRACTION",
        help="smallest latency step that is a regression (default 0.02)",
    )
    p.add_argument(
        "--min-after",
        type=int,
        default=2,
        metavar="N",
        help="runs after a step before it counts (default 2)",
    )


def _settings(args: argparse.Namespace) -> Any:
    from harness.errors import UsageError
    from harness.history.detect import Settings

    if not 0 < args.max_pvalue < 1:
        raise UsageError(f"--max-pvalue {args.max_pvalue}: expected a probability in (0, 1)")
    if args.min_step < 0 or args.min_after < 1:
        raise UsageError("--min-step must be >= 0 and --min-after >= 1")
    return Settings(max_pvalue=args.max_pvalue, min_step=args.min_step, min_after=args.min_after)


def _db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db", type=Path, required=True, metavar="PATH", help="the history database (SQLite)"
    )


def _no_subcommand(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return 2


def main_ingest(args: argparse.Namespace) -> int:
    from harness.history.db import open_db
    from harness.history.ingest import ingest

    say = (lambda _l: None) if args.quiet else print
    with contextlib.closing(open_db(args.db)) as db:
        out = ingest(db, args.folders, say=say)
    for line in out.refused:
        print(f"error: refused {line}", file=sys.stderr)
    print(
        f"{args.db}: {len(out.added)} run(s) ingested, {len(out.skipped)} already there, "
        f"{len(out.refused)} refused"
    )
    return 2 if out.refused else 0


def main_check(args: argparse.Namespace) -> int:
    from harness.errors import UsageError
    from harness.history.check import check, render
    from harness.history.db import open_db

    settings = _settings(args)
    with contextlib.closing(open_db(args.db, create=False)) as db:
        if args.context < 4:
            raise UsageError(f"--context {args.context}: expected at least 4 runs")
        report = check(db, since=args.since, settings=settings, context=args.context)
    print(render(report))
    return 1 if report.regressions else 0


def main_site(args: argparse.Namespace) -> int:
    from harness.cli.usage import writable_folder
    from harness.history.db import open_db
    from harness.history.site import build_site

    settings = _settings(args)
    writable_folder("--out", args.out)
    say = (lambda _l: None) if args.quiet else (lambda line: print(line, file=sys.stderr))
    with contextlib.closing(open_db(args.db, create=False)) as db:
        out = build_site(
            db, args.out, last=max(args.last, 0), settings=settings, db_label=str(args.db), say=say
        )
    print(
        f"{args.out}/index.html: {out.pages} page(s), {out.series} series, "
        f"{out.change_points} change point(s), {out.bytes / 1e6:.1f} MB"
    )
    return 0
