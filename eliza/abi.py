"""ABI adapters: the exported symbol list (nm) and abidiff from Debian's abigail-tools."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from eliza.paths import REPO_ROOT

PUBLIC_HEADERS = REPO_ROOT / "native" / "include"
EXPORT_PREFIX = "eliza_inference_"

# abidiff's exit status is a bit field (libabigail's abidiff_status).
ABIDIFF_ERROR = 1
ABIDIFF_USAGE_ERROR = 2
ABIDIFF_ABI_CHANGE = 4
ABIDIFF_ABI_INCOMPATIBLE_CHANGE = 8


class AbiToolMissing(RuntimeError):
    pass


def exported_symbols(library: Path) -> list[str]:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], check=True, capture_output=True, text=True
    )
    return sorted(line.split()[-1] for line in out.stdout.splitlines() if line.strip())


def foreign_exports(symbols: list[str]) -> list[str]:
    return [s for s in symbols if not s.startswith(EXPORT_PREFIX)]


@dataclass(frozen=True, kw_only=True)
class AbiDiff:
    exit_code: int
    report: str

    @property
    def tool_failed(self) -> bool:
        return bool(self.exit_code & (ABIDIFF_ERROR | ABIDIFF_USAGE_ERROR))

    @property
    def changed(self) -> bool:
        return bool(self.exit_code & (ABIDIFF_ABI_CHANGE | ABIDIFF_ABI_INCOMPATIBLE_CHANGE))

    @property
    def incompatible(self) -> bool:
        return bool(self.exit_code & ABIDIFF_ABI_INCOMPATIBLE_CHANGE)


def abidiff(reference: Path, candidate: Path, headers: Path = PUBLIC_HEADERS) -> AbiDiff:
    """Compares the ABI of two builds, restricted to the types of the public headers.
    The SONAME is ignored so that differently named artefacts can be compared."""
    tool = shutil.which("abidiff")
    if tool is None:
        raise AbiToolMissing(
            "abidiff not found: install Debian's abigail-tools (apt-get install abigail-tools)"
        )
    result = subprocess.run(
        [
            tool,
            "--no-show-locs",
            "--headers-dir1",
            str(headers),
            "--headers-dir2",
            str(headers),
            str(reference),
            str(candidate),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    return AbiDiff(exit_code=result.returncode, report=(result.stdout + result.stderr).strip())
