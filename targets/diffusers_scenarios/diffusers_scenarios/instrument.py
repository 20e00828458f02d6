"""Instrumenting a diffusers pipeline from outside: forward hooks and the step callback.

Nothing in ``diffusers`` is edited or patched. :class:`Instrument` registers PyTorch forward
(pre-)hooks on the pipeline's modules and hands out a ``callback_on_step_end`` for the
pipeline call; leaving the ``with`` block removes every hook it registered, whatever happened
inside. What it reports through the probe:

- **stages**: a module's forward time under a stage name (``TextEncodingStage`` on the text
  encoder, ``VideoDecodingStage`` on ``vae.decoder`` — the VAE decodes through
  ``vae.decode``, never ``vae.forward`` — ``AudioDecodingStage`` on the audio VAE's decoder
  and the vocoder); a module called several times (Wan's VAE decodes frame by frame, CFG
  encodes two prompts) accumulates.
- **denoising**: ``DenoisingStage`` from the first transformer call to the end of the last
  step, and ``DenoisingStage.stepNN`` per step: from the step's first transformer call to
  its ``callback_on_step_end`` (so CFG's second call and the scheduler step count too).
- **fingerprints**: ``denoise.stepNN`` (the latents after each step, from the callback),
  ``denoise.stepNN.<output>`` for the transformer's other outputs (LTX-2's audio velocity),
  ``text.hidden.N`` per text-encoder call.
- **inputs**: ``prompt.token_ids.N``, the token ids each text-encoder call really received.

Example::

    with Instrument(pipe, stages=LTX2_STAGES, steps=2) as inst:
        out = pipe(prompt, num_inference_steps=2, callback_on_step_end=inst.callback)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

import torch

from harness import probe

#: module path (dotted attributes of the pipeline) -> stage name
LTX2_STAGES: Mapping[str, str] = {
    "text_encoder": "TextEncodingStage",
    "connectors": "TextConnectorStage",
    "vae.decoder": "VideoDecodingStage",
    "audio_vae.decoder": "AudioDecodingStage",
    "vocoder": "AudioDecodingStage",
}
WAN_STAGES: Mapping[str, str] = {
    "text_encoder": "TextEncodingStage",
    "vae.decoder": "VideoDecodingStage",
}
#: names of the transformer's outputs after the first (the first is the video velocity)
LTX2_EXTRA_OUTPUTS = ("audio_velocity",)


def module_at(pipe: Any, path: str) -> torch.nn.Module:
    """The module at a dotted attribute path of ``pipe``, or a ValueError naming the path."""
    obj = pipe
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"{type(pipe).__name__} has no module at '{path}' (no '{part}')")
    if not isinstance(obj, torch.nn.Module):
        raise ValueError(f"{type(pipe).__name__}.{path} is a {type(obj).__name__}, not a module")
    return obj


def _first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    for key in ("last_hidden_state", "sample"):
        got = getattr(value, key, None)
        if isinstance(got, torch.Tensor):
            return got
    hidden = getattr(value, "hidden_states", None)
    if isinstance(hidden, tuple | list) and hidden and isinstance(hidden[-1], torch.Tensor):
        return hidden[-1]
    if isinstance(value, tuple | list) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    return None


class Instrument(AbstractContextManager["Instrument"]):
    """Hooks on one pipeline for one call; see the module docstring for what is reported."""

    def __init__(
        self,
        pipe: Any,
        *,
        stages: Mapping[str, str],
        steps: int,
        transformer: str = "transformer",
        extra_outputs: tuple[str, ...] = (),
    ) -> None:
        self.pipe = pipe
        self.stages = dict(stages)
        self.steps = steps
        self.transformer = transformer
        self.extra_outputs = extra_outputs
        self._handles: list[Any] = []
        self._open: dict[str, list[AbstractContextManager[None]]] = {}
        self._step = 0
        self._in_step = False
        self._text_calls = 0

    # -- stage timing ----------------------------------------------------------------------------

    def _enter(self, key: str, name: str) -> None:
        cm = probe.stage(name)
        cm.__enter__()
        self._open.setdefault(key, []).append(cm)

    def _exit(self, key: str) -> None:
        stack = self._open.get(key)
        if stack:
            stack.pop().__exit__(None, None, None)

    def _hook_stage(self, path: str, name: str) -> None:
        module = module_at(self.pipe, path)
        key = f"module:{path}"

        def pre(_m: torch.nn.Module, _args: Any) -> None:
            self._enter(key, name)

        def post(_m: torch.nn.Module, _args: Any, _out: Any) -> None:
            self._exit(key)

        self._handles.append(module.register_forward_pre_hook(pre))
        # always_call: the stage closes even when forward raises.
        self._handles.append(module.register_forward_hook(post, always_call=True))

    # -- text encoder: token ids in, hidden states out --------------------------------------------

    def _hook_text(self) -> None:
        module = module_at(self.pipe, "text_encoder")

        def pre(_m: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            ids = kwargs.get("input_ids", args[0] if args else None)
            if isinstance(ids, torch.Tensor):
                probe.record_input(f"prompt.token_ids.{self._text_calls}", ids)

        def post(_m: torch.nn.Module, _args: Any, out: Any) -> None:
            tensor = _first_tensor(out)
            if tensor is not None:
                probe.fingerprint(f"text.hidden.{self._text_calls}", tensor)
            self._text_calls += 1

        self._handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        self._handles.append(module.register_forward_hook(post))

    # -- denoising: transformer calls and the step callback ---------------------------------------

    def _hook_transformer(self) -> None:
        module = module_at(self.pipe, self.transformer)

        def pre(_m: torch.nn.Module, _args: Any) -> None:
            if self._in_step:
                return
            if self._step == 0:
                self._enter("denoise", "DenoisingStage")
            self._enter("step", f"DenoisingStage.step{self._step:02d}")
            self._in_step = True

        def post(_m: torch.nn.Module, _args: Any, out: Any) -> None:
            if not self.extra_outputs or not isinstance(out, tuple | list):
                return
            for name, value in zip(self.extra_outputs, out[1:], strict=False):
                if isinstance(value, torch.Tensor):
                    probe.fingerprint(f"denoise.step{self._step:02d}.{name}", value)

        self._handles.append(module.register_forward_pre_hook(pre))
        self._handles.append(module.register_forward_hook(post))

    def callback(
        self, _pipe: Any, step: int, _timestep: Any, kwargs: dict[str, Any]
    ) -> dict[str, Any]:
        """``callback_on_step_end``: fingerprint the step's latents, close the step's stage."""
        latents = kwargs.get("latents")
        if isinstance(latents, torch.Tensor):
            probe.fingerprint(f"denoise.step{step:02d}", latents)
        self._exit("step")
        self._in_step = False
        self._step = step + 1
        if self._step >= self.steps:
            self._exit("denoise")
        return {}

    # -- the context -----------------------------------------------------------------------------

    def __enter__(self) -> Instrument:
        try:
            self._hook_text()
            self._hook_transformer()
            for path, name in self.stages.items():
                self._hook_stage(path, name)
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        """Remove every hook and close every stage still open (innermost first)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for stack in reversed(list(self._open.values())):
            while stack:
                with contextlib.suppress(Exception):
                    stack.pop().__exit__(None, None, None)
        self._open.clear()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.remove()


def hook_counts(pipe: Any) -> Iterator[tuple[str, int]]:
    """``(component, number of forward hooks and pre-hooks)`` over the pipeline's modules and
    their submodules: all zero before and after an :class:`Instrument` block."""
    for name, component in pipe.components.items():
        if isinstance(component, torch.nn.Module):
            n = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in component.modules())
            yield name, n
