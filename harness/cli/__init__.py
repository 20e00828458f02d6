"""The ``harness`` command line: one module per command, each with ``add_parser`` and ``main``.

Exit codes: 0 all passed; 1 a check or case failed, or a regression or new failure was found;
2 usage or input error; 3 infrastructure error or an incomplete run; 5 nothing ran;
7 only flaky results.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence

from harness.cli import (
    baselines,
    bisect,
    compare,
    completion,
    dispatch,
    explain,
    history,
    init,
    merge,
    plan,
    platforms,
    refs,
    report,
    run,
)
from harness.errors import HarnessError

EXAMPLES = """\
examples:
  harness run                                  # every case in cases/ on this runner's platform
  harness run cases/pipeline -k "int8 and not ref" --repeats 3
  harness compare --base main --head HEAD -k t2va-int8
  harness explain reports/latest               # red cases, most likely head's first
  harness plan cases/ -k loader
  harness plan --shards 4 --durations reports/latest   # then: harness run --shard 2/4 ...
  harness merge shard-*/ --out reports/merged
  harness dispatch --ray http://127.0.0.1:8265 --shards 4 --out /shared/runs   # Ray jobs
  harness refs verify
  harness platforms --runner mi300x            # what this machine has; does the profile fit
  harness history ingest reports/ --db history.db   # main's history; then check, site
  harness baselines propose --db history.db --runner cpu
  harness init mystack                         # scaffold cases for your own stack in mystack/
  harness completion bash                      # shell completion for these commands
  harness --version
"""


def version() -> str:
    """The installed distribution's version; the package's own where it is not installed
    (a source tree on ``PYTHONPATH``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("harness")
    except PackageNotFoundError:
        from harness import __version__

        return __version__


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line and exit 2, like every other input error."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="harness",
        description="CI regression and platform validation harness for diffusion and "
        "video-generation inference stacks.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"harness {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    modules = (run, compare, explain, bisect, plan, report, merge, dispatch, platforms, init)
    for module in (*modules, history, baselines):
        module.add_parser(sub)
    refs.add_parser(sub)
    completion.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "refs":
            return int(refs.main_refs(args))
        return int(args.func(args))
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        # Commands that own a long run catch Ctrl-C themselves and write what finished; one
        # that reaches here was interrupted before or after its work: incomplete, never 1.
        print(f"harness {args.command}: interrupted (exit 3)", file=sys.stderr)
        return 3
    except Exception:
        # A harness bug is infrastructure, never a finding: exit 1 would read as a regression.
        # What the command finished is already on disk (writers run in `finally` blocks).
        traceback.print_exc(file=sys.stderr)
        print(
            f"harness {args.command}: internal error (a harness bug, not a finding about the "
            "code under test); traceback above (exit 3)",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(main())
