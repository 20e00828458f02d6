"""The diffusers pipelines are built identically in two processes and instrumented only from
outside: hooks report stages, steps, inputs and fingerprints, and are gone afterwards, also
when the call fails; nothing in diffusers is replaced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from diffcases import IN_PROCESS, require_diffusers, weights_digest
from diffusers_scenarios import components, scenarios  # diffusers is imported where used
from diffusers_scenarios.instrument import WAN_STAGES, Instrument, hook_counts

from harness import probe

require_diffusers("the diffusers extra is not installed")
pytestmark = IN_PROCESS


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Any]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    rec = probe._begin(seed=42, platform="cpu", output_dir=tmp_path / "out")
    try:
        yield rec
    finally:
        probe._end()
        torch.set_num_threads(before)


@pytest.mark.slow
def test_two_processes_build_identical_weights_and_the_seed_matters(
    fresh_digests: dict[tuple[str, str, int], str],
) -> None:
    """A fresh interpreter (``fresh_digests``, tests/diffusers/conftest.py) and this one (whose
    global generator and threads earlier tests have used) build the same weights; another seed
    builds others. (One fresh process: a second cost 4-14 s of CI and checked nothing this one
    does not.)"""
    for name in ("ltx2", "wan"):
        fresh = fresh_digests[("pipeline", name, 42)]
        assert fresh == weights_digest(components.build(name, 42)), name
        assert fresh_digests[("pipeline", name, 43)] != fresh, name


def test_building_leaves_the_global_generator_alone() -> None:
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    components.build_wan(42)
    assert torch.equal(torch.rand(3), expected)


def test_component_seeds_differ_per_component_and_are_stable() -> None:
    assert components.component_seed(42, "vae") != components.component_seed(42, "transformer")
    assert components.component_seed(42, "vae") == components.component_seed(42, "vae")


def wan_call(pipe: Any, steps: int = 2, **extra: Any) -> Any:
    latents = torch.randn(1, 16, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    kw = scenarios.wan_kwargs(
        prompt="a cat sitting",
        negative_prompt="rain",
        height=32,
        width=32,
        num_frames=9,
        steps=steps,
        guidance_scale=5.0,
        latents=latents,
    )
    return pipe(**{**kw, **extra})


def test_hooks_report_stages_steps_inputs_and_are_removed(recorder: Any) -> None:
    pipe = components.build_wan(42)
    classes = {type(m): dict(vars(type(m))) for m in pipe.components.values() if m is not None}
    call = type(pipe).__call__
    assert all(n == 0 for _, n in hook_counts(pipe))
    with Instrument(pipe, stages=WAN_STAGES, steps=2) as inst:
        assert sum(n for _, n in hook_counts(pipe)) == 8  # text 2, transformer 2, 2 stages x 2
        wan_call(pipe, callback_on_step_end=inst.callback)
    assert all(n == 0 for _, n in hook_counts(pipe)), dict(hook_counts(pipe))
    # Nothing of diffusers (or torch) was replaced on the classes.
    assert type(pipe).__call__ is call
    assert {type(m): dict(vars(type(m))) for m in pipe.components.values() if m} == classes
    assert list(recorder.stages) == [
        "TextEncodingStage",
        "DenoisingStage",
        "DenoisingStage.step00",
        "DenoisingStage.step01",
        "VideoDecodingStage",
    ]
    stages = recorder.stages
    assert (
        stages["DenoisingStage"]
        >= stages["DenoisingStage.step00"] + stages["DenoisingStage.step01"]
    )
    assert all(v > 0 for v in stages.values())
    # CFG: the prompt and the negative prompt, each encoded once, ids as the encoder got them.
    assert list(recorder.inputs) == ["prompt.token_ids.0", "prompt.token_ids.1"]
    assert recorder.inputs["prompt.token_ids.0"] != recorder.inputs["prompt.token_ids.1"]
    assert list(recorder.fingerprints) == [
        "text.hidden.0",
        "text.hidden.1",
        "denoise.step00",
        "denoise.step01",
    ]
    assert recorder.fingerprints["denoise.step00"]["shape"] == [1, 16, 3, 4, 4]


def test_a_failing_call_still_removes_every_hook_and_closes_its_stages(recorder: Any) -> None:
    pipe = components.build_wan(42)

    def boom(*_a: Any) -> None:
        raise RuntimeError("planted failure in the VAE decoder")

    with (
        pytest.raises(RuntimeError, match="planted"),
        Instrument(pipe, stages=WAN_STAGES, steps=2) as inst,
    ):
        # Registered after the instrument's own hooks, so it runs after its stage opened.
        handle = pipe.vae.decoder.register_forward_pre_hook(boom)
        wan_call(pipe, callback_on_step_end=inst.callback)
    handle.remove()
    assert all(n == 0 for _, n in hook_counts(pipe)), dict(hook_counts(pipe))
    # The denoising stages closed normally; the decoder's stage was opened and closed too.
    assert "DenoisingStage.step01" in recorder.stages
    assert "VideoDecodingStage" in recorder.stages


def test_the_scenario_runs_outside_the_harness_as_plain_code() -> None:
    assert not probe.active()
    out = scenarios.wan_t2v(seed=42, num_frames=5)
    assert out["video"].shape == (5, 32, 32, 3) and out["video"].dtype.name == "uint8"
    import diffusers

    assert diffusers.__version__  # the real package, not a stand-in
