"""ABI tools: the exported symbol list (nm) and abidiff from Debian's abigail-tools."""

from __future__ import annotations

import hashlib
import json
import platform as platform_module
import shutil
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.errors import ToolError
from eliza.adapters.tool_versions import program_identity
from eliza.core.layout import EXPORT_PREFIX, REPO_ROOT, public_headers_dir
from eliza.core.matrix import Platform
from eliza.core.target import exported_names, symbol_lister
from eliza.formats.files import atomic_write_text, sha256_file

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


_ABIDW_FLAGS = ("--no-corpus-path", "--no-comp-dir-path", "--type-id-style", "hash")
_DUMPS_KEPT = 64  # a memo of abidw dumps keeps the most recent ones


def abidw(library: Path, *, memo: Path | None = None) -> str:
    """abidw's abixml of a library, without the build paths abidw would otherwise record.
    `memo`: a directory of earlier dumps, by the library's bytes and abidw's own file: a
    library dumped before by the same abidw (another checkout's identical build, a rebuild
    that changed nothing) is read back instead of dumped again, which takes abidw a second
    or two."""
    tool = shutil.which("abidw")
    if tool is None:
        raise AbiToolMissing(
            "abidw not found: install Debian's abigail-tools (apt-get install abigail-tools)"
        )
    program = program_identity(tool)
    kept = None
    if memo is not None and program is not None:
        key = json.dumps([*program, *_ABIDW_FLAGS, sha256_file(library)])
        kept = memo / f"{hashlib.sha256(key.encode()).hexdigest()}.json"
        dump = _kept_dump(kept)
        if dump is not None:
            return dump
    done = proc.run([tool, *_ABIDW_FLAGS, library])
    if not done.ok:
        raise SymbolListError(f"abidw {library} failed ({done.returncode}): {done.stderr.strip()[-500:]}")
    if kept is not None:
        _keep(kept, done.stdout)
    return done.stdout


def _kept_dump(kept: Path) -> str | None:
    """A remembered dump whose text still has the digest it was saved with; None when there
    is none, or it is damaged (then abidw dumps again and the memo is rewritten)."""
    try:
        data = json.loads(kept.read_text(encoding="utf-8"))
        dump = data["dump"]
        whole = isinstance(dump, str) and hashlib.sha256(dump.encode()).hexdigest() == data["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return dump if whole else None


def _keep(kept: Path, text: str) -> None:
    """Saves a dump with its digest into its memo directory and drops the oldest beyond
    _DUMPS_KEPT; a memo that cannot be written only costs the next dump."""
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(text.encode()).hexdigest()
        atomic_write_text(kept, json.dumps({"sha256": digest, "dump": text}))
        dumps = sorted(kept.parent.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in dumps[_DUMPS_KEPT:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


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
