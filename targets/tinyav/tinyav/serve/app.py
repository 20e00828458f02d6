"""The HTTP face of ``tinyav.serve`` (FastAPI): health and video generation.

``GET /health``: 503 ``{"status": "loading"}`` until the weights are loaded, then 200
``{"status": "ok", "tp": N}`` (503 ``{"status": "failed", "error": ...}`` if loading failed).

``POST /v1/videos/generations`` with JSON ``{"prompt", "seed", "steps", "height", "width",
"num_frames", "fps", "guidance", "negative_prompt", "request_id"}`` (all but ``prompt``
optional) answers::

    {"request_id": "req-…", "object": "video.generation", "model": "tinyav", "tp": 1,
     "created": 1764650000, "elapsed_s": 0.41,
     "video": {"format": "mp4", "b64": "…", "num_frames": 8, "height": 32, "width": 32,
               "fps": 8},
     "audio": {"format": "wav", "encoding": "pcm_s16le", "channels": 1, "b64": "…",
               "sample_rate": 16000, "num_samples": 16000},
     "params": {…the request's generation fields…}}

An ill-typed body or an unknown field is a 422 naming the field; a request the pipeline
refuses (sizes that do not fit its codec) a 400 quoting why; a failure while generating a 500
with the error's text. Requests run one at a time, in arrival order, on one engine thread
(every rank must see them in the same order).
"""

from __future__ import annotations

import asyncio
import base64
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from tinyav.serve.engine import Engine


class GenerationBody(BaseModel):
    """The body of ``POST /v1/videos/generations``."""

    model_config = ConfigDict(extra="forbid")

    prompt: str = Field(min_length=1, max_length=2000)
    negative_prompt: str = ""
    seed: int = 0
    steps: int = Field(4, ge=1, le=100)
    height: int = Field(64, ge=16, le=1024)
    width: int = Field(64, ge=16, le=1024)
    num_frames: int = Field(16, ge=4, le=256)
    fps: int = Field(8, ge=1, le=120)
    guidance: float = 3.0
    request_id: str | None = Field(None, min_length=1, max_length=200)


class ServerState:
    """The engine (once loaded) and the one thread every engine call runs on."""

    def __init__(self, tp: int) -> None:
        self.tp = tp
        self.engine: Engine | None = None
        self.error: str | None = None
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tinyav-engine")


def build_app(state: ServerState) -> FastAPI:
    """The FastAPI application serving ``state``."""
    app = FastAPI(title="tinyav.serve")

    @app.get("/health")
    def health() -> JSONResponse:
        if state.engine is not None:
            return JSONResponse({"status": "ok", "tp": state.tp})
        if state.error is not None:
            return JSONResponse({"status": "failed", "error": state.error}, status_code=503)
        return JSONResponse({"status": "loading"}, status_code=503)

    @app.post("/v1/videos/generations")
    async def generate(body: GenerationBody) -> JSONResponse:
        engine = state.engine
        if engine is None:
            return JSONResponse({"detail": "model is still loading"}, status_code=503)
        rid = body.request_id or f"req-{uuid.uuid4().hex[:16]}"
        params = body.model_dump(exclude={"request_id"})
        job: dict[str, Any] = {"op": "generate", "request_id": rid, "request": params}
        try:
            engine.validate(job)
        except ValueError as e:
            return JSONResponse({"detail": str(e), "request_id": rid}, status_code=400)
        future = state.executor.submit(engine.submit, job)
        try:
            out = await asyncio.wrap_future(future)
        except Exception as e:
            detail = f"{type(e).__name__}: {e}"
            return JSONResponse({"detail": detail, "request_id": rid}, status_code=500)
        return JSONResponse(
            {
                "request_id": rid,
                "object": "video.generation",
                "model": "tinyav",
                "tp": state.tp,
                "created": int(time.time()),
                "elapsed_s": out.elapsed_s,
                "video": {
                    "format": "mp4",
                    "b64": base64.b64encode(out.mp4).decode("ascii"),
                    "num_frames": out.num_frames,
                    "height": out.height,
                    "width": out.width,
                    "fps": out.fps,
                },
                "audio": {
                    "format": "wav",
                    "encoding": "pcm_s16le",
                    "channels": 1,
                    "b64": base64.b64encode(out.wav).decode("ascii"),
                    "sample_rate": out.sample_rate,
                    "num_samples": out.num_samples,
                },
                "params": params,
            }
        )

    return app
