"""The probe API on real files: every output kind is decoded and counted for NaN/Inf, output
names are unique per attempt, and every tensor records the device it lived on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from corecases import write_cases
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import save_file as save_torch

from harness import media, probe
from harness.checks.finite import finiteness_checks
from harness.fsio import read_array, read_tensors
from harness.report.schema import validate_report

REPO = Path(__file__).resolve().parents[2]


def nan_wav(path: Path) -> Path:
    pcm = np.zeros((1, 800), np.float32)
    pcm[0, 100:110] = np.nan
    pcm[0, 200] = np.inf
    media.write_wav(path, pcm, 8000)
    return path


def nan_safetensors(path: Path) -> Path:
    w = np.ones((4, 4), np.float32)
    w[1, :] = np.nan
    save_numpy({"w": w, "ids": np.arange(3, dtype=np.int64)}, str(path))
    return path


def inf_npy(path: Path) -> Path:
    np.save(path, np.array([1.0, np.inf, -np.inf, 2.0]))
    return path


# -- every output kind is decoded and counted ---------------------------------------------


def test_float_wav_full_of_nan_is_counted(rec: Any, tmp_path: Path) -> None:
    probe.output("audio", nan_wav(tmp_path / "a.wav"), kind="audio")
    assert rec.outputs["audio"]["nonfinite"] == 11
    (check,) = finiteness_checks(rec.outputs)
    assert check.passed is False and "'audio' contains 11 NaN/Inf" in (check.reason or "")


def test_safetensors_npy_npz_are_counted(rec: Any, tmp_path: Path) -> None:
    probe.output("weights", nan_safetensors(tmp_path / "w.safetensors"))
    probe.output("scores", inf_npy(tmp_path / "s.npy"))
    np.savez(tmp_path / "z.npz", a=np.zeros(3), b=np.array([np.nan, 1.0]))
    probe.output("bundle", tmp_path / "z.npz")
    probe.output("named", str(inf_npy(tmp_path / "c.npy")))  # a str naming a file is a file
    counts = {n: o["nonfinite"] for n, o in rec.outputs.items()}
    assert counts == {"weights": 4, "scores": 2, "bundle": 1, "named": 2}


def test_png_is_decoded(rec: Any, tmp_path: Path) -> None:
    frame = np.full((16, 16, 3), 7, np.uint8)
    media.write_png(tmp_path / "f.png", frame)
    probe.output("image", tmp_path / "f.png", kind="image")
    assert rec.outputs["image"]["nonfinite"] == 0
    assert "nonfinite_reason" not in rec.outputs["image"]


@pytest.mark.parametrize(
    ("dtype", "key"),
    [(torch.bfloat16, "BF16"), (torch.float8_e4m3fn, "F8_E4M3"), (torch.float8_e5m2, "F8_E5M2")],
)
def test_bf16_and_fp8_tensors_are_widened_bit_exactly(
    tmp_path: Path, dtype: torch.dtype, key: str
) -> None:
    # Every bit pattern of the dtype, so NaN and Inf (where it has them) are all there.
    bits = torch.arange(2**16 if key == "BF16" else 256, dtype=torch.int32)
    raw = bits.to(torch.int16 if key == "BF16" else torch.uint8)
    t = raw.view(dtype)
    path = tmp_path / "t.safetensors"
    save_torch({"t": t}, str(path))
    header = json.loads(path.read_bytes()[8 : 8 + int.from_bytes(path.read_bytes()[:8], "little")])
    assert header["t"]["dtype"] == key
    want = t.to(torch.float32).numpy()
    from harness import fsio

    raw_read = fsio._read_raw(path)["t"]  # the reader used when torch is not imported
    np.testing.assert_array_equal(raw_read, want)
    np.testing.assert_array_equal(read_tensors(path)["t"], want)


def test_bf16_safetensors_output_is_checked_without_importing_torch(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    save_torch(
        {"w": torch.tensor([1.0, float("nan"), float("inf")], dtype=torch.bfloat16)}, str(path)
    )
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from harness import probe\n"
        "assert not {'numpy', 'torch'} & set(sys.modules), 'importing the probe is heavy'\n"
        f"rec = probe._begin(0, 'cpu', Path({str(tmp_path / 'out')!r}))\n"
        f"probe.output('w', Path({str(path)!r}))\n"
        "assert 'torch' not in sys.modules, 'decoding a bf16 file imported torch'\n"
        "print(rec.outputs['w']['nonfinite'])\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "2"


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("notes.txt", b"hello", "no decoder for '.txt' files"),
        ("broken.wav", b"RIFF\x00\x00not a wav at all", "blob.wav: cannot decode audio"),
        ("broken.safetensors", b"\x05", "not a safetensors file"),
    ],
)
def test_undecodable_file_is_not_run_never_passed(
    rec: Any, tmp_path: Path, name: str, content: bytes, why: str
) -> None:
    (tmp_path / name).write_bytes(content)
    probe.output("blob", tmp_path / name)
    entry = rec.outputs["blob"]
    assert entry["nonfinite"] is None and why in entry["nonfinite_reason"]
    (check,) = finiteness_checks(rec.outputs)
    assert check.value is None and why in (check.reason or "")
    if name.endswith(".txt"):  # no decoder for the format: not run, reported, never passed
        assert check.passed is None and check.policy == "warn"
        assert (check.reason or "").startswith("not run: output 'blob' was not checked")
    else:  # a format the harness decodes that does not decode: a broken output fails
        assert check.passed is False and check.blocking
        assert (check.reason or "").startswith("output 'blob' is broken")


def test_pickled_npy_is_refused_not_loaded(rec: Any, tmp_path: Path) -> None:
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    probe.output("obj", tmp_path / "o.npy")
    assert rec.outputs["obj"]["nonfinite"] is None
    assert "allow_pickle" in rec.outputs["obj"]["nonfinite_reason"]


def test_output_of_a_missing_file_says_so(rec: Any, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"probe.output\('audio', ...\): no such file"):
        probe.output("audio", str(tmp_path / "nope.wav"))


# -- output names ---------------------------------------------------------------------------


def test_reused_output_name_is_an_error_and_keeps_the_first(rec: Any) -> None:
    probe.output("audio", np.array([np.nan], np.float32))
    with pytest.raises(ValueError, match="output 'audio' was already recorded in this attempt"):
        probe.output("audio", np.zeros(1, np.float32))
    assert rec.outputs["audio"]["nonfinite"] == 1  # the NaN is not overwritten


def test_names_that_slug_alike_get_their_own_files(rec: Any) -> None:
    probe.output("a b", np.array([1.0], np.float32))
    probe.output("a_b", np.array([2.0], np.float32))
    (rec.output_dir.parent / "noext").write_bytes(b"1")
    (rec.output_dir.parent / "f.gz").write_bytes(b"2")
    probe.output("a.gz", rec.output_dir.parent / "noext")  # never the file of "a" + ".gz"
    probe.output("a", rec.output_dir.parent / "f.gz")
    paths = {n: Path(o["path"]) for n, o in rec.outputs.items()}
    assert len(set(paths.values())) == 4
    assert paths["a.gz"].read_bytes() == b"1" and paths["a"].read_bytes() == b"2"
    assert read_array(paths["a b"]).tolist() == [1.0]
    assert read_array(paths["a_b"]).tolist() == [2.0]
    assert all(p.parent == rec.output_dir for p in paths.values())


# -- where the tensors lived ----------------------------------------------------------------


def test_device_of_every_tensor_and_array_output(rec: Any) -> None:
    probe.fingerprint("t", torch.ones(2, dtype=torch.bfloat16))
    probe.fingerprint("n", np.ones(2))
    probe.output("o", torch.zeros(3))
    fps = rec.fingerprints
    assert (fps["t"]["device"], fps["t"]["framework"], fps["t"]["dtype"]) == (
        "cpu",
        "torch",
        "bfloat16",
    )
    assert (fps["n"]["device"], fps["n"]["framework"]) == ("cpu", "numpy")
    assert (rec.outputs["o"]["device"], rec.outputs["o"]["framework"]) == ("cpu", "torch")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_of_a_cuda_tensor(rec: Any) -> None:
    probe.fingerprint("t", torch.ones(2, device="cuda"))
    assert rec.fingerprints["t"]["device"] == "cuda:0"


# -- through a real `harness run` -----------------------------------------------------------

TARGETS = """
from pathlib import Path
import numpy as np
from harness import media, probe
from safetensors.numpy import save_file


def wav(workdir):
    pcm = np.zeros((1, 800), np.float32)
    pcm[0, 5] = np.nan
    media.write_wav(Path(workdir) / "a.wav", pcm, 8000)
    probe.output("voice", Path(workdir) / "a.wav", kind="audio")


def weights(workdir):
    save_file({"w": np.full((2, 2), np.nan, np.float32)}, str(Path(workdir) / "w.safetensors"))
    probe.output("ckpt", Path(workdir) / "w.safetensors")


def scores(workdir):
    np.save(Path(workdir) / "s.npy", np.array([np.inf, 1.0]))
    probe.output("scores", Path(workdir) / "s.npy")


def opaque(workdir):
    (Path(workdir) / "x.bin").write_bytes(b"opaque")
    probe.output("blob", Path(workdir) / "x.bin")


def twice():
    probe.output("audio", np.array([np.nan], np.float32))
    probe.output("audio", np.zeros(1, np.float32))


def slugs():
    probe.output("a b", np.array([1.0], np.float32))
    probe.output("a_b", np.array([2.0], np.float32))
"""


@pytest.mark.slow
def test_nonfinite_files_fail_a_real_run_naming_the_output(project: Path) -> None:
    (project / "code" / "filetargets.py").write_text(TARGETS)
    work = project / "work"
    work.mkdir()
    body = ""
    for case in ("wav", "weights", "scores", "opaque"):
        body += (
            f'[[case]]\nid = "{case}"\nkind = "pipeline"\ntarget = "filetargets:{case}"\n'
            f'params = {{ workdir = "{work}" }}\n\n'
        )
    for case in ("twice", "slugs"):
        body += f'[[case]]\nid = "{case}"\nkind = "pipeline"\ntarget = "filetargets:{case}"\n\n'
    write_cases(project, "files.toml", body)
    proc = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "--code-root", "code", "--run-id", "r", "-q"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads((project / "reports" / "r" / "report.json").read_text())
    validate_report(doc)
    cases = {c["id"]: c for c in doc["cases"]}
    for case, output, count in (
        ("wav", "voice", 1),
        ("weights", "ckpt", 4),
        ("scores", "scores", 1),
    ):
        result = cases[case]
        assert result["status"] == "failed", case
        check = next(k for k in result["checks"] if k["name"] == f"finite({output})")
        assert check["passed"] is False and check["value"] == count
        assert f"output '{output}' contains {count} NaN/Inf" in result["reason"]
    # An output of a format the probe has no decoder for is never a pass of its finite()
    # check: the check did not run, says why, and is reported (policy warn: a file without
    # numbers cannot hold a NaN, so the case is not made an error for it).
    opaque = cases["opaque"]
    check = next(k for k in opaque["checks"] if k["name"] == "finite(blob)")
    assert check["passed"] is None and check["value"] is None and check["policy"] == "warn"
    assert "no decoder for '.bin' files" in check["reason"]
    assert opaque["status"] == "passed"

    twice = cases["twice"]
    assert twice["status"] == "error"
    assert "output 'audio' was already recorded" in twice["reason"]

    slugs = cases["slugs"]
    assert slugs["status"] == "passed", slugs["reason"]
    outs = slugs["attempts"][0]["outputs"]
    run_dir = project / "reports" / "r"
    assert outs["a b"]["path"] != outs["a_b"]["path"]
    assert read_array(run_dir / outs["a b"]["path"]).tolist() == [1.0]
    assert read_array(run_dir / outs["a_b"]["path"]).tolist() == [2.0]


def test_a_bf16_safetensors_input_hashes_its_tensors_not_its_bytes(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    t = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3).to(torch.bfloat16)}
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file(t, str(a), metadata={"note": "one"})
    save_file(t, str(b), metadata={"note": "another header, same tensors"})
    assert a.read_bytes() != b.read_bytes()
    assert probe.hash_input(a) == probe.hash_input(b)
    t["w"][0, 0] = 1.0
    save_file(t, str(b))
    assert probe.hash_input(a) != probe.hash_input(b)


def test_a_file_output_is_copied_byte_for_byte_with_the_hash_of_its_bytes(
    rec: Any, tmp_path: Path
) -> None:
    src = tmp_path / "blob.bin"
    src.write_bytes(os.urandom(3 << 20))  # three read chunks
    probe.output("blob", src)
    entry = rec.outputs["blob"]
    stored = Path(entry["path"])
    assert stored != src and stored.read_bytes() == src.read_bytes()
    assert entry["bytes"] == src.stat().st_size
    assert entry["hash"] == probe.hash_input(src.read_bytes())


def test_fingerprint_counts_nan_and_inf_and_takes_extremes_of_the_finite_rest(rec: Any) -> None:
    for name, values, want in [
        ("finite", [1.5, -2.0, 4.0], (0, -2.0, 4.0)),
        ("nan", [1.0, float("nan"), 3.0], (1, 1.0, 3.0)),
        ("inf", [float("inf"), 1.0, -float("inf")], (2, 1.0, 1.0)),
        ("all-nan", [float("nan")] * 2, (2, None, None)),
    ]:
        for x in (np.array(values, np.float32), torch.tensor(values, dtype=torch.bfloat16)):
            probe.fingerprint(name, x)
            got = rec.fingerprints[name]
            assert (got["nonfinite"], got["min"], got["max"]) == want, (name, x.dtype)


def test_a_fingerprint_hashes_what_record_input_hashes_for_every_kind_of_tensor(
    rec: Any,
) -> None:
    # The fingerprint hashes the numpy view it reduced (or the tensor's own bits where it was
    # widened); either way it is the content hash of the value, as record_input's is.
    base = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4) / 7
    values: dict[str, Any] = {
        "f32": base,
        "f32 strided": base.permute(2, 0, 1),
        "bf16": base.to(torch.bfloat16),
        "f16": base.to(torch.float16),
        "i64": torch.arange(6).reshape(2, 3),
        "bool": base > 1.0,
        "u8": torch.arange(6, dtype=torch.uint8),
        "np strided": np.arange(24, dtype=np.float32).reshape(2, 3, 4).transpose(2, 0, 1),
    }
    for name, x in values.items():
        probe.fingerprint(name, x)
        probe.record_input(name, x)
    for name in values:
        assert rec.fingerprints[name]["hash"] == rec.inputs[name], name
    hashes = {rec.inputs[n] for n in values}
    assert len(hashes) == len(values)  # dtype, layout and values all count


def test_a_small_fingerprint_is_of_what_the_tensor_held_at_the_call(rec: Any) -> None:
    # Small tensors are copied at the call and described after the target returns: a change
    # the pipeline makes in place afterwards is not in the fingerprint, and the order holds.
    latents = torch.zeros(4, 4)
    frames = np.zeros((2, 4, 4, 3), np.uint8)
    big = torch.ones(1 << 19)  # 2 MiB: described at the call
    probe.fingerprint("step0", latents)
    probe.fingerprint("frames", frames)
    probe.fingerprint("big", big)
    latents.add_(1.0)
    frames += 7
    big.mul_(3.0)
    probe.fingerprint("step1", latents)
    recorded = rec.recorded_fingerprints
    assert list(recorded) == ["step0", "frames", "big", "step1"]
    assert recorded["big"]["max"] == 1.0  # already described
    assert {n for n, v in recorded.items() if isinstance(v, probe.Held)} == {
        "step0",
        "frames",
        "step1",
    }
    fps = rec.fingerprints  # reading them describes what is held
    assert not any(isinstance(v, probe.Held) for v in recorded.values())
    assert (fps["step0"]["max"], fps["step1"]["max"], fps["frames"]["max"]) == (0.0, 1.0, 0.0)
    assert fps["step0"]["hash"] == probe.hash_input(torch.zeros(4, 4))
    assert fps["step0"]["hash"] != fps["step1"]["hash"]


def test_a_small_input_is_hashed_as_it_was_at_the_call(rec: Any) -> None:
    noise = torch.randn(2, 3, generator=torch.Generator().manual_seed(0))
    want = probe.hash_input(noise.clone())
    probe.record_input("noise", noise)
    probe.record_input("prompt", "a cat")
    noise.zero_()  # the pipeline reuses the buffer after the call
    assert list(rec.recorded_inputs) == ["noise", "prompt"]
    assert isinstance(rec.recorded_inputs["noise"], probe.Held)
    assert rec.inputs["noise"] == want != probe.hash_input(noise)


def test_fingerprint_extremes_and_mean_are_ndarrays_own() -> None:
    # The probe reduces through the ufuncs directly; the values are what ndarray's min, max
    # and mean(dtype=float64) give, for every kind it describes.
    rng = np.random.default_rng(0)
    for a in (
        (rng.standard_normal((1, 16, 3, 4, 4)) * 100).astype(np.float32),
        rng.integers(0, 256, (9, 32, 32, 3), dtype=np.uint8),
        rng.standard_normal(100_003).astype(np.float32),
        rng.integers(-5, 5, (3, 5)),
        rng.random(7) > 0.5,
    ):
        got = probe.describe(a)
        want = (float(a.min()), float(a.max()), float(a.mean(dtype=np.float64)))
        assert (got["min"], got["max"], got["mean"]) == want, a.dtype


def test_an_array_over_the_hold_size_is_described_at_the_call(rec: Any) -> None:
    # Over 1 MiB, a numpy array or torch tensor is described (or hashed) at the call, and the
    # attempt's end describes the small rest: nothing large is held, nothing is lost.
    big = np.ones(1 << 18)  # 2 MiB of float64
    small = np.zeros(4, np.float32)
    for name, x in (("big-np", big), ("big-torch", torch.from_numpy(big)), ("small", small)):
        probe.fingerprint(name, x)
        probe.record_input(name, x)
    held = {n for n, v in rec.recorded_fingerprints.items() if isinstance(v, probe.Held)}
    assert held == {"small"}
    probe._end()
    assert rec.fingerprints["big-np"]["max"] == 1.0 and rec.fingerprints["small"]["max"] == 0.0
    assert rec.inputs["big-np"] == probe.hash_input(big)
    assert rec.inputs["small"] == probe.hash_input(small)
