"""The gates' runtimes as their PyPI wheels ship them (MLX's C++ library in mlx-cpu and
mlx-metal): fetched with pip into the cache and verified by sha256 against the pins of the
runtime's Conan recipe (conan/index/recipes/<name>/all/conandata.yml, the one source of
truth, which the recipe checks again before it unpacks a wheel)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from eliza.adapters.errors import ToolError
from eliza.adapters.pip_fetch import PinnedFileError, fetch_pinned
from eliza.core.conan_profiles import conan_os_arch
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Platform

RECIPES = REPO_ROOT / "conan" / "index" / "recipes"
WHEELS_VARIABLE = "ELIZA_RUNTIME_WHEELS"  # the recipes read the folder from it


class RuntimeWheelError(ToolError):
    pass


@dataclass(frozen=True, kw_only=True)
class WheelPin:
    pip_requirement: str
    pip_platform: str
    wheel: str
    sha256: str


def wheel_pin(reference: str, platform: Platform) -> WheelPin:
    """The pinned wheel of a runtime package ("mlx/0.32.4") for a platform's target."""
    name, _, version = reference.partition("/")
    conandata = RECIPES / name / "all" / "conandata.yml"
    try:
        sources = yaml.safe_load(conandata.read_text())["sources"][version]
    except (OSError, KeyError, TypeError) as exc:
        raise RuntimeWheelError(f"{conandata}: no sources entry for {reference} ({exc})") from None
    key = "-".join(conan_os_arch(platform))
    if key not in sources:
        raise RuntimeWheelError(
            f"{conandata}: {reference} pins no wheel for {platform.id} ({key}); "
            f"pinned: {', '.join(sorted(sources))}"
        )
    return WheelPin(**sources[key])


def ensure_wheel(cache: Path, pin: WheelPin) -> Path:
    """The folder holding the verified wheel (<cache>/runtime-wheels), fetched on first use."""
    folder = cache / "runtime-wheels"
    try:
        fetch_pinned(
            folder,
            pin.wheel,
            pin.sha256,
            pin.pip_requirement,
            ["--only-binary", ":all:", "--platform", pin.pip_platform],
            "its recipe's conandata.yml",
        )
    except PinnedFileError as exc:
        raise RuntimeWheelError(str(exc)) from None
    return folder
