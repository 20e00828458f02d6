"""Where each reference file lives in a store, and the guard that keeps every path inside it.

An entry's files live in one folder per content, under a folder named for the entry::

    <slug(reference id)>/<slug(platform class)>/<slug(output)>/<content id>/<file>
    <slug(reference id)>/<slug(platform class)>/~layers/<content id>/layers.safetensors

Every component is :func:`harness.fsio.slug`-ged, which is injective and never resolves
outside its parent, so ``".."`` cannot climb out of the store and ``"x y"`` and ``"x_y"`` never
share a folder. Bless writes only there (:func:`ensure_inside` checks the resolved path before
anything is written) and deletes only files its replaced entry listed; ``verify`` reports any
file a manifest places elsewhere (:func:`misplaced`).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from harness.errors import ReferenceStoreError
from harness.fsio import slug

__all__ = [
    "LAYERS_FOLDER",
    "ensure_inside",
    "entry_folder",
    "is_inside",
    "layers_folder",
    "misplaced",
]

# The folder of a layered reference beside its outputs' folders: no slug of an output name
# starts with "~" (a slug keeps only [A-Za-z0-9._-] before its "~<hash>"), so it is never an
# output's folder.
LAYERS_FOLDER = "~layers"


def entry_folder(reference_id: str, platform_class: str, output: str) -> PurePosixPath:
    """The folder, relative to the store root, that holds every file of one entry.

    >>> entry_folder("t2va-int8", "any", "video").as_posix()
    't2va-int8/any/video'
    >>> entry_folder("..", "any", "video").as_posix()
    '_~5ec1f7e7/any/video'
    """
    return PurePosixPath(slug(reference_id), slug(platform_class), slug(output))


def layers_folder(reference_id: str, platform_class: str) -> PurePosixPath:
    """The folder, relative to the store root, of a layered reference's files.

    >>> layers_folder("t2va-int8", "any").as_posix()
    't2va-int8/any/~layers'
    """
    return PurePosixPath(slug(reference_id), slug(platform_class), LAYERS_FOLDER)


def is_inside(root: Path, path: Path) -> bool:
    """Whether ``path`` resolves (symlinks followed) to ``root`` or somewhere below it."""
    return path.resolve().is_relative_to(root.resolve())


def ensure_inside(root: Path, path: Path) -> Path:
    """``path`` if it resolves inside the store ``root``; else :class:`ReferenceStoreError`."""
    if not is_inside(root, path):
        raise ReferenceStoreError(
            f"refusing to touch {path}: it resolves to {path.resolve()}, outside the reference "
            f"store {root.resolve()}"
        )
    return path


def misplaced(reference_id: str, platform_class: str, output: str | None, rel: str) -> str | None:
    """Why the manifest path ``rel`` of this entry (``output`` None: of the layered reference)
    is not where its files belong, or None."""
    folder = (
        entry_folder(reference_id, platform_class, output)
        if output is not None
        else layers_folder(reference_id, platform_class)
    )
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or "\\" in rel:
        return f"path {rel!r} is not a plain path inside the store"
    if p.parent.parent != folder or p.parent.name in ("", ".", ".."):
        return f"file {rel} is outside its expected folder {folder.as_posix()}/<content id>/"
    return None
