"""Ids and paths (issue #12): every path bless writes is slugged and inside the store, the
cleanup of a replaced entry never deletes another entry's files, and ``verify`` reports files a
manifest places outside their entry's folder. Report fixtures are written by hand (through
``make_run``) because case-file validation would reject ids like ``..``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from refs_helpers import MakeRun, video

from harness.errors import ReferenceStoreError
from harness.fsio import slug
from harness.references.bless import bless
from harness.references.store import MANIFEST_NAME, ReferenceStore, file_sha256

IDS = ("..", "x y", "x_y")


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


Refs = dict[str, Any]  # the manifest's "references" table


def _edit_manifest(root: Path, edit: Callable[[Refs], None]) -> None:
    doc = json.loads((root / MANIFEST_NAME).read_text())
    edit(doc["references"])
    (root / MANIFEST_NAME).write_text(json.dumps(doc))


def test_awkward_ids_stay_inside_and_apart(
    make_run: MakeRun, store_root: Path, tmp_path: Path
) -> None:
    # the same content for all three: only the id tells their folders apart
    run = make_run("ids", {cid: {"video": ("video", video(0), {})} for cid in IDS})
    bless(run, store_root, reason="r", who="a")
    outside = [p for p in _files(tmp_path) if not p.is_relative_to(tmp_path / "runs")]
    assert all(p.resolve().is_relative_to(store_root.resolve()) for p in outside)
    store = ReferenceStore(store_root)
    folders = {
        cid: {f.path.split("/")[0] for f in store.lookup(cid, "video", ["any"]).files}
        for cid in IDS
    }
    assert folders == {cid: {slug(cid)} for cid in IDS} and len({slug(c) for c in IDS}) == 3
    assert store.verify() == []

    # re-blessing "x y" leaves "x_y" (and "..") alone
    again = make_run("again", {"x y": {"video": ("video", video(1), {})}})
    bless(again, store_root, reason="r", who="a", force=True)
    store = ReferenceStore(store_root)
    np.testing.assert_array_equal(store.load_video(store.lookup("x_y", "video", ["any"])), video(0))
    np.testing.assert_array_equal(store.load_video(store.lookup("x y", "video", ["any"])), video(1))
    assert store.verify() == []


def test_rebless_keeps_files_another_entry_lists(make_run: MakeRun, store_root: Path) -> None:
    # A store from before ids were slugged injectively: "x y" and "x_y" with equal content
    # shared one folder, and replacing one used to delete the folder under the other.
    bless(make_run("old", {"x_y": {"video": ("video", video(0), {})}}), store_root, reason="r")

    def share(refs: Refs) -> None:
        entry = json.loads(json.dumps(refs["x_y"]["any"]["video"]))
        entry["reference_id"] = entry["case_id"] = "x y"
        refs["x y"] = {"any": {"video": entry}}

    _edit_manifest(store_root, share)
    shared = _files(store_root)

    run = make_run("new", {"x y": {"video": ("video", video(1), {})}})
    bless(run, store_root, reason="new content", who="a", force=True)
    assert set(shared) <= set(_files(store_root))
    store = ReferenceStore(store_root)
    np.testing.assert_array_equal(store.load_video(store.lookup("x_y", "video", ["any"])), video(0))
    np.testing.assert_array_equal(store.load_video(store.lookup("x y", "video", ["any"])), video(1))
    assert store.verify() == []


def _point_outside(store_root: Path, beside: Path) -> None:
    """Make the manifest entry of ".." list a file beside the store, with its right hash."""
    beside.mkdir()
    target = beside / "frame_00000.png"
    target.write_bytes(b"not a reference")
    rel = f"../{beside.name}/frame_00000.png"

    def edit(refs: Refs) -> None:
        refs[".."]["any"]["video"]["files"][0] = {
            "path": rel,
            "sha256": file_sha256(target),
            "frame": 0,
        }

    _edit_manifest(store_root, edit)


def test_verify_reports_files_outside_their_folder(
    make_run: MakeRun, store_root: Path, tmp_path: Path
) -> None:
    run = make_run("v", {cid: {"video": ("video", video(i), {})} for i, cid in enumerate(IDS)})
    bless(run, store_root, reason="r", who="a")
    _point_outside(store_root, tmp_path / "beside")
    problems = ReferenceStore(store_root).verify()
    assert any("../beside/frame_00000.png" in p and "outside" in p for p in problems), problems

    # a file in another entry's folder is misplaced too
    def cross(refs: Refs) -> None:
        refs["x y"]["any"]["video"]["files"] = refs["x_y"]["any"]["video"]["files"]

    _edit_manifest(store_root, cross)
    problems = ReferenceStore(store_root).verify()
    assert any(
        p.startswith("x y/any/video: file x_y/any/video/") and "expected folder" in p
        for p in problems
    ), problems


def test_store_never_reads_or_deletes_outside(
    make_run: MakeRun, store_root: Path, tmp_path: Path
) -> None:
    bless(make_run("o", {"..": {"video": ("video", video(0), {})}}), store_root, reason="r")
    _point_outside(store_root, tmp_path / "beside")
    store = ReferenceStore(store_root)
    with pytest.raises(ReferenceStoreError, match="outside the store"):
        store.load_video(store.lookup("..", "video", ["any"]))
    # replacing the entry must not delete what it (wrongly) listed beside the store
    bless(
        make_run("o2", {"..": {"video": ("video", video(1), {})}}),
        store_root,
        reason="r",
        force=True,
    )
    assert (tmp_path / "beside" / "frame_00000.png").is_file()


def test_bless_refuses_a_folder_that_resolves_outside(
    make_run: MakeRun, store_root: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    store_root.mkdir()
    (store_root / "c").symlink_to(elsewhere, target_is_directory=True)
    run = make_run("l", {"c": {"video": ("video", video(0), {})}})
    with pytest.raises(ReferenceStoreError, match="outside the reference store"):
        bless(run, store_root, reason="r", who="a")
    assert list(elsewhere.iterdir()) == [] and not (store_root / MANIFEST_NAME).exists()
