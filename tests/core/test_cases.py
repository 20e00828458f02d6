"""Case files: every malformed variant is an error naming the file, the key and the expectation."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.cases import load_file, load_suite
from harness.errors import CaseFileError
from harness.model import case_from_json, case_to_json

GOOD = """
[[case]]
id = "t2va-int8"
kind = "pipeline"
target = "tinyav.scenarios.pipeline:t2va"
params = { quant = "int8", steps = 4 }
seed = 42
platforms = ["cpu", "cuda"]
repeats = 2
warmup = 1
timeout_s = 30
frames = [0, 5]
reference = "t2va-int8"
tags = ["smoke"]

[[case.checks]]
metric = "ssim"
output = "video"
op = ">="
threshold = 0.9
thresholds = { hip = 0.85 }
policy = "warn"

[case.budget]
DenoisingStage = 2.5
"""


def write(tmp_path: Path, body: str, name: str = "c.toml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return p


def test_good_file_loads_every_field(tmp_path: Path) -> None:
    (case,) = load_file(write(tmp_path, GOOD))
    assert case.id == "t2va-int8" and case.kind == "pipeline"
    assert case.params == {"quant": "int8", "steps": 4}
    assert case.platforms == ("cpu", "cuda") and case.repeats == 2 and case.warmup == 1
    assert case.frames == (0, 5) and case.budget == {"DenoisingStage": 2.5}
    check = case.checks[0]
    assert check.threshold_for(["mi300x", "hip", "any"]) == 0.85
    assert check.threshold_for(["cpu", "any"]) == 0.9
    assert check.policy == "warn" and check.name == "ssim(video)"
    assert case_from_json(case_to_json(case)) == case
    assert case.display("cpu") == "pipeline/t2va-int8[cpu]"


def test_single_case_file_without_array(tmp_path: Path) -> None:
    (case,) = load_file(write(tmp_path, 'id = "x"\nkind = "loader"\ntarget = "m:f"\n'))
    assert case.platforms == "any" and case.repeats == 1 and case.retries is None


BAD = [
    ("id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nseeed = 3\n", "unknown key 'seeed'"),
    (
        "id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nseed = 'three'\n",
        "key 'seed' = 'three': expected integer, got str",
    ),
    (
        "id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nrepeats = true\n",
        "key 'repeats' = True: expected integer, got bool",
    ),
    ("id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nrepeats = 0\n", "expected an integer from 1 to"),
    ("id = 'x'\nkind = 'loader'\ntarget = 'm:f'\ntimeout_s = -1\n", "positive number"),
    ("kind = 'loader'\ntarget = 'm:f'\n", "missing required key 'id'"),
    ("id = 'x'\ntarget = 'm:f'\n", "missing required key 'kind'"),
    (
        "id = 'x'\nkind = 'render'\ntarget = 'm:f'\n",
        "key 'kind' = 'render': expected one of loader, quant, pipeline, import",
    ),
    ("id = 'x'\nkind = 'loader'\n", "exactly one of 'target' or 'command'"),
    ("id = 'x'\nkind = 'loader'\ntarget = 'm:f'\ncommand = ['true']\n", "exactly one of"),
    ("id = 'x'\nkind = 'loader'\ntarget = 'no_colon'\n", 'expected a string "module:function"'),
    ("id = 'x'\nkind = 'loader'\ncommand = []\n", "non-empty list"),
    ("id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nplatforms = 'cuda'\n", '"any"'),
    ("id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nplatforms = [1]\n", "a list of strings"),
    ("id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nframes = 'middle'\n", "first-mid-last"),
    ("id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nframes = [-1]\n", "non-negative"),
    (
        "id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nbudget = { Denoise = 'fast' }\n",
        "key 'budget.Denoise' = 'fast'",
    ),
    (
        "id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nchecks = [{ metric = 'ssim', op = '>=' }]\n",
        "checks[0]: missing required key 'threshold'",
    ),
    (
        "id = 'x'\nkind = 'loader'\ntarget = 'm:f'\n"
        "checks = [{ metric = 'ssim', op = '=>', threshold = 1 }]\n",
        "key 'op' = '=>'",
    ),
    (
        "id = 'x'\nkind = 'loader'\ntarget = 'm:f'\n"
        "checks = [{ metric = 'ssim', op = '>=', threshold = 1, policy = 'maybe' }]\n",
        "key 'policy' = 'maybe'",
    ),
    (
        "id = 'x'\nkind = 'loader'\ntarget = 'm:f'\n"
        "checks = [{ metric = 'ssim', op = '>=', threshold = 1, colour = 'red' }]\n",
        "checks[0]: unknown key 'colour'",
    ),
    ("id = 'x'\nkind = 'loader'\ntarget = 'm:f'\nchecks = ['ssim']\n", "expected a table"),
    ("seed = 1\n[[case]]\nid = 'x'\nkind = 'loader'\ntarget = 'm:f'\n", "next to [[case]]"),
    ("id = 'x'\nkind = 'loader\n", "not valid TOML"),
    ("", "no case in file"),
    ("id = 'a[b]'\nkind = 'loader'\ntarget = 'm:f'\n", "key 'id' = 'a[b]': expected a non-empty"),
]


@pytest.mark.parametrize(("body", "expected"), BAD, ids=[e for _, e in BAD])
def test_malformed_case_file_names_file_key_and_expectation(
    tmp_path: Path, body: str, expected: str
) -> None:
    path = write(tmp_path, body, "broken.toml")
    with pytest.raises(CaseFileError) as info:
        load_file(path)
    message = str(info.value)
    assert str(path) in message
    assert expected in message


def test_error_in_second_case_names_that_case(tmp_path: Path) -> None:
    body = GOOD + "\n[[case]]\nid = 'other'\nkind = 'loader'\ntarget = 'm:f'\nseed = 1.5\n"
    with pytest.raises(
        CaseFileError, match=r"\[\[case\]\] #2 \(case 'other'\): key 'seed' = 1.5: expected integer"
    ):
        load_file(write(tmp_path, body))


def test_duplicate_id_names_both_files_and_the_rest_still_loads(tmp_path: Path) -> None:
    d = tmp_path / "cases"
    d.mkdir()
    write(d, "id = 'dup'\nkind = 'loader'\ntarget = 'm:f'\n", "a.toml")
    write(d, "id = 'dup'\nkind = 'quant'\ntarget = 'm:g'\n", "b.toml")
    write(d, "id = 'fine'\nkind = 'quant'\ntarget = 'm:h'\n", "c.toml")
    write(d, "id = 'x'\nkind = 'nope'\ntarget = 'm:h'\n", "d.toml")
    result = load_suite([d])
    assert sorted(c.id for c in result.cases) == ["dup", "fine"]
    messages = [str(e) for e in result.errors]
    dup = next(m for m in messages if "duplicate" in m)
    assert str(d / "a.toml") in dup and str(d / "b.toml") in dup
    assert any(str(d / "d.toml") in m and "kind" in m for m in messages)


def test_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CaseFileError, match="no such file or folder"):
        load_suite([tmp_path / "nope"])


def test_case_to_json_is_asdict_of_every_bundled_case() -> None:
    # case_to_json converts without dataclasses.asdict's deep copies; the JSON must not change
    import dataclasses

    from harness.cases import load_suite

    suite = load_suite([Path(__file__).resolve().parents[2] / "cases"])
    assert suite.cases and any(c.server is not None for c in suite.cases)
    for case in suite.cases:
        want = dataclasses.asdict(case)
        want["platforms"] = case.platforms if case.platforms == "any" else list(case.platforms)
        got = case_to_json(case)
        assert got == want and repr(got) == repr(want), case.id
        assert case_from_json(got) == case
