"""The released ABI's baseline in native/abi/: the public surface of the no-gate library
(abixml, see eliza.formats.abi_xml) and its export list, one pair per ABI version, named
after ELIZA_INFERENCE_ABI_VERSION. `nox -s abi-baseline` regenerates it on purpose; the
abi check compares every cell's library with it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters.abi_tools import abidw, exported_symbols
from eliza.app.errors import Failed
from eliza.app.project import current
from eliza.core.c_abi import abi_version, header_constants
from eliza.core.layout import EXPORT_PREFIX, PUBLIC_HEADER, abidw_memo_dir, public_header
from eliza.formats.abi_xml import exports_text, public_surface
from eliza.formats.files import atomic_write_text

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class AbiBaseline:
    version: str
    surface: Path  # abixml of the public surface
    exports: Path  # one exported symbol per line
    constants: Path  # the header's numeric ELIZA_* constants, "NAME VALUE" per line

    @property
    def present(self) -> bool:
        return self.surface.is_file() and self.exports.is_file() and self.constants.is_file()

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.surface, self.exports, self.constants)


def abi_dir(repo: Path) -> Path:
    return repo / "native" / "abi"


def baseline_of(repo: Path, version: str) -> AbiBaseline:
    root = abi_dir(repo)
    return AbiBaseline(
        version=version,
        surface=root / f"abi-{version}.xml",
        exports=root / f"abi-{version}.exports",
        constants=root / f"abi-{version}.constants",
    )


def constants_text(header_text: str) -> str:
    return "".join(f"{name} {value}\n" for name, value in sorted(header_constants(header_text).items()))


def versions_present(repo: Path) -> list[str]:
    return sorted(p.stem.removeprefix("abi-") for p in abi_dir(repo).glob("abi-*.xml"))


def surface_of(library: Path) -> str:
    dump = abidw(library, memo=abidw_memo_dir(current().cache))
    return public_surface(dump, prefix=EXPORT_PREFIX, public_header=PUBLIC_HEADER)


class BaselineRefused(Failed):
    """Regenerating would change the released ABI of a version that was not bumped."""


def write_baseline(repo: Path, library: Path, *, force: bool = False) -> tuple[AbiBaseline, bool]:
    """Writes the baseline of the header's ABI version from `library` and removes those of
    other versions (native/abi holds the released ABI, one version); (baseline, changed).
    A different surface for a version that already has a baseline is an unbumped ABI
    change: refused unless forced."""
    header_text = public_header(repo).read_text(encoding="utf-8")
    version = abi_version(header_text)
    target = baseline_of(repo, version)
    texts = (surface_of(library), exports_text(exported_symbols(library)), constants_text(header_text))
    changed = [
        p.name for p, t in zip(target.files, texts, strict=True) if not p.is_file() or p.read_text() != t
    ]
    if target.present and changed and not force:
        raise BaselineRefused(
            f"the build's ABI differs from the released ABI {version} ({', '.join(changed)}): bump "
            "ELIZA_INFERENCE_ABI_VERSION in the public header first, or pass --force to rewrite "
            f"ABI {version}'s baseline on purpose"
        )
    for path, text in zip(target.files, texts, strict=True):
        atomic_write_text(path, text)
    for other in versions_present(repo):
        if other != version:
            for path in baseline_of(repo, other).files:
                path.unlink(missing_ok=True)
    return target, bool(changed)
