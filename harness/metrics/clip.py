"""CLIP image-to-image cosine similarity per frame, with a model loaded from a local directory.

The model directory (a ``transformers.CLIPModel`` saved with ``save_pretrained``) comes from the
``model_path`` argument or the ``HARNESS_CLIP_MODEL`` environment variable; nothing is ever
downloaded (``local_files_only=True``). With neither set the metric is *not run*:
:func:`clip_similarity` raises :class:`MetricNotRun` and :class:`CLIPSimilarity` returns a
result with ``status="not_run"`` and the reason; it never passes.

Preprocessing is done in torch on the whole batch, from ``preprocessor_config.json`` when the
directory has one (else the model's ``image_size`` and the OpenAI CLIP mean/std): resize the
shortest edge (bicubic, antialiased), centre-crop, scale to 0..1, normalise. It avoids a PIL
round trip per frame; on frames already at the crop size it equals ``CLIPImageProcessor``.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from harness.errors import InputError, MetricNotRun
from harness.metrics._base import Metric, MetricResult, Reduce, as_frames

if TYPE_CHECKING:
    import torch

__all__ = ["ENV_VAR", "CLIPSimilarity", "clip_similarity", "resolve_model_path"]

ENV_VAR = "HARNESS_CLIP_MODEL"
_OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
_OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


def resolve_model_path(model_path: str | os.PathLike[str] | None = None) -> Path:
    """The CLIP model directory from the argument, else ``$HARNESS_CLIP_MODEL``.

    Raises :class:`MetricNotRun` when neither is set, :class:`InputError` when the configured
    directory does not exist (a misconfiguration, not a reason to skip).
    """
    raw = os.fspath(model_path) if model_path is not None else os.environ.get(ENV_VAR, "")
    if not raw:
        raise MetricNotRun(
            f"no CLIP model configured: pass model_path or set {ENV_VAR} to a local directory "
            "holding a transformers CLIPModel"
        )
    path = Path(raw).expanduser()
    if not (path / "config.json").is_file():
        source = "model_path" if model_path is not None else ENV_VAR
        raise InputError(
            f"CLIP model {source}={raw!r} is not a directory with config.json "
            "(expected a local transformers CLIPModel saved with save_pretrained)"
        )
    return path


@functools.lru_cache(maxsize=2)
def _load(path: str, device: str) -> tuple[Any, dict[str, Any]]:
    """Model and preprocessing settings, cached: loading dominates a short comparison."""
    from transformers import CLIPModel

    model: Any
    try:
        model = CLIPModel.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as exc:
        raise InputError(f"CLIP model {path!r} could not be loaded: {exc}") from exc
    model = model.to(device).eval()
    image_size = int(model.config.vision_config.image_size)
    prep: dict[str, Any] = {
        "resize_shortest_edge": image_size,
        "crop": (image_size, image_size),
        "mean": list(_OPENAI_MEAN),
        "std": list(_OPENAI_STD),
        "source": "model config",
    }
    cfg_file = Path(path) / "preprocessor_config.json"
    if cfg_file.is_file():
        cfg = json.loads(cfg_file.read_text())
        size = cfg.get("size", image_size)
        if isinstance(size, dict):
            size = size.get("shortest_edge", size.get("height", image_size))
        crop = cfg.get("crop_size", image_size)
        if isinstance(crop, dict):
            crop = (int(crop.get("height", image_size)), int(crop.get("width", image_size)))
        else:
            crop = (int(crop), int(crop))
        prep.update(
            resize_shortest_edge=int(size) if cfg.get("do_resize", True) else None,
            crop=crop if cfg.get("do_center_crop", True) else None,
            mean=[float(v) for v in cfg.get("image_mean", _OPENAI_MEAN)],
            std=[float(v) for v in cfg.get("image_std", _OPENAI_STD)],
            source="preprocessor_config.json",
        )
    return model, prep


def _preprocess(frames: np.ndarray, prep: dict[str, Any], device: str) -> torch.Tensor:
    import torch
    import torch.nn.functional as F

    x = torch.from_numpy(np.ascontiguousarray(frames)).to(device)
    x = x.permute(0, 3, 1, 2).to(torch.float32)
    if frames.dtype.kind in "ui":
        x = x / 255.0
    if x.shape[1] == 1:
        x = x.expand(-1, 3, -1, -1)
    edge = prep["resize_shortest_edge"]
    if edge is not None:
        h, w = x.shape[-2:]
        scale = edge / min(h, w)
        size = (max(edge, round(h * scale)), max(edge, round(w * scale)))
        if size != (h, w):
            x = F.interpolate(x, size=size, mode="bicubic", antialias=True, align_corners=False)
            x = x.clamp(0.0, 1.0)
    if prep["crop"] is not None:
        ch, cw = prep["crop"]
        h, w = x.shape[-2:]
        top = max(0, (h - ch) // 2)
        left = max(0, (w - cw) // 2)
        x = x[..., top : top + ch, left : left + cw]
    mean = torch.tensor(prep["mean"], device=device).view(1, 3, 1, 1)
    std = torch.tensor(prep["std"], device=device).view(1, 3, 1, 1)
    return (x - mean) / std


def _features(model: Any, pixels: torch.Tensor) -> torch.Tensor:
    import torch

    out = model.get_image_features(pixel_values=pixels)
    # transformers 4.x returns the tensor, 5.x a ModelOutput with the projection in pooler_output.
    return out if isinstance(out, torch.Tensor) else out.pooler_output


def clip_similarity(
    pred: Any,
    target: Any,
    *,
    model_path: str | os.PathLike[str] | None = None,
    device: str = "cpu",
    batch_size: int = 32,
) -> np.ndarray:
    """Cosine similarity of CLIP image embeddings, per frame (float64 ``[T]``, 1 = same).

    Frames are uint8 (0..255) or float (0..1), ``[H, W, 3]`` or ``[T, H, W, 3]``.
    Raises :class:`MetricNotRun` if no model is configured.
    """
    import torch

    path = resolve_model_path(model_path)
    p, t = as_frames(pred, target)
    model, prep = _load(str(path), device)
    sims: list[np.ndarray] = []
    with torch.inference_mode():
        for start in range(0, p.shape[0], batch_size):
            fp = _features(model, _preprocess(p[start : start + batch_size], prep, device))
            ft = _features(model, _preprocess(t[start : start + batch_size], prep, device))
            s = torch.nn.functional.cosine_similarity(fp.double(), ft.double(), dim=-1)
            sims.append(s.cpu().numpy())
    return np.concatenate(sims).astype(np.float64)


class CLIPSimilarity(Metric):
    """CLIP image-image cosine similarity per frame (higher is better).

    Not configured -> ``compute()`` returns ``status="not_run"`` with the reason.
    """

    name: ClassVar[str] = "clip"
    unit: ClassVar[str] = "cosine"
    higher_is_better: ClassVar[bool] = True

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str] | None = None,
        device: str = "cpu",
        batch_size: int = 32,
        reduce: Reduce = "worst",
    ) -> None:
        super().__init__(reduce=reduce)
        self.device = device
        self.batch_size = batch_size
        self.not_run_reason: str | None = None
        self.model_path: Path | None = None
        try:
            self.model_path = resolve_model_path(model_path)
        except MetricNotRun as exc:
            self.not_run_reason = exc.reason

    @property
    def settings(self) -> dict[str, Any]:
        """Model directory, device, preprocessing (once loaded) and reduction."""
        out: dict[str, Any] = {
            "model_path": str(self.model_path) if self.model_path else None,
            "device": self.device,
            "reduce": self.reduce,
        }
        if self.model_path is not None and self._values:
            _, prep = _load(str(self.model_path), self.device)
            out["preprocess"] = {k: list(v) if isinstance(v, tuple) else v for k, v in prep.items()}
        return out

    def _measure(self, pred: Any, target: Any) -> list[float]:
        values = clip_similarity(
            pred,
            target,
            model_path=self.model_path,
            device=self.device,
            batch_size=self.batch_size,
        )
        return [float(v) for v in values]

    def update(self, pred: Any, target: Any) -> None:
        """Compare frames; a no-op when no model is configured (``compute`` says why)."""
        if self.not_run_reason is None:
            super().update(pred, target)

    def compute(self) -> MetricResult:
        """The aggregate, or a ``not_run`` result naming why CLIP was not computed."""
        if self.not_run_reason is not None:
            return MetricResult(
                name=self.name,
                value=None,
                unit=self.unit,
                higher_is_better=self.higher_is_better,
                per_frame=None,
                settings=self.settings,
                status="not_run",
                skipped_reason=self.not_run_reason,
            )
        return super().compute()
