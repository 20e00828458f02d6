"""Tensor-parallel sharding of the DiT (tinyav.serve.tp) against the unsharded model, on two
real gloo ranks (tests/serve/tp_ranks.py, started as two processes).

Measured on the CPU (two ranks, one thread each): a column- then row-parallel MLP 6e-8 from
the unsharded one; one DiT forward 1e-6 (bf16, int8 ConvRot and fp8 files); a 2-step
generation's latents 3e-6, its decoded frames one level apart at most (PSNR 92 dB), its PCM
2e-6. Asserted, with headroom for other CPUs' kernels: 1e-5 for the MLP, 1e-4 for forwards
and latents and PCM, two levels and 60 dB for frames. Not bit-exact: the all_reduce sums the
shards' partial products in another order.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from tinyav_server import target_env

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
@pytest.mark.xdist_group("tinyav-serve-tp")
def test_two_gloo_ranks_match_the_unsharded_model(tmp_path: Path) -> None:
    from tinyav.serve.distributed import free_port

    out = tmp_path / "tp.json"
    group = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "tp_ranks.py"), str(out)],
            env=target_env(RANK=str(rank), **group),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank in (0, 1)
    ]
    logs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(logs)[-4000:]
    got = json.loads(out.read_text())
    assert got["linear"] <= 1e-5
    for fmt in ("bf16", "int8_convrot", "fp8"):
        assert got[f"dit.{fmt}"] <= 1e-4, fmt
    pipe = got["pipeline.bf16"]
    assert pipe["latents"] <= 1e-4 and pipe["pcm"] <= 1e-4
    assert pipe["frames"] <= 2 and pipe["frames_psnr"] >= 60.0


@pytest.mark.parametrize(
    ("platform", "backend"),
    [("cpu", "gloo"), ("cuda", "nccl"), ("hip", "nccl"), ("npu", "hccl")],
)
def test_backend_follows_the_platform(platform: str, backend: str) -> None:
    from tinyav.serve.distributed import backend_for

    assert backend_for(platform) == backend


def test_unknown_platform_has_no_backend() -> None:
    from tinyav.serve.distributed import backend_for

    with pytest.raises(ValueError, match=r"no torch\.distributed backend for platform 'tpu'"):
        backend_for("tpu")


def test_tp_that_does_not_divide_the_heads_is_refused() -> None:
    from tinyav.model import DiTConfig
    from tinyav.serve.tp import check_divisible

    with pytest.raises(ValueError, match="--tp 3: the DiT has 4 heads"):
        check_divisible(DiTConfig(), 3)


def test_cli_refuses_a_bad_tp_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from tinyav.serve.cli import parse_args

    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--port", "1", "--tp", "3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--tp 3: the DiT has 4 heads and an MLP of 1024; tp must divide both" in err
