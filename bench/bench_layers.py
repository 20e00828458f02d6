"""What layered references cost: the store's growth for the bundled suite, and the time an
attempt spends keeping its layer samples and comparing them with a layered reference.

1. Runs the bundled suite (``harness run``, every case in ``cases/`` unless ``-k``) into a
   temporary folder, copies ``references/`` and blesses the run into the copy, each reference
   into the platform class it is pinned under now (an output whose content is unchanged keeps
   its file, so the growth is the layered references and their manifest entries). Prints the
   store's size before and after, and the growth (the issue's bound: 10 %).
2. From that run's attempts with layer samples: the time to take the samples of tensors of the
   recorded shapes and write them (every attempt pays it), and the time to compare them with
   the layered reference just blessed (an attempt with ``--explain`` or a failed quality check
   pays it), each against the attempt's own duration (the bound for ``--explain`` on a passing
   run: 5 %).

    python bench/bench_layers.py [-k EXPR] [--run DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.probe.samples import layer_sample  # noqa: E402
from harness.references.layered import explain  # noqa: E402
from harness.references.store import ReferenceStore  # noqa: E402
from harness.worker.layers import write_intermediates  # noqa: E402


def du(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )


def best_of(fn: object, n: int = 20) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-k", default=None, help="run only these cases (harness run -k)")
    parser.add_argument(
        "--run", type=Path, default=None, help="a run folder of the suite to bless (no new run)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=REPO / "reports") as tmp:
        out = Path(tmp)
        select = ["-k", args.k] if args.k else []
        t0 = time.perf_counter()
        if args.run is not None:
            run = args.run.resolve()
        else:
            proc = harness("run", *select, "--out", str(out), "--run-id", "suite", "-q")
            run = out / "suite"
            if not (run / "report.json").is_file():
                sys.exit(f"harness run wrote no report ({proc.returncode}):\n{proc.stderr[-3000:]}")
            print(f"suite: {time.perf_counter() - t0:.0f} s, exit {proc.returncode}")
        report = json.loads((run / "report.json").read_text())
        store = out / "references"
        shutil.copytree(REPO / "references", store)
        before = du(store)
        manifest = json.loads((store / "manifest.json").read_text())["references"]
        for case in report["cases"]:
            ref = case.get("reference") or case["id"]
            classes = sorted(manifest.get(ref, {}))  # a case without one has nothing to pin
            if case["simulated"] or case["status"] == "skipped":
                continue
            for plat in classes:
                bless = harness(
                    "refs", "bless", "--run", str(run), "--case", case["id"],
                    "--references", str(store), "--platform-class", plat,
                    "--reason", "bench: layered references",
                )  # fmt: skip
                last = (bless.stdout + bless.stderr).strip().splitlines()
                print(f"  bless {ref}/{plat}: exit {bless.returncode}; {last[0] if last else ''}")
        after = du(store)
        files = sum(du(p) for p in store.rglob("~layers"))
        doc = json.loads((store / "manifest.json").read_text())
        entries = len(json.dumps({"layers": doc["layers"]}, indent=2, sort_keys=True))
        print(
            f"store: {before / 1024:.0f} KiB before, {after / 1024:.0f} KiB after bless "
            f"(+{(after - before) / before:.1%}, re-pinned outputs and their environments "
            f"included); layered references alone: {files / 1024:.0f} KiB of files + "
            f"{entries / 1024:.0f} KiB of manifest entries = +{(files + entries) / before:.1%} "
            f"({len(doc['layers'])} references)"
        )
        verify = harness("refs", "verify", "--references", str(store))
        print(f"refs verify: {verify.stdout.strip().splitlines()[-1]}")

        ref_store = ReferenceStore(store)
        for case in report["cases"]:
            measured = [a for a in case["attempts"] if a.get("intermediates", {}).get("path")]
            if not measured:
                continue
            a = measured[-1]
            from safetensors.numpy import load_file

            kept = load_file(str(run / a["intermediates"]["path"]))
            shapes = {n: fp["shape"] for n, fp in a["fingerprints"].items()}
            tensors = {n: np.ones(s, np.float32) for n, s in shapes.items() if n in kept}
            folder = out / "samples" / case["id"]

            def record(tensors: dict = tensors, folder: Path = folder) -> None:
                samples = {n: layer_sample(t) for n, t in tensors.items()}
                write_intermediates(samples, folder, recorded=True)

            ref = case.get("reference") or case["id"]

            def compare(a: dict = a, kept: dict = kept, ref: str = ref) -> None:
                explain(
                    ref_store,
                    ref,
                    ["cpu", "any"],
                    inputs=a["inputs"],
                    fingerprints=a["fingerprints"],
                    samples=kept,
                    tolerances={"rel_l2": 1e-3},
                )

            rec_s, cmp_s = best_of(record), best_of(compare)
            dur = a["duration_s"]
            print(
                f"  {case['id']:24} {len(kept):2} layers: keep {rec_s * 1e3:.2f} ms "
                f"({rec_s / dur:.2%}), compare {cmp_s * 1e3:.2f} ms ({cmp_s / dur:.2%}) "
                f"of a {dur:.2f} s attempt"
            )


if __name__ == "__main__":
    main()
