"""What the harness adds, per attempt, to the plain diffusers pipeline call (same process).

For each case of ``cases/diffusers/pipeline.toml`` (tiny LTX-2 and Wan, 32x32, 9 frames,
2 steps, one thread), in ``--rounds`` rounds after one warm-up of each, alternating
A B M, M B A (A plain, B harness, M harness with the meter; below):

- **plain**: what the scenario does with the harness taken away: build the pipeline from
  configs, draw the noise, one ``pipe(...)`` call with no hooks and no callback, the MP4
  export; the ``pipe(...)`` call is also timed on its own;
- **harness**: one whole attempt as a worker runs it (``harness.worker.attempt.run_attempt``):
  seeding, the scenario with its hooks, step callback, fingerprints and recorded inputs,
  the outputs hashed, checked for NaN/Inf and written (safetensors; the MP4 written in the
  run through ``probe.output_file`` and hashed there), then
  every check of the case against the committed references (SSIM/PSNR/MAE on every frame,
  audio SNR/LSD/lag, notes).

Two figures, each as a share of the plain ``pipe(...)`` call (the issue's bar: at most 10 %):

- **the harness's own code, timed where it runs**: in every metered attempt (M), the time spent
  in the probe's calls and the :class:`~diffusers_scenarios.instrument.Instrument`'s methods
  inside the target (outermost calls only, so a fingerprint taken inside a hook counts once),
  plus ``run_attempt`` outside the target (seeding, the fingerprints and inputs the probe
  held to describe after the target, every check). Precise, but
  blind to what the harness costs the pipeline indirectly (torch's slower dispatch for a
  module with hooks, caches the checks evict);
- **the A/B difference**: the median over rounds of (harness attempt - plain attempt), which
  sees everything but carries the machine's noise (its interquartile range is printed). Its
  harness attempts (B) run without the meter, whose ~60 wrapped calls per attempt read
  ~1-3 ms in this difference when they were in it.

Before each side the bench collects garbage, untimed, as the worker does after every attempt
(``harness/worker/main.py``): a diffusers pipeline leaves ~220 modules in reference cycles.
After the warm-up it freezes the heap, as the worker does after an attempt that imported.

The case outputs are bit-identical to their committed references, so SSIM, PSNR, MAE and the
audio metrics read each frame's value from its equality (``harness.metrics``); ``--differ``
runs the same work with the scheduler shift x1.1, so every frame and sample differs and every
metric computes in full (the quality checks then fail, which costs what passing costs).
The worker's per-attempt protocol and isolation cost (about 3 ms, ``bench/bench_runner.py``)
is in neither side.

    python bench/bench_diffusers.py [--rounds 16] [--steps N] [--differ] [--profile]

``--profile`` instead runs one warm attempt of each case under cProfile and prints where it
spent its time (``-s cumtime``, harness and scenario code only).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "targets" / "diffusers_scenarios"), str(REPO)]
os.environ.setdefault("HARNESS_THREADS", "1")

import torch  # noqa: E402
from diffusers_scenarios import components, scenarios  # noqa: E402
from diffusers_scenarios.instrument import Instrument  # noqa: E402

import harness.worker.attempt as worker_attempt  # noqa: E402
from harness import probe  # noqa: E402
from harness.cases.load import load_file  # noqa: E402
from harness.media import write_mp4  # noqa: E402
from harness.model import Case  # noqa: E402
from harness.worker.attempt import run_attempt  # noqa: E402
from harness.worker.protocol import AttemptJob  # noqa: E402


def plain_ltx2(params: dict[str, Any], seed: int, out: Path) -> float:
    """The LTX-2 scenario without the harness (its probe calls are no-ops outside an attempt,
    and no hooks); returns the seconds of the pipe(...) call."""
    pipe = components.build_ltx2(seed, shift=params["shift"])
    kwargs = scenarios.ltx2_inputs(
        pipe,
        seed,
        prompt="a robot dancing in the rain",
        negative_prompt="",
        height=params["height"],
        width=params["width"],
        num_frames=params["num_frames"],
        frame_rate=params["frame_rate"],
        steps=params["steps"],
        guidance_scale=1.0,
    )
    t0 = time.perf_counter()
    result = pipe(**kwargs)
    call = time.perf_counter() - t0
    frames = scenarios._frames_u8(result.frames)
    pcm = result.audio[0].float().numpy()
    write_mp4(out / "plain.mp4", frames, pcm, fps=params["frame_rate"], sample_rate=16_000)
    return call


def plain_wan(params: dict[str, Any], seed: int, out: Path) -> float:
    """The Wan scenario without the harness; returns the seconds of the pipe(...) call."""
    pipe = components.build_wan(seed, shift=params["shift"])
    kwargs = scenarios.wan_inputs(
        pipe,
        seed,
        prompt="a cat sitting on window sill sunny morning",
        negative_prompt="rain",
        height=params["height"],
        width=params["width"],
        num_frames=params["num_frames"],
        steps=params["steps"],
        guidance_scale=params["guidance_scale"],
    )
    t0 = time.perf_counter()
    result = pipe(**kwargs)
    call = time.perf_counter() - t0
    write_mp4(out / "plain.mp4", scenarios._frames_u8(result.frames), fps=params["fps"])
    return call


PLAIN: dict[str, Callable[[dict[str, Any], int, Path], float]] = {
    "diffusers_scenarios.scenarios:ltx2_t2va": plain_ltx2,
    "diffusers_scenarios.scenarios:wan_t2v": plain_wan,
}


class Meter:
    """Seconds of the harness's own code in one attempt (see the module docstring).

    ``install`` wraps the probe's functions, the Instrument's methods and the target that
    ``run_attempt`` resolves; only the outermost wrapped call is timed.
    """

    PROBE = ("fingerprint", "record_input", "output", "note", "seed", "platform_info")
    CONTEXTS = ("stage", "output_file")
    INSTRUMENT = ("__enter__", "remove", "_enter", "_exit", "callback")

    def __init__(self) -> None:
        self.originals: list[tuple[Any, str, Any]] = []
        self.depth = 0
        self.inside: dict[str, float] = {"probe": 0.0, "hooks": 0.0}
        self.by_name: dict[str, float] = {}
        self.target = 0.0

    def reset(self) -> None:
        self.inside = dict.fromkeys(self.inside, 0.0)
        self.by_name = {}
        self.target = 0.0

    def _timed(self, f: Callable[..., Any], part: str) -> Callable[..., Any]:
        meter = self

        @functools.wraps(f)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if meter.depth:
                return f(*args, **kwargs)
            meter.depth += 1
            t0 = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                spent = time.perf_counter() - t0
                meter.inside[part] += spent
                meter.by_name[f.__name__] = meter.by_name.get(f.__name__, 0.0) + spent
                meter.depth -= 1

        return timed

    def _swap(self, owner: Any, name: str, new: Any) -> None:
        self.originals.append((owner, name, getattr(owner, name)))
        setattr(owner, name, new)

    def uninstall(self) -> None:
        """Put back every original, so the A/B attempts run without the meter's wrappers."""
        while self.originals:
            owner, name, original = self.originals.pop()
            setattr(owner, name, original)

    def install(self) -> None:
        for name in self.PROBE:
            self._swap(probe, name, self._timed(getattr(probe, name), "probe"))
        for name in self.INSTRUMENT:
            self._swap(Instrument, name, self._timed(getattr(Instrument, name), "hooks"))
        meter = self

        def timed_context(factory: Callable[..., Any]) -> Callable[..., Any]:
            """``factory`` (probe.stage, probe.output_file) with its contexts' enter and exit
            timed as probe calls."""

            class Timed:
                def __init__(self, *args: Any, **kwargs: Any) -> None:
                    self.cm = meter._timed(factory, "probe")(*args, **kwargs)

                def __enter__(self) -> Any:
                    return meter._timed(self.cm.__enter__, "probe")()

                def __exit__(self, *exc: Any) -> Any:
                    return meter._timed(self.cm.__exit__, "probe")(*exc)

            return Timed

        for name in self.CONTEXTS:
            if hasattr(probe, name):  # output_file is newer than some code this bench times
                self._swap(probe, name, timed_context(getattr(probe, name)))
        resolve = worker_attempt.resolve_target

        def resolve_timed(spec: str) -> Callable[..., Any]:
            fn = resolve(spec)

            def target(**kwargs: Any) -> Any:
                t0 = time.perf_counter()
                try:
                    return fn(**kwargs)
                finally:
                    meter.target += time.perf_counter() - t0

            target.__module__ = fn.__module__
            return target

        self._swap(worker_attempt, "resolve_target", resolve_timed)


METER = Meter()


def harness_attempt(case: Case, out: Path, index: int) -> tuple[float, float, str]:
    """Wall seconds of one whole attempt, seconds after the target returned (the checks), and
    the attempt's status."""
    job = AttemptJob(
        case=case,
        platform="cpu",
        platform_chain=("cpu", "any"),
        index=index,
        seed=case.seed,
        output_dir=str(out / f"a{index}"),
        references_root=str(REPO / "references"),
    )
    t0 = time.perf_counter()
    attempt = run_attempt(job)
    wall = time.perf_counter() - t0
    return wall, wall - attempt.duration_s, attempt.status


def bench(
    case: Case, rounds: int, out: Path, steps: int | None = None, differ: bool = False
) -> None:
    if steps is not None:
        # More steps, same shapes: every check still computes in full (against references of
        # 2 steps, so the quality checks fail, which costs what passing costs).
        case = replace(case, params={**case.params, "steps": steps})
    if differ:
        # The same work with another schedule: every frame and sample differs from its
        # reference, so no metric reads an identical frame's value; the checks fail.
        case = replace(case, params={**case.params, "shift": case.params["shift"] * 1.1})
    want = {"passed"} if steps is None and not differ else {"passed", "failed"}
    plain = PLAIN[str(case.target)]
    params = dict(case.params)
    plain_total: list[float] = []
    plain_call: list[float] = []
    attempts: list[float] = []
    checks: list[float] = []
    own: dict[str, list[float]] = {"probe": [], "hooks": [], "outside": [], "total": []}

    def run_plain() -> None:
        gc.collect()
        t0 = time.perf_counter()
        plain_call.append(plain(params, case.seed, out))
        plain_total.append(time.perf_counter() - t0)

    def run_harness(i: int) -> None:
        """One attempt for the A/B difference, without the meter's wrappers."""
        gc.collect()
        secs, after, status = harness_attempt(case, out, i)
        if status not in want:
            raise SystemExit(f"{case.id}: attempt {i} {status}; see {out}")
        attempts.append(secs)
        checks.append(after)

    def run_metered(i: int) -> None:
        """One attempt with the meter installed, for the harness's own code."""
        gc.collect()
        METER.install()
        METER.reset()
        try:
            secs, _, status = harness_attempt(case, out, i)
        finally:
            METER.uninstall()
        if status not in want:
            raise SystemExit(f"{case.id}: attempt {i} {status}; see {out}")
        inside = METER.inside
        own["probe"].append(inside["probe"])
        own["hooks"].append(inside["hooks"])
        own["outside"].append(secs - METER.target)
        own["total"].append(inside["probe"] + inside["hooks"] + secs - METER.target)

    run_plain()  # warm-up: imports, allocator, first build
    run_harness(0)
    run_metered(-1)
    # As the worker does after an attempt that imported modules: freeze what survives, so the
    # collection before each side walks that side's garbage only (harness/worker/main.py).
    gc.collect()
    gc.freeze()
    for series in (plain_total, plain_call, attempts, checks, *own.values()):
        series.clear()
    for r in range(rounds):  # A B M, M B A, ...: the A/B pair stays adjacent
        if r % 2 == 0:
            run_plain()
            run_harness(2 * r + 1)
            run_metered(2 * r + 2)
        else:
            run_metered(2 * r + 2)
            run_harness(2 * r + 1)
            run_plain()
    p_call, p_total = statistics.median(plain_call), statistics.median(plain_total)
    h_total = statistics.median(attempts)
    # Each round's two runs are neighbours in time and share the machine's load: the median of
    # the per-round differences is far steadier on a busy runner than a difference of medians.
    diffs = sorted(h - p for h, p in zip(attempts, plain_total, strict=True))
    overhead = statistics.median(diffs)
    q1, _, q3 = statistics.quantiles(diffs, n=4) if len(diffs) > 1 else (diffs[0],) * 3
    mine = {k: statistics.median(v) for k, v in own.items()}
    print(
        f"{case.id} ({case.params['steps']} steps"
        f"{', shift x1.1: every output differs from its reference' if differ else ''}): "
        f"{rounds} rounds; medians: pipe(...) call "
        f"{p_call * 1000:.1f} ms, plain "
        f"attempt (build + call + MP4) {p_total * 1000:.1f} ms, harness attempt "
        f"{h_total * 1000:.1f} ms, of which checks {statistics.median(checks) * 1000:.1f} ms"
    )

    def verdict(seconds: float) -> str:
        return "met" if seconds <= 0.10 * p_call else "NOT met"

    print(
        f"  harness's own code, timed where it runs: {mine['total'] * 1000:.1f} ms per attempt "
        f"= {mine['total'] / p_call * 100:.1f} % of the plain pipeline call "
        f"(probe calls {mine['probe'] * 1000:.1f} ms, hooks {mine['hooks'] * 1000:.1f} ms, "
        f"run_attempt outside the target {mine['outside'] * 1000:.1f} ms); "
        f"bar <= 10 %: {verdict(mine['total'])}"
    )
    print(
        f"  A/B difference (median of per-round differences) {overhead * 1000:+.1f} ms "
        f"(IQR {q1 * 1000:+.1f} .. {q3 * 1000:+.1f}) = {overhead / p_call * 100:+.1f} % of the "
        f"plain pipeline call ({overhead / p_total * 100:+.1f} % of the plain attempt); "
        f"bar <= 10 %: {verdict(overhead)}"
    )


def profile(case: Case, out: Path, lines: int = 40) -> None:
    """One attempt after a warm-up, under cProfile, sorted by cumulative time."""
    harness_attempt(case, out, 0)
    prof = cProfile.Profile()
    prof.enable()
    harness_attempt(case, out, 1)
    prof.disable()
    print(f"===== {case.id}: one warm attempt")
    pstats.Stats(prof, stream=sys.stdout).sort_stats("cumtime").print_stats(
        r"(harness|diffusers_scenarios)/", lines
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument(
        "--steps",
        type=int,
        help="denoising steps instead of the cases' 2, to see how the fixed cost amortizes",
    )
    parser.add_argument(
        "--differ",
        action="store_true",
        help="run with the scheduler shift x1.1, so that every output differs from its "
        "reference and every metric computes in full (the checks then fail)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="profile one warm attempt of each case instead"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    cases = load_file(REPO / "cases" / "diffusers" / "pipeline.toml")
    with tempfile.TemporaryDirectory(prefix="bench-diffusers-") as tmp:
        for case in cases:
            if args.profile:
                profile(case, Path(tmp))
            else:
                bench(case, args.rounds, Path(tmp), args.steps, args.differ)


if __name__ == "__main__":
    main()
