"""``harness init [PATH]``: scaffold the validation of a new stack in a folder of its own.

Writes, from the templates in ``harness/cli/scaffold/`` (package data):

* ``<stack>_scenarios.py``: the scenario functions the cases call, with the probe calls, over a
  tiny seeded torch model (its safetensors checkpoint is written on first use); the parts to
  swap for the user's own loader, backend and pipeline are marked REPLACE;
* ``cases/{loader,quant,pipeline}/<stack>.toml``: one loader, one quant-dispatch and one
  pipeline case;
* ``runners/cpu.toml``: the runner profile ``harness run`` uses by default;
* ``HARNESS.md``: what each file is and the next commands.

Nothing is overwritten unless ``--force``; an existing file is refused by name before anything
is written. The first ``harness run`` there fails with "no reference yet; bless with <command>",
that command pins the pipeline's frames, and the next run passes.
"""

from __future__ import annotations

import argparse
import keyword
import re
import string
from importlib import resources
from pathlib import Path
from typing import Any

from harness.cli.usage import writable_folder
from harness.errors import UsageError
from harness.fsio import write_text_atomic

__all__ = ["add_parser", "main", "render", "stack_name"]

INIT_EXAMPLE = """\
examples:
  harness init mystack            # then: cd mystack && harness run
  harness init . --name wan22     # in the current folder, files named after wan22
  harness init mystack --force    # rewrite the scaffold's files over an earlier one
"""

# template under harness/cli/scaffold/ -> file it becomes (string.Template over the names)
TEMPLATES: tuple[tuple[str, str], ...] = (
    ("scenarios.py.tmpl", "${module}.py"),
    ("cases/loader/stack.toml.tmpl", "cases/loader/${stack}.toml"),
    ("cases/quant/stack.toml.tmpl", "cases/quant/${stack}.toml"),
    ("cases/pipeline/stack.toml.tmpl", "cases/pipeline/${stack}.toml"),
    ("runners/cpu.toml.tmpl", "runners/cpu.toml"),
    ("HARNESS.md.tmpl", "HARNESS.md"),
)

# A stack name becomes a Python module name (<stack>_scenarios) and the start of case ids.
_NAME = re.compile(r"[a-z_][a-z0-9_]*")
_DEFAULT_NAME = "mystack"
_MAX_NAME = 40


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "init",
        help="scaffold validation of a new stack: cases, runner profile, scenario module",
        description="Write a loader, a quant-dispatch and a pipeline case, a runner profile, "
        "a scenario module with the probe calls (over a tiny seeded torch model, to be "
        "replaced by your stack) and HARNESS.md into PATH. Existing files are never "
        "overwritten without --force.",
        epilog=INIT_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "path",
        nargs="?",
        type=Path,
        default=Path("."),
        metavar="PATH",
        help="folder to scaffold in, created when missing (default: the current folder)",
    )
    p.add_argument(
        "--name",
        metavar="NAME",
        help="name of the stack: lowercase letters, digits and '_' (module NAME_scenarios, "
        "case ids NAME-...; default: from the folder's name)",
    )
    p.add_argument("--force", action="store_true", help="overwrite files that already exist")
    p.set_defaults(func=main)


def stack_name(folder: Path) -> str:
    """A stack name from a folder's name: ``My-Stack 2`` -> ``my_stack_2``; ``mystack`` when
    nothing usable is left (``/``, ``123``)."""
    name = re.sub(r"[^a-z0-9_]+", "_", folder.resolve().name.lower()).strip("_")[:_MAX_NAME]
    if not name or not _NAME.fullmatch(name) or keyword.iskeyword(name):
        return _DEFAULT_NAME
    return name


def render(stack: str) -> dict[str, str]:
    """Relative path -> text of every scaffold file for ``stack``."""
    names = {"stack": stack, "module": f"{stack}_scenarios"}
    scaffold = resources.files("harness.cli").joinpath("scaffold")
    out = {}
    for template, target in TEMPLATES:
        text = scaffold.joinpath(template).read_text(encoding="utf-8")
        out[string.Template(target).substitute(names)] = string.Template(text).substitute(names)
    return out


def main(args: argparse.Namespace) -> int:
    root: Path = args.path
    if root.exists() and not root.is_dir():
        raise UsageError(f"PATH {root}: is a file; expected a folder (created when missing)")
    writable_folder("PATH", root)
    stack = args.name if args.name is not None else stack_name(root)
    if not _NAME.fullmatch(stack) or keyword.iskeyword(stack) or len(stack) > _MAX_NAME:
        raise UsageError(
            f"--name {stack!r}: expected lowercase letters, digits and '_', not starting with a "
            f"digit, at most {_MAX_NAME} characters (it names the module {stack}_scenarios)"
        )
    files = render(stack)
    _refuse_clashes(root, files, args.force)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(root / rel, text)
    print(f"harness init: wrote {len(files)} files for stack '{stack}' in {root}:")
    for rel in files:
        print(f"  {rel}")
    where = "" if root.resolve() == Path.cwd().resolve() else f"cd {root}\n  "
    print(
        f"next (see {root / 'HARNESS.md'}):\n  {where}harness run    "
        "# fails: no reference yet; it prints the bless command to run, then run again"
    )
    return 0


def _refuse_clashes(root: Path, files: dict[str, str], force: bool) -> None:
    """Refuse before writing anything: a file in the way of a folder always, an existing file
    unless ``force``, and a folder where a file goes always."""
    existing = []
    for rel in files:
        target = root / rel
        for folder in reversed(target.parents):
            if folder.exists() and not folder.is_dir():
                raise UsageError(f"{folder}: is a file, but harness init writes {rel} under it")
        if target.is_dir():
            raise UsageError(f"{target}: is a folder; harness init writes a file there")
        if target.exists():
            existing.append(str(target))
    if existing and not force:
        more = f", and so do {', '.join(existing[1:])}" if len(existing) > 1 else ""
        raise UsageError(
            f"{existing[0]}: already exists{more}; harness init overwrites no file "
            f"(pass --force to overwrite {'them' if more else 'it'})"
        )
