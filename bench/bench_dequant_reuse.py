"""tinyav's quantized layers with their dequantized weight kept between forwards, against the
same layers dequantizing on every forward (``DequantCache.enabled = False``), alternating in
one process.

Each run is what a pipeline case's attempt does after writing its checkpoint: load the
checkpoint (``Pipeline.from_checkpoint``) and generate once (4 denoising steps), on one torch
thread as the cpu runner gives a worker. Both ways must give the same frames and PCM bits; the
script stops if they do not.

    python bench/bench_dequant_reuse.py               # 7 rounds per format
    python bench/bench_dequant_reuse.py --rounds 2    # a smoke run
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "targets" / "tinyav"))

import torch  # noqa: E402
from tinyav.checkpoint import write_checkpoint  # noqa: E402
from tinyav.pipeline import Pipeline, Request  # noqa: E402


def one(ckpt: Path, *, keep: bool) -> tuple[float, str]:
    """Seconds to load ``ckpt`` and generate once, and the digest of what came out."""
    t0 = time.perf_counter()
    pipe = Pipeline.from_checkpoint(ckpt)
    if not keep:
        for m in pipe.dit.modules():
            if hasattr(m, "dequantized"):
                m.dequantized.enabled = False
    r = pipe(Request("a fox", seed=5))
    secs = time.perf_counter() - t0
    return secs, hashlib.sha256(r.frames.tobytes() + r.pcm.tobytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("int8_convrot", "fp8"):
            ckpt = write_checkpoint(Path(tmp) / f"{fmt}.safetensors", fmt)
            one(ckpt, keep=True)  # first-call costs of torch, once, before either side
            times: dict[bool, list[float]] = {True: [], False: []}
            digests: set[str] = set()
            for i in range(args.rounds):
                for keep in (True, False) if i % 2 == 0 else (False, True):
                    secs, digest = one(ckpt, keep=keep)
                    times[keep].append(secs)
                    digests.add(digest)
            if len(digests) != 1:
                sys.exit(f"{fmt}: the two ways gave different outputs: {sorted(digests)}")
            every, kept = statistics.median(times[False]), statistics.median(times[True])
            print(
                f"{fmt:13s} load + generate, median of {args.rounds}: dequantized every "
                f"forward {every:.3f} s, kept {kept:.3f} s, ratio {every / kept:.2f}x "
                f"(same output bits)"
            )


if __name__ == "__main__":
    main()
