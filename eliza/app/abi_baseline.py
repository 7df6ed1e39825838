"""The released ABI's baseline in native/abi/: the public surface of the no-gate library
(abixml, see eliza.formats.abi_xml) and its export list, one pair per ABI version, named
after ELIZA_INFERENCE_ABI_VERSION. `nox -s abi-baseline` regenerates it on purpose; the
abi check compares every cell's library with it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters.abi_tools import abidw, exported_symbols
from eliza.app.options import Parser
from eliza.app.project import current
from eliza.core.c_abi import abi_version
from eliza.core.layout import EXPORT_PREFIX, PUBLIC_HEADER, public_header
from eliza.core.matrix import Matrix
from eliza.formats.abi_xml import exports_text, public_surface
from eliza.formats.files import atomic_write_text

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class AbiBaseline:
    version: str
    surface: Path  # abixml of the public surface
    exports: Path  # one exported symbol per line

    @property
    def present(self) -> bool:
        return self.surface.is_file() and self.exports.is_file()


def abi_dir(repo: Path) -> Path:
    return repo / "native" / "abi"


def baseline_of(repo: Path, version: str) -> AbiBaseline:
    root = abi_dir(repo)
    return AbiBaseline(
        version=version, surface=root / f"abi-{version}.xml", exports=root / f"abi-{version}.exports"
    )


def versions_present(repo: Path) -> list[str]:
    return sorted(p.stem.removeprefix("abi-") for p in abi_dir(repo).glob("abi-*.xml"))


def surface_of(library: Path) -> str:
    return public_surface(abidw(library), prefix=EXPORT_PREFIX, public_header=PUBLIC_HEADER)


def write_baseline(repo: Path, library: Path) -> AbiBaseline:
    """Writes the baseline of the header's ABI version from `library`, and removes those of
    other versions: native/abi holds the released ABI, one version."""
    version = abi_version(public_header(repo).read_text(encoding="utf-8"))
    target = baseline_of(repo, version)
    atomic_write_text(target.surface, surface_of(library))
    atomic_write_text(target.exports, exports_text(exported_symbols(library)))
    for other in versions_present(repo):
        if other != version:
            old = baseline_of(repo, other)
            old.surface.unlink(missing_ok=True)
            old.exports.unlink(missing_ok=True)
    return target


def abi_baseline_session(matrix: Matrix, argv: Sequence[str], log: Log) -> AbiBaseline:
    """`nox -s abi-baseline`: builds the no-gate cell of the first platform buildable here
    and writes native/abi from it."""
    from eliza.app.build import build_cells, describe_build
    from eliza.app.errors import NotHere
    from eliza.app.project import capability

    Parser("nox -s abi-baseline --").parse_args(list(argv))
    cell = next(
        (
            c
            for p in matrix.platforms
            if p.os == "linux" and capability(p).can_build and not p.slow_build
            for c in matrix.cells_of(p.id)
            if not c.gates
        ),
        None,
    )
    if cell is None:
        raise NotHere(
            "no fast Linux platform with a no-gate cell can be built here to take the ABI baseline from"
        )
    [built] = build_cells((cell,), matrix, echo=False, on_built=lambda b: log(describe_build(b)))
    repo = current().repo
    target = write_baseline(repo, built.library)
    log(f"ABI {target.version} baseline from {cell.id}: {target.surface}, {target.exports}")
    return target
