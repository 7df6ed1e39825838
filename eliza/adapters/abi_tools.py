"""ABI tools: the exported symbol list (nm) and abidiff from Debian's abigail-tools."""

from __future__ import annotations

import platform as platform_module
import shutil
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.errors import ToolError
from eliza.core.layout import EXPORT_PREFIX, REPO_ROOT, public_headers_dir
from eliza.core.matrix import Platform
from eliza.core.target import exported_names, symbol_lister

# abidiff's exit status is a bit field (libabigail's abidiff_status).
ABIDIFF_ERROR = 1
ABIDIFF_USAGE_ERROR = 2
ABIDIFF_ABI_CHANGE = 4
ABIDIFF_ABI_INCOMPATIBLE_CHANGE = 8


class AbiToolMissing(ToolError):
    pass


class SymbolListError(ToolError):
    pass


def host_arch() -> str:
    """This machine's arch in the matrix's words (x86_64, arm64)."""
    machine = platform_module.machine().lower()
    return {"aarch64": "arm64", "amd64": "x86_64"}.get(machine, machine)


def exported_symbols(library: Path, platform: Platform | None = None) -> list[str]:
    """The dynamic symbols a shared library defines, sorted, listed the platform's way
    (eliza.core.target.symbol_lister: the cross nm for a cross-built ELF, nm -gU on
    Mach-O); without a platform, the host's nm -D --defined-only."""
    lister = symbol_lister(platform, host_arch()) if platform else ("nm", "-D", "--defined-only")
    done = proc.run([*lister, library])
    if not done.ok:
        said = done.stderr.strip()[-500:]
        raise SymbolListError(f"{' '.join(lister)} {library} failed ({done.returncode}): {said}")
    if platform is not None:
        return exported_names(platform, done.stdout)
    return sorted(line.split()[-1] for line in done.stdout.splitlines() if line.strip())


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


def abidw(library: Path) -> str:
    """abidw's abixml of a library, without the build paths abidw would otherwise record."""
    tool = shutil.which("abidw")
    if tool is None:
        raise AbiToolMissing(
            "abidw not found: install Debian's abigail-tools (apt-get install abigail-tools)"
        )
    done = proc.run([tool, "--no-corpus-path", "--no-comp-dir-path", "--type-id-style", "hash", library])
    if not done.ok:
        raise SymbolListError(f"abidw {library} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    return done.stdout


def abidiff_version() -> str:
    """abidiff's version, or "" when it is not installed."""
    tool = shutil.which("abidiff")
    if tool is None:
        return ""
    out = proc.run([tool, "--version"]).stdout.strip()
    return out.split()[-1] if out else ""


def _abidiff_tool() -> str:
    tool = shutil.which("abidiff")
    if tool is None:
        raise AbiToolMissing(
            "abidiff not found: install Debian's abigail-tools (apt-get install abigail-tools)"
        )
    return tool


def abidiff_surfaces(reference: Path, candidate: Path) -> AbiDiff:
    """Compares two public-surface abixml files (eliza.formats.abi_xml). They carry no
    source locations, so no --headers-dir: it would count every type as private."""
    done = proc.run([_abidiff_tool(), "--no-show-locs", reference, candidate])
    return AbiDiff(exit_code=done.returncode, report=done.output.strip())


def abidiff(reference: Path, candidate: Path, headers: Path | None = None) -> AbiDiff:
    """Compares the ABI of two builds, restricted to the types of the public headers in
    `headers` (default: this repository's). The SONAME is ignored so that differently
    named artefacts can be compared."""
    headers = headers or public_headers_dir(REPO_ROOT)
    done = proc.run(
        [
            _abidiff_tool(),
            "--no-show-locs",
            "--headers-dir1",
            headers,
            "--headers-dir2",
            headers,
            reference,
            candidate,
        ]
    )
    return AbiDiff(exit_code=done.returncode, report=done.output.strip())
