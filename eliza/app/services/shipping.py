"""What a release would ship now, per cell: the release's own verdict (eliza.core.release)
on the report and the library bytes in each cell's build folder. `nox -s release` ships by
it and the report shows it, so the two cannot disagree."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from eliza.core import release as policy
from eliza.core.host import Capability
from eliza.core.layout import library_path
from eliza.core.matrix import Matrix
from eliza.core.report import Report
from eliza.core.target import library_file
from eliza.formats.files import sha256_file


def candidate_libraries(matrix: Matrix, repo: Path) -> list[Path]:
    """The library file of every cell a release considers by default (present or not): what
    the report's "would ship" reads besides the evidence."""
    return [library_path(c.id, repo, library_file(c.platform)) for c in policy.candidates(matrix, ())]


def library_bytes(cell_id: str, matrix: Matrix, repo: Path) -> policy.LibraryBytes:
    """The library a release of the cell would package (its sha256 None when it is absent)."""
    file = library_path(cell_id, repo, library_file(matrix.cell(cell_id).platform))
    shown = str(file.relative_to(repo)) if file.is_relative_to(repo) else str(file)
    return policy.LibraryBytes(path=shown, sha256=sha256_file(file) if file.is_file() else None)


def cell_verdicts(
    report: Report,
    matrix: Matrix,
    repo: Path,
    capabilities: Mapping[str, Capability],
    named: Sequence[str] = (),
) -> list[policy.CellVerdict]:
    """The verdict on each candidate cell (`named`, else every cell of the default variant)."""
    verdicts = []
    for cell in policy.candidates(matrix, named):
        can = capabilities[cell.platform.id]
        verdicts.append(
            policy.judge_cell(
                report,
                cell,
                library_bytes(cell.id, matrix, repo),
                default_bundle=matrix.default_bundle.id,
                can_build=can.can_build,
                build_reason=can.build_reason,
                named=bool(named),
            )
        )
    return verdicts
