"""CLIP similarity with a tiny randomly initialised CLIPModel saved to disk: the real local
loading path, no download."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from harness import metrics
from harness.errors import InputError
from harness.metrics import clip as clip_mod

# On the xdist worker of the diffusers tests that build models in the test process
# (tests/diffusers/diffcases.py): that worker imports transformers once for both (importing it
# for CLIPModel alone cost ~2.5-3 s of CPU in another worker, measured 2026-12-05).
pytestmark = pytest.mark.xdist_group("diffusers-in-process")


def _save_tiny_clip(path: Path, *, with_processor: bool) -> Path:
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    config = CLIPConfig(
        text_config={
            "vocab_size": 64,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 16,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "pad_token_id": 1,
        },
        vision_config={
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=8,
    )
    CLIPModel(config).save_pretrained(path)
    if with_processor:
        CLIPImageProcessor(
            size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
        ).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _save_tiny_clip(tmp_path_factory.mktemp("clip"), with_processor=True)


def test_same_image_is_one_and_different_is_less(tiny_clip: Path, rng: np.random.Generator) -> None:
    a = rng.integers(0, 256, (2, 48, 64, 3), dtype=np.uint8)
    b = rng.integers(0, 256, (2, 48, 64, 3), dtype=np.uint8)
    same = metrics.clip_similarity(a, a, model_path=tiny_clip)
    np.testing.assert_allclose(same, 1.0, atol=1e-6)
    diff = metrics.clip_similarity(a, b, model_path=tiny_clip)
    assert diff.shape == (2,)
    assert np.all(diff < 0.9999)


def test_preprocessing_matches_clip_image_processor(
    tiny_clip: Path, rng: np.random.Generator
) -> None:
    from transformers import CLIPImageProcessor

    # At the crop size resize and crop are no-ops, so only rescale + normalise are compared.
    frames = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    processor = CLIPImageProcessor.from_pretrained(str(tiny_clip), local_files_only=True)
    expected = processor(images=list(frames), return_tensors="pt")["pixel_values"]
    _, prep = clip_mod._load(str(tiny_clip), "cpu")
    ours = clip_mod._preprocess(frames, prep, "cpu")
    torch.testing.assert_close(ours, expected.to(torch.float32), atol=1e-4, rtol=0)


def test_env_var_and_fallback_preprocessing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    path = _save_tiny_clip(tmp_path / "bare", with_processor=False)
    assert not (path / "preprocessor_config.json").exists()
    monkeypatch.setenv(clip_mod.ENV_VAR, str(path))
    frames = rng.integers(0, 256, (1, 40, 50, 3), dtype=np.uint8)
    m = metrics.get("clip")()
    m.update(frames, frames)
    r = m.compute()
    assert r.status == "ok"
    assert r.value == pytest.approx(1.0, abs=1e-6)
    assert r.settings["model_path"] == str(path)
    assert r.settings["preprocess"]["source"] == "model config"
    json.dumps(r.to_dict())


def test_not_configured_is_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(clip_mod.ENV_VAR, raising=False)
    frames = np.zeros((1, 32, 32, 3), np.uint8)
    with pytest.raises(metrics.MetricNotRun, match=clip_mod.ENV_VAR) as info:
        metrics.clip_similarity(frames, frames)
    assert "no CLIP model configured" in info.value.reason
    m = metrics.CLIPSimilarity()
    m.update(frames, frames)
    r = m.compute()
    assert r.status == "not_run"
    assert r.value is None
    assert r.skipped_reason and clip_mod.ENV_VAR in r.skipped_reason


def test_misconfigured_path_is_an_error(tmp_path: Path) -> None:
    frames = np.zeros((1, 32, 32, 3), np.uint8)
    with pytest.raises(InputError, match=r"config\.json"):
        metrics.clip_similarity(frames, frames, model_path=tmp_path / "missing")
