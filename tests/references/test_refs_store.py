"""The read-only reference store: lookup with fallback, hash verification, verify()."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from refs_helpers import ENV, MakeRun, audio, video

from harness.errors import ReferenceStoreError
from harness.references.bless import bless
from harness.references.store import MANIFEST_NAME, ReferenceStore, file_sha256, platform_chain


def _bless_all(make_run: MakeRun, store_root: Path, **kw: object) -> Path:
    run = make_run(
        "r1",
        {
            "t2va": {
                "video": ("video", video(0), {"fps": 8}),
                "audio": ("audio", audio(), {"sample_rate": 16000}),
                "latents": ("tensor", np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8), {}),
                "mp4": ("file", np.zeros(3, np.uint8), {}),
            }
        },
    )
    bless(run, store_root, reason="initial references", who="alice", **kw)  # type: ignore[arg-type]
    return run


def test_platform_chain() -> None:
    assert platform_chain("hip", "mi300x") == ["mi300x", "hip", "any"]
    assert platform_chain("cpu", None) == ["cpu", "any"]
    assert platform_chain("cuda", "cuda") == ["cuda", "any"]


def test_bless_round_trip_and_manifest_fields(make_run: MakeRun, store_root: Path) -> None:
    _bless_all(make_run, store_root)
    store = ReferenceStore(store_root)
    entry = store.lookup("t2va", "video", ["cpu", "any"])
    assert entry.platform_class == "any" and entry.kind == "video"
    np.testing.assert_array_equal(store.load_video(entry), video(0))
    pcm, rate = store.load_audio(store.lookup("t2va", "audio", ["any"]))
    assert rate == 16000 and pcm.dtype == np.float32
    np.testing.assert_array_equal(pcm, audio())  # float32 WAV is bit-exact
    tensor = store.load_tensor(store.lookup("t2va", "latents", ["any"]))
    np.testing.assert_array_equal(tensor, np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8))
    with pytest.raises(ReferenceStoreError, match="no reference for output 'mp4'"):
        store.lookup("t2va", "mp4", ["any"])  # file outputs are not stored

    doc = json.loads((store_root / MANIFEST_NAME).read_text())
    assert doc["format_version"] == 2  # 2: with layered references
    raw = doc["references"]["t2va"]["any"]["video"]
    assert [f["frame"] for f in raw["files"]] == [0, 1, 2, 3]
    for f in raw["files"]:
        assert f["path"].endswith(".png") and f["sha256"] == file_sha256(store_root / f["path"])
    assert raw["case_id"] == "t2va" and raw["reference_id"] == "t2va" and raw["output"] == "video"
    assert raw["environment"]["hostname"] == ENV["hostname"]
    assert raw["harness_version"]
    assert raw["blessed"]["reason"] == "initial references"
    assert raw["blessed"]["who"] == "alice" and raw["blessed"]["when"].endswith("+00:00")
    assert raw["blessed"]["run_id"] == "r1" and raw["fps"] == 8
    assert store.verify() == []


def test_lookup_prefers_platform_specific(make_run: MakeRun, store_root: Path) -> None:
    _bless_all(make_run, store_root)
    other = make_run("r2", {"t2va": {"video": ("video", video(7), {"fps": 8})}})
    bless(
        other,
        store_root,
        reason="MI300X conv kernels differ",
        who="bob",
        platform_class="mi300x",
        force=True,  # video(7) is far from the ``any`` reference it shadows
    )
    store = ReferenceStore(store_root)
    pinned = store.lookup("t2va", "video", platform_chain("hip", "mi300x"))
    assert pinned.platform_class == "mi300x"
    np.testing.assert_array_equal(store.load_video(pinned), video(7))
    fallback = store.lookup("t2va", "video", platform_chain("cuda", "h100"))
    assert fallback.platform_class == "any"
    np.testing.assert_array_equal(store.load_video(fallback), video(0))
    with pytest.raises(ReferenceStoreError, match=r"no reference 'nope'"):
        store.lookup("nope", "video", ["any"])
    assert store.verify() == []


def test_tampered_file_names_file_and_hashes(make_run: MakeRun, store_root: Path) -> None:
    _bless_all(make_run, store_root)
    store = ReferenceStore(store_root)
    entry = store.lookup("t2va", "video", ["any"])
    target = store_root / entry.files[1].path
    data = bytearray(target.read_bytes())
    data[-20] ^= 0xFF
    target.write_bytes(bytes(data))
    actual = file_sha256(target)
    with pytest.raises(ReferenceStoreError) as info:
        store.load_video(entry)
    msg = str(info.value)
    assert str(target) in msg and entry.files[1].sha256 in msg and actual in msg
    problems = store.verify()
    assert len(problems) == 1 and str(target) in problems[0] and actual in problems[0]


def test_missing_and_unlisted_files_reported(make_run: MakeRun, store_root: Path) -> None:
    _bless_all(make_run, store_root)
    store = ReferenceStore(store_root)
    entry = store.lookup("t2va", "audio", ["any"])
    missing = store_root / entry.files[0].path
    missing.unlink()
    stray = store_root / "t2va" / "any" / "stray.png"
    stray.write_bytes(b"not in the manifest")
    with pytest.raises(ReferenceStoreError, match="is missing"):
        store.load_audio(entry)
    problems = store.verify()
    assert any(str(missing) in p and "missing" in p for p in problems)
    assert any(str(stray) in p and "not in the manifest" in p for p in problems)
    assert len(problems) == 2


def test_unknown_format_version(store_root: Path) -> None:
    store_root.mkdir()
    (store_root / MANIFEST_NAME).write_text(json.dumps({"format_version": 99, "references": {}}))
    store = ReferenceStore(store_root)  # reading is lazy: the check that needs it fails
    with pytest.raises(ReferenceStoreError, match="format_version 99 is not supported"):
        store.lookup("t2va", "video", ["any"])
    (problem,) = store.verify()
    assert "format_version 99 is not supported by this harness" in problem


def test_store_reads_never_write(make_run: MakeRun, store_root: Path) -> None:
    _bless_all(make_run, store_root)
    before = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in store_root.rglob("*")}
    store = ReferenceStore(store_root)
    for entry in store.entries.values():
        store.load(entry)
    store.verify()
    after = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in store_root.rglob("*")}
    assert before == after
    public = [n for n in dir(store) if not n.startswith("_")]
    assert not [n for n in public if any(w in n for w in ("write", "save", "bless", "put"))]
    assert os.access(store_root, os.W_OK)  # read-only by design, not by permissions


def test_verify_missing_store(tmp_path: Path) -> None:
    assert ReferenceStore(tmp_path / "typo").verify() == [
        f"{tmp_path / 'typo'}: reference store folder does not exist"
    ]


def test_load_selected_frames_verifies_only_those(make_run: MakeRun, store_root: Path) -> None:
    _bless_all(make_run, store_root)
    store = ReferenceStore(store_root)
    entry = store.lookup("t2va", "video", ["any"])
    np.testing.assert_array_equal(store.load_video(entry, [0, 3]), video(0)[[0, 3]])
    (store_root / entry.files[2].path).write_bytes(b"x")
    np.testing.assert_array_equal(store.load_video(entry, [0, 3]), video(0)[[0, 3]])
    with pytest.raises(ReferenceStoreError, match="does not match the manifest"):
        store.load_video(entry, [2])
    with pytest.raises(ReferenceStoreError, match="has 4 frames, no frame 9"):
        store.load_video(entry, [9])


def test_each_file_is_verified_and_decoded_once_per_process(
    make_run: MakeRun, store_root: Path
) -> None:
    from harness.references.verified import VERIFIED

    _bless_all(make_run, store_root)
    before = VERIFIED.hashed
    store = ReferenceStore(store_root)
    entry = store.lookup("t2va", "video", ["any"])
    first = store.load_video(entry)
    second = store.load_video(entry, [0, 1])  # e.g. a second check on the same attempt
    assert VERIFIED.hashed - before == len(entry.files)  # not once per check
    np.testing.assert_array_equal(second, first[[0, 1]])
    # One store (one attempt's checks) loads an entry once; what it hands out is read-only.
    assert store.load_video(entry) is first
    with pytest.raises(ValueError):
        first[0, 0, 0, 0] = 1
    cached = store._read(entry.files[0], "png", lambda p: None)  # served from the memo
    with pytest.raises(ValueError):  # read-only: a check cannot alter the next one's reference
        cached[0, 0, 0] = 1
    # A fresh store (the next attempt in this worker) reuses what was verified...
    np.testing.assert_array_equal(ReferenceStore(store_root).load_video(entry), first)
    assert VERIFIED.hashed - before == len(entry.files)
    # ...until a file changes (same size here: the mtime tells), which is hashed again.
    path = store_root / entry.files[1].path
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    st = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000))
    with pytest.raises(ReferenceStoreError, match="does not match the manifest"):
        ReferenceStore(store_root).load_video(entry)
    assert VERIFIED.hashed - before == len(entry.files) + 1
    # `harness refs verify` re-hashes every file, memo or not.
    assert any("does not match the manifest" in line for line in store.verify())
    assert VERIFIED.hashed - before == len(entry.files) + 1


def test_reference_file_or_folder_linked_from_outside_is_refused(
    make_run: MakeRun, store_root: Path, tmp_path: Path
) -> None:
    import shutil

    _bless_all(make_run, store_root)
    entry = ReferenceStore(store_root).lookup("t2va", "video", ["any"])
    frame = store_root / entry.files[0].path
    outside = tmp_path / "outside.png"
    shutil.move(frame, outside)
    frame.symlink_to(outside)  # same bytes, same hash: only where it lies is wrong
    with pytest.raises(ReferenceStoreError, match="outside the store"):
        ReferenceStore(store_root).load_video(entry, [0])
    frame.unlink()
    shutil.move(outside, frame)
    folder = frame.parent
    shutil.move(folder, tmp_path / "folder")
    folder.symlink_to(tmp_path / "folder", target_is_directory=True)
    with pytest.raises(ReferenceStoreError, match="outside the store"):
        ReferenceStore(store_root).load_video(entry, [1])


def test_a_folder_between_the_root_and_an_entry_linked_from_outside_is_refused_by_the_next_store(
    make_run: MakeRun, store_root: Path, tmp_path: Path
) -> None:
    import shutil

    _bless_all(make_run, store_root)
    entry = ReferenceStore(store_root).lookup("t2va", "video", ["any"])
    assert ReferenceStore(store_root).load_video(entry, [0]).shape[0] == 1  # resolved, cached
    ref_folder = store_root / "t2va"
    shutil.move(ref_folder, tmp_path / "t2va")
    ref_folder.symlink_to(tmp_path / "t2va", target_is_directory=True)
    with pytest.raises(ReferenceStoreError, match="outside the store"):
        ReferenceStore(store_root).load_video(entry, [0])


def test_a_root_that_now_leads_to_another_store_is_that_store(
    make_run: MakeRun, store_root: Path, tmp_path: Path
) -> None:
    import shutil

    _bless_all(make_run, store_root)
    other = tmp_path / "other-store"
    shutil.copytree(store_root, other)
    entry = ReferenceStore(store_root).lookup("t2va", "video", ["any"])
    (other / entry.files[0].path).write_bytes(b"not that frame")
    link = tmp_path / "store-link"
    link.symlink_to(store_root, target_is_directory=True)
    assert ReferenceStore(link).load_video(entry, [0]).shape[0] == 1
    link.unlink()
    link.symlink_to(other, target_is_directory=True)
    with pytest.raises(ReferenceStoreError, match=f"{link}/.*does not match the manifest"):
        ReferenceStore(link).load_video(entry, [0])


def test_a_rewritten_manifest_is_read_again_by_the_next_store(
    make_run: MakeRun, store_root: Path
) -> None:
    _bless_all(make_run, store_root)
    first = ReferenceStore(store_root).manifest
    assert ReferenceStore(store_root).manifest is first  # parsed once per process
    bless(make_run("r2", {"other": {"video": ("video", video(1), {})}}), store_root, reason="r")
    again = ReferenceStore(store_root)
    assert again.manifest is not first
    np.testing.assert_array_equal(
        again.load_video(again.lookup("other", "video", ["any"])), video(1)
    )
