"""The pinned llama.cpp source: the tree vendored in a llama-cpp-python sdist, fetched
with pip into the cache and verified by sha256 (the same pin as the Conan recipe's
conandata.yml, which is the one source of truth read here)."""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from eliza.adapters.errors import ToolError
from eliza.adapters.pip_fetch import PinnedFileError, fetch_pinned
from eliza.core.layout import REPO_ROOT
from eliza.formats.files import atomic_write_bytes

RECIPE_DIR = REPO_ROOT / "conan" / "index" / "recipes" / "llama-cpp" / "all"
PINNED_VERSION = "0.3.36"


class SourceError(ToolError):
    pass


@dataclass(frozen=True, kw_only=True)
class LlamaSourcePin:
    version: str
    pip_requirement: str
    archive: str
    sha256: str
    subdir: str
    upstream_commit: str


def pinned_source(version: str = PINNED_VERSION) -> LlamaSourcePin:
    data = yaml.safe_load((RECIPE_DIR / "conandata.yml").read_text())
    try:
        entry = data["sources"][version]
    except KeyError as exc:
        raise SourceError(
            f"{RECIPE_DIR / 'conandata.yml'}: no sources entry for version {version!r}"
        ) from exc
    return LlamaSourcePin(version=version, **entry)


def ensure_sdist(cache: Path, pin: LlamaSourcePin | None = None) -> Path:
    """Returns the verified sdist, downloading it with pip on first use."""
    pin = pin or pinned_source()
    try:
        return fetch_pinned(
            cache / "sources",
            pin.archive,
            pin.sha256,
            pin.pip_requirement,
            ["--no-binary", ":all:"],
            str(RECIPE_DIR / "conandata.yml"),
        )
    except PinnedFileError as exc:
        raise SourceError(str(exc)) from None


def extract_member(archive: Path, member: str, dest: Path) -> Path:
    """Copies one file of the sdist (e.g. a vocabulary GGUF) out of the archive."""
    with tarfile.open(archive, "r:gz") as tar:
        f = tar.extractfile(member)
        if f is None:
            raise SourceError(f"{archive}: {member} is not a file in the archive")
        return atomic_write_bytes(dest, f.read())


def vocab_gguf(cache: Path, name: str = "ggml-vocab-llama-spm.gguf") -> Path:
    """The llama-spm vocabulary from the pinned llama.cpp tree, cached."""
    pin = pinned_source()
    dest = cache / "sources" / f"{pin.version}-{name}"
    if not dest.is_file():
        extract_member(ensure_sdist(cache, pin), f"{pin.subdir}/models/{name}", dest)
    return dest
