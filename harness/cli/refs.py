"""``harness refs bless|verify``: the command-line face of the reference store.

Exit codes: 0 ok; 1 ``verify`` found problems; 2 bad input, or ``bless`` refused.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.errors import HarnessError

if TYPE_CHECKING:
    from harness.model import RunReport

__all__ = ["add_parser", "bless_hints", "main_refs"]

# The reason the printed first-bless command records in the manifest (edit it before running).
FIRST_REASON = "first reference"

REFS_EXAMPLE = """\
examples:
  harness refs verify
  harness refs bless --run reports/20260101-120000 --case t2va-int8 --reason "new VAE tiling"
"""

BLESS_EXAMPLE = """\
Pins the outputs of the last passing measured attempt of each case (or of --case) as the
references of that case: video frames as PNG, audio as float32 WAV, tensors as safetensors;
file outputs such as MP4 are not stored. With no passing attempt it takes the last one that
failed only its quality checks, as every attempt does before the first bless, but only for
outputs that have no reference yet on the lookup chain.

Always refused (--force does not help): a simulated result ("a simulated <platform> result
can never be a reference"); an output file whose content no longer matches the hash its
attempt recorded (a run folder changed after the run); NaN/Inf outputs, blank frames, silent
audio.
Refused unless --force: a case whose case-level checks failed (identical_outputs, latency
budgets); an output whose attempt failed its own quality checks while a reference exists; an
output that drifts from the reference the lookup chain uses now (with --platform-class
mi300x and only `any` pinned: the `any` one). Drift is judged by re-running each of the
attempt's quality checks against that reference with the case's own op and threshold, with
built-in bounds as a floor (worst-frame mean abs diff > 8, SSIM < 0.9, audio SNR < 20 dB,
tensor max abs diff > 1 % of range, any shape change).
Case ids become folder names through an injective slug that never leaves the store; a
replaced reference's files are deleted only when no other entry lists them. Nothing else ever
writes the reference store.
From the same attempt it also pins the layered reference: the input hashes and every
fingerprinted intermediate (whole up to 256 values, else a 256-value sample and statistics),
which a run whose quality check fails (or `harness run --explain`) is compared with, layer by
layer (docs/triage.md). A run recorded without intermediates pins its outputs alone.

examples:
  harness refs bless --run reports/20260101-120000 --case t2va-int8 \\
      --reason "scheduler change #123 shifts frames slightly"
  harness refs bless --run reports/latest --platform-class mi300x --force \\
      --reason "ROCm 6.3 conv kernels: pinned per runner"
"""

VERIFY_EXAMPLE = """\
Checks every file in the manifest exists, matches its SHA-256 and lies in its entry's own
folder (<reference>/<platform class>/<output>/<content id>/, never outside the store), and
lists files on disk that the manifest does not know. Exit 1 when anything is wrong.

example:
  harness refs verify --references references/
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``refs`` (with ``bless`` and ``verify``) to the main CLI's subparsers."""
    raw = argparse.RawDescriptionHelpFormatter
    refs = subparsers.add_parser(
        "refs",
        help="bless or verify pinned reference outputs",
        description="Manage the reference store (references/): bless is its only writer.",
        epilog=REFS_EXAMPLE,
        formatter_class=raw,
    )
    sub = refs.add_subparsers(dest="refs_command", metavar="SUBCOMMAND")

    bless = sub.add_parser(
        "bless",
        help="pin a run's outputs as references",
        description="Pin a run's outputs as references.",
        epilog=BLESS_EXAMPLE,
        formatter_class=raw,
    )
    bless.add_argument(
        "--run",
        required=True,
        type=Path,
        metavar="DIR",
        help="run folder holding report.json and the outputs",
    )
    bless.add_argument("--case", metavar="ID", help="bless only this case (default: every case)")
    bless.add_argument(
        "--force",
        action="store_true",
        help="bless even when the output drifts beyond the bounds, failed its own quality "
        "checks against an existing reference, or its case failed a case-level check "
        "(never a simulated result or a changed run file)",
    )
    bless.add_argument(
        "--reason",
        metavar="TEXT",
        help="why these outputs are right (required; recorded in the manifest)",
    )
    bless.add_argument(
        "--who", metavar="NAME", help="who blesses (default: $USER, else git config user.name)"
    )
    bless.add_argument(
        "--platform-class",
        default="any",
        metavar="NAME",
        help="pin for this platform class only, e.g. mi300x or hip (default: any)",
    )
    bless.add_argument(
        "--platform",
        metavar="NAME",
        help="which platform's result to take when the run has several",
    )
    _references_arg(bless)

    verify = sub.add_parser(
        "verify",
        help="check every reference file against the manifest",
        description="Check the reference store against its manifest.",
        epilog=VERIFY_EXAMPLE,
        formatter_class=raw,
    )
    _references_arg(verify)
    refs.set_defaults(refs_parser=refs)
    return refs


def _references_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--references",
        type=Path,
        default=Path("references"),
        metavar="DIR",
        help="the reference store (default: references/)",
    )


def main_refs(args: argparse.Namespace) -> int:
    """Run ``harness refs ...``; returns the exit code (0 ok, 1 verify problems, 2 refused/bad)."""
    command = getattr(args, "refs_command", None)
    try:
        if command == "bless":
            return _bless(args)
        if command == "verify":
            return _verify(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    parser = getattr(args, "refs_parser", None)
    if parser is not None:
        parser.print_help(sys.stderr)
    else:
        print("error: say `harness refs bless` or `harness refs verify`", file=sys.stderr)
    return 2


def _bless(args: argparse.Namespace) -> int:
    from harness.cli.usage import writable_folder
    from harness.references.bless import BlessRefusedError, bless

    if not args.reason:
        print("error: bless needs --reason TEXT (recorded in the manifest)", file=sys.stderr)
        return 2
    # bless is the store's only writer: a store it cannot write is refused before any work
    writable_folder("--references", args.references)
    print(f"blessing {args.run} into {args.references} ...", file=sys.stderr, flush=True)
    try:
        summary = bless(
            args.run,
            args.references,
            case_id=args.case,
            force=args.force,
            reason=args.reason,
            who=args.who,
            platform_class=args.platform_class,
            platform=args.platform,
        )
    except BlessRefusedError as exc:
        print(exc.summary.format())
        return 2
    print(summary.format())
    return 0


def _verify(args: argparse.Namespace) -> int:
    from harness.references.store import ReferenceStore

    store = ReferenceStore(args.references)
    problems = store.verify()
    for line in problems:
        print(line)
    try:
        n = len(store.entries)
        files = sum(len(e.files) for e in store.entries.values())
        counts = f"{n} entries, {files} files"
    except HarnessError:
        counts = "manifest unreadable"
    if problems:
        print(f"{len(problems)} problem(s) in {args.references} ({counts})")
        return 1
    print(f"ok: {args.references} ({counts} verified)")
    return 0


def bless_hints(report: RunReport, run_dir: Path, references: Path | None) -> list[str]:
    """For each case that failed only because its outputs have no reference yet, a line with
    the exact command that blesses them, e.g. ``no reference yet; bless with harness refs
    bless --run reports/20261201-101500 --case mystack-t2v --reason 'first reference'``.

    Simulated results are never blessed, so they get no line; ``references`` is the store the
    run was given (None: the default ``references/``, left out of the command).
    """
    from harness.checks.missing import NO_REFERENCE, lacks_reference

    lines = []
    for case in report.cases:
        blocking = [c for c in case.checks if c.blocking]
        if case.simulated or not blocking or not all(map(lacks_reference, blocking)):
            continue
        argv = ["harness", "refs", "bless", "--run", str(run_dir), "--case", case.id]
        if sum(c.id == case.id for c in report.cases) > 1:
            argv += ["--platform", case.platform]
        if references is not None:
            argv += ["--references", str(references)]
        argv += ["--reason", FIRST_REASON]
        lines.append(f"{case.name}: {NO_REFERENCE}; bless with {shlex.join(argv)}")
    return lines
