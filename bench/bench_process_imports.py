"""What a `harness` process and an audio check cost in CPU, this checkout against another one.

Every test of this project starts `harness` processes and workers; what they import is paid
each time. Two figures per side, from alternating runs in one invocation:

* ``manager``: the CPU of the `harness run` process itself (its own rusage at exit, workers
  not counted) for a project of two toy cases that write no media;
* ``audio``: the CPU of a fresh interpreter that imports the harness's metrics and computes
  the audio SNR, LSD and lag of one pair of clips (what a worker adds when it checks audio).

``--base DIR`` is a checkout of the other commit (``git worktree add DIR REV``); each side runs
its own code through ``PYTHONPATH``. Usage::

    python bench/bench_process_imports.py --base ../harness-b0a2997            # 7 rounds
    python bench/bench_process_imports.py --base ../harness-b0a2997 --rounds 2  # a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

TOY_TARGET = "def ok(x=1):\n    return None\n"
TOY_CASES = (
    '[[case]]\nid = "a"\nkind = "loader"\ntarget = "tmod:ok"\n\n'
    '[[case]]\nid = "b"\nkind = "loader"\ntarget = "tmod:ok"\n'
)
TOY_RUNNER = 'name = "cpu"\nplatform = "cpu"\npreimport = []\n'

MANAGER = (
    "import atexit, resource, runpy, sys\n"
    "atexit.register(lambda: print('CPU', sum(resource.getrusage(resource.RUSAGE_SELF)[:2])))\n"
    "sys.argv = ['harness', 'run', 'cases', '--code-root', 'code', '-q', '--out', sys.argv[1]]\n"
    "runpy.run_module('harness.cli', run_name='__main__')\n"
)
AUDIO = (
    "import resource, numpy as np\n"
    "from harness import metrics\n"
    "rng = np.random.default_rng(0)\n"
    "t = rng.standard_normal((2, 16000)); p = np.roll(t, 30, axis=1) * 0.9\n"
    "metrics.audio_snr(p, t, max_lag=800); metrics.audio_lsd(p, t, max_lag=800)\n"
    "metrics.audio_lag_ms(p, t, sample_rate=16000)\n"
    "print('CPU', sum(resource.getrusage(resource.RUSAGE_SELF)[:2]))\n"
)


def project(root: Path) -> Path:
    for d in ("code", "cases", "runners"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "code" / "tmod.py").write_text(TOY_TARGET)
    (root / "cases" / "two.toml").write_text(TOY_CASES)
    (root / "runners" / "cpu.toml").write_text(TOY_RUNNER)
    return root


def cpu_of(code: str, checkout: Path, cwd: Path, *args: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    for name in ("PYTHONDONTWRITEBYTECODE", "HARNESS_ZYGOTE_DIR"):
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if "CPU" not in proc.stdout:
        raise SystemExit(f"{checkout}: no figure ({proc.returncode}): {proc.stderr[-2000:]}")
    return float(proc.stdout.split("CPU")[-1].split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="a checkout of the other commit")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    sides = {"base": args.base.resolve(), "this": HERE}
    got: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        toy = project(Path(tmp) / "toy")
        for i in range(args.rounds):
            for side, checkout in sides.items():
                out = str(Path(tmp) / f"runs-{side}-{i}")
                got.setdefault((side, "manager"), []).append(cpu_of(MANAGER, checkout, toy, out))
                got.setdefault((side, "audio"), []).append(cpu_of(AUDIO, checkout, toy))
    for what in ("manager", "audio"):
        base = statistics.median(got[("base", what)])
        this = statistics.median(got[("this", what)])
        print(
            f"{what:8s} base {base:.3f} s  this {this:.3f} s CPU (medians of {args.rounds})"
            f"  this/base {this / base:.2f}"
        )


if __name__ == "__main__":
    main()
