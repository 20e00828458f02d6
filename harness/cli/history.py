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
