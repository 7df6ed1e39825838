"""A cell's build as the sessions and check runners see it: where its library is and how it
came to be (built now, reused from the Conan cache, or unpacked from a CI build job)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class BuiltCell:
    cell_id: str
    library: Path
    llama_built_now: bool
    llama_package: Path
    llama_package_id: str
    seconds: float
    log: Path
    prebuilt: bool = False  # taken from a CI build job's artifact, not built here
    llama_seconds: float = 0.0  # of `seconds`: building llama.cpp (0 when reused)
