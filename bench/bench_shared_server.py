"""A server shared by N cases pays one start-up (issue 19): the bundled tinyav server case
(TP 1, INT8) as N cases with different seeds, run by ``harness run`` twice in one invocation:

(a) not shared: each case starts and stops its own ``tinyav.serve`` (no ``name``);
(b) shared: every case's ``[case.server]`` has ``name = "tinyav-tp1"``; the first case starts
    it, the others reuse it, the last one stops it.

(c) shared, the plan shuffled (``--shuffle 7``): another order of the cases.

Prints, for each, the start-ups counted (attempts with the stage ``server.startup``), the sum
of those stages, and the wall time of the whole ``harness run``; and whether every case's
output hashes in (b) and (c) equal those of its own server in (a) (a result that depended on
the order of the cases sharing a server would differ).

    python bench/bench_shared_server.py [--cases 4]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASE_FILE = REPO / "cases" / "server" / "tinyav.toml"


def cases(n: int, shared: bool) -> str:
    """The bundled case as ``n`` cases (seeds 5, 6, ...), judged by the always-on checks."""
    text = CASE_FILE.read_text()
    text = text[text.index("[[case]]") : text.index("# Judged against")]
    text = text.replace('reference = "serve-tp1-int8"\n', "")
    if shared:
        text = text.replace("[case.server]\n", '[case.server]\nname = "tinyav-tp1"\n')
    out = []
    for i in range(n):
        one = re.sub(r'id = "[^"]*"', f'id = "serve-{i}"', text, count=1)
        out.append(one.replace("seed = 5", f"seed = {5 + i}"))
    return "".join(out)


def run(
    n: int, shared: bool, root: Path, *extra: str
) -> tuple[int, float, float, list[str], dict[str, dict[str, str]]]:
    """Start-ups, their total seconds, the run's wall time, each case's status, and each
    case's output hashes."""
    folder = root / (("shared" if shared else "own") + "".join(extra))
    folder.mkdir()
    (folder / "cases.toml").write_text(cases(n, shared))
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", str(folder / "cases.toml"),
         "--out", str(folder / "runs"), "--run-id", "r", "-q", *extra],
        cwd=REPO, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"harness run exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    doc = json.loads((folder / "runs" / "r" / "report.json").read_text())
    startups = [
        a["stages"]["server.startup"]
        for c in doc["cases"]
        for a in c["attempts"]
        if "server.startup" in a["stages"]
    ]
    hashes = {
        c["id"]: {k: o["hash"] for a in c["attempts"] for k, o in a["outputs"].items()}
        for c in doc["cases"]
    }
    return len(startups), sum(startups), wall, [c["status"] for c in doc["cases"]], hashes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=4)
    n = ap.parse_args().cases
    own: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, shared, extra in (
            ("own", False, ()),
            ("shared", True, ()),
            ("shared, shuffled", True, ("--shuffle", "7")),
        ):
            count, seconds, wall, statuses, hashes = run(n, shared, Path(tmp), *extra)
            same = "" if not own else f"; outputs equal to own servers': {hashes == own}"
            own = own or hashes
            print(
                f"{label}: {n} cases, {count} start-up(s) ({seconds:.1f} s of server.startup), "
                f"run wall time {wall:.1f} s; statuses {sorted(set(statuses))}{same}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
