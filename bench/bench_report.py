"""Render time and size of the HTML report for a synthetic run of 1,000 cases x 3 attempts.

Each case looks like a bundled tinyav case: 13 timed stages, 14 fingerprints, 2 input hashes,
a dozen notes and 8 checks per attempt; one case in 20 failed with an error and a 40-line stack.
With ``--like RUN_DIR`` the cases are drawn in turn from a real run instead (the bundled suite's
run is the realistic mix of loader, quant, import and pipeline cases). No outputs either way,
so no images: the figures are the page alone (the issue's target: under
3 s and under 3 MB, images excluded). Prints the best of ``--repeat`` renders, and how much of
the page is the case data the page's script draws when a case is opened (one string table and
rows of numbers into it, :mod:`harness.report.detail`).

    python bench/bench_report.py [--cases 1000] [--attempts 3] [--repeat 3]
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from harness.model import Attempt, CaseResult, CheckResult, ErrorInfo, RunReport
from harness.report.html import render_run_html
from harness.report.io import read_report

STAGES = [
    "CheckpointWrite", "LoadStage", "InputValidationStage", "TextEncodingStage",
    "LatentPreparationStage", "DenoisingStage", *(f"DenoisingStage.step{i:02d}" for i in range(4)),
    "VideoDecodingStage", "AudioDecodingStage", "ExportStage",
]  # fmt: skip
TENSORS = [
    "text.context", "latents.video.init", "latents.audio.init",
    *(f"denoise.step{i:02d}{s}" for i in range(4) for s in ("", ".audio")),
    "video.frames", "audio.pcm", "vae.out", "audio.vocoder", "mux.pts",
]  # fmt: skip
KINDS = ("loader", "quant", "pipeline", "import")
TRACEBACK = "\n".join(
    f'  File "/src/tinyav/pipeline/stage{i}.py", line {10 * i}, in run_{i}\n    x = f(x)'
    for i in range(40)
)


def _hash(*parts: object) -> str:
    return "blake3:" + hashlib.sha256(repr(parts).encode()).hexdigest()


def _fingerprint(i: int, t: str) -> dict[str, object]:
    return {
        "hash": _hash(i, t),
        "dtype": "float32",
        "shape": [1, 8, 4, 8, 8],
        "nonfinite": 0,
        "min": -3.1,
        "max": 3.4,
        "mean": 0.01,
    }


def like_run(path: Path, n_cases: int, n_attempts: int) -> RunReport:
    """``n_cases`` cases drawn in turn from a real run's report (e.g. the bundled suite), each
    with ``n_attempts`` attempts copied from its own, outputs dropped (so no images)."""
    real = read_report(path)
    cases = []
    for i in range(n_cases):
        c = real.cases[i % len(real.cases)]
        pool = c.attempts or (Attempt(c.id, c.platform, 0, c.status, c.seed),)
        attempts = tuple(
            replace(pool[a % len(pool)], index=a, outputs={}) for a in range(n_attempts)
        )
        cases.append(replace(c, id=f"{c.id}-{i:04d}", attempts=attempts))
    return replace(real, cases=tuple(cases))


def synthetic_run(n_cases: int, n_attempts: int) -> RunReport:
    cases = []
    for i in range(n_cases):
        failed = i % 20 == 7
        checks = tuple(
            CheckResult(
                f"check{k}(video)", "ssim" if k % 2 else "note.dispatch", 0.99 - k * 1e-3, ">=",
                0.98, "fail", not (failed and k == 0), output="video",
                settings={"window": "gaussian", "sigma": 1.5, "reduce": "worst"},
            )
            for k in range(8)
        )  # fmt: skip
        attempts = tuple(
            Attempt(
                case_id=f"case-{i:04d}",
                platform=("cpu", "cuda", "hip")[i % 3],
                index=a,
                status="failed" if failed and a == n_attempts - 1 else "passed",
                seed=42,
                repeat=a,
                inputs={"checkpoint": _hash(i), "prompt": _hash(i, "p")},
                stages={s: 0.01 * (1 + j) * (1 + a * 0.01) for j, s in enumerate(STAGES)},
                fingerprints={t: _fingerprint(i, t) for t in TENSORS},
                notes={f"dispatch.op{k}.ran": "dequant_matmul" for k in range(12)},
                checks=checks,
                error=ErrorInfo.make("AssertionError", f"case {i} drifted", TRACEBACK)
                if failed and a == n_attempts - 1
                else None,
                duration_s=0.6 + a * 0.01,
                worker_pid=1000 + i % 7,
                started_at=f"2026-12-01T10:{i // 60 % 60:02d}:{i % 60:02d}.{a:06d}+00:00",
            )
            for a in range(n_attempts)
        )
        cases.append(
            CaseResult(
                id=f"case-{i:04d}",
                kind=KINDS[i % 4],
                platform=("cpu", "cuda", "hip")[i % 3],
                status="failed" if failed else "passed",
                simulated=i % 3 != 0,
                source=f"cases/{KINDS[i % 4]}/suite.toml",
                reason="check0(video): obtained 0.99 < 0.98" if failed else None,
                checks=checks,
                attempts=attempts,
                seed=42,
                repeats=n_attempts,
            )
        )
    return RunReport(
        run_id="bench",
        started_at="2026-12-01T10:00:00+00:00",
        finished_at="2026-12-01T10:30:00+00:00",
        argv=("harness", "run"),
        runner="cpu",
        env={"git": {"sha": "0" * 40, "dirty": False}, "python": {"version": "3.11"}},
        cases=tuple(cases),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=1000)
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--like", type=Path, help="draw the cases from this run folder (default: synthetic)"
    )
    args = ap.parse_args()
    if args.like:
        report = like_run(args.like, args.cases, args.attempts)
        what = f"cases drawn from {args.like}"
    else:
        report = synthetic_run(args.cases, args.attempts)
        what = "synthetic pipeline-like cases"
    best, cpu, size = float("inf"), float("inf"), 0
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            page = render_run_html(report, Path(tmp))
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
            size = len(page.encode())
    mb = size / 1e6
    start = page.index('id="case-data">')
    data_mb = (page.index("</script>", start) - start) / 1e6
    print(f"HTML report of {args.cases} cases x {args.attempts} attempts, {what} (no images):")
    print(f"  render {best:.2f} s wall, {cpu:.2f} s CPU (target < 3 s: {best / 3:.2f} of it)")
    print(f"  size   {mb:.2f} MB (target < 3 MB: {mb / 3:.2f} of it), case data {data_mb:.2f} MB")


if __name__ == "__main__":
    main()
