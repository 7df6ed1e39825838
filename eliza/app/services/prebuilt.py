"""Cells a CI build job made and a check job unpacks: each cell's files with a manifest of
their sha256 (ci-cell.json beside its build folder), packed into cells-<platform>.tar.gz,
and loaded again only when every file hashes as the manifest says. A cell the build job
could not build travels as a note of why (ci-build-failed.txt in its place), which its
check job's checks report as their error."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path

from eliza.adapters import conan_remote
from eliza.adapters.errors import ToolError
from eliza.app.errors import UsageError
from eliza.app.project import current
from eliza.app.services.built import BuiltCell
from eliza.core.layout import cell_build_dir, library_path
from eliza.core.matrix import Cell
from eliza.core.target import library_file
from eliza.formats.files import atomic_write_text, sha256_file

Log = Callable[[str], None]
MANIFEST = "ci-cell.json"  # beside each cell's build folder: what the build job made
FAILED_NOTE = "ci-build-failed.txt"  # in its place when the build job could not build the cell
# The files of a cell a check needs: the libraries (a gate's module among them),
# build-info.json, the bench tools, and the runtime a gate ships beside the library in its
# wheel's layout (MLX: mlx/lib/, and its BLAS in mlx_cpu.libs/; LiteRT-LM: litert_lm/;
# docs/backends.md).
CELL_FILES = (
    "libelizainference*",
    "build-info.json",
    "e2e_loop_bench",
    "reference_runner",
    "mlx/lib/*",
    "mlx_cpu.libs/*",
    "litert_lm/*",
)


def _cell_files(cell: Cell, repo: Path) -> list[Path]:
    out = cell_build_dir(cell.id, repo) / "build"
    return sorted({p for pattern in CELL_FILES for p in out.glob(pattern) if p.is_file() or p.is_symlink()})


class PrebuiltError(ToolError):
    """The build job's cell is not there, or not as it made it: the cell's checks report it
    as their error (a tool error, like a failed build on the host)."""


def write_failure_note(cell: Cell, repo: Path, reason: str) -> Path:
    """Why the build job could not build the cell, where its manifest would be."""
    folder = cell_build_dir(cell.id, repo)
    (folder / MANIFEST).unlink(missing_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(folder / FAILED_NOTE, reason.rstrip() + "\n")


def write_manifest(built: BuiltCell, cell: Cell, repo: Path, llama: conan_remote.LlamaBinary) -> Path:
    files = {str(p.relative_to(repo)): sha256_file(p) for p in _cell_files(cell, repo) if p.is_file()}
    manifest = {
        "cell": cell.id,
        "llama_ref": llama.ref,
        "llama_package_id": built.llama_package_id,
        "llama_built_now": built.llama_built_now,
        "seconds": round(built.seconds, 2),
        "files": files,
    }
    path = cell_build_dir(cell.id, repo) / MANIFEST
    atomic_write_text(path, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    (path.parent / FAILED_NOTE).unlink(missing_ok=True)
    return path


def load_prebuilt(cell: Cell) -> BuiltCell:
    """A cell the build job made, after its artifact was unpacked: every file as the
    manifest lists it, or PrebuiltError naming what is missing or differs."""
    repo = current().repo
    path = cell_build_dir(cell.id, repo) / MANIFEST
    note = path.parent / FAILED_NOTE
    if not path.is_file():
        if note.is_file():
            raise PrebuiltError(
                f"{cell.id}: the build job (cells-{cell.platform.id}) could not build it: "
                f"{note.read_text(errors='replace').strip()[-800:]}"  # the whole reason fits a record's
            )
        raise PrebuiltError(
            f"{cell.id}: no prebuilt cell at {path.parent}: this job takes its cells from the build "
            f"job's artifact (cells-{cell.platform.id}); is it unpacked (--artifacts)?"
        )
    manifest = json.loads(path.read_text())
    for rel, digest in manifest["files"].items():
        file = repo / rel
        if not file.is_file() or sha256_file(file) != digest:
            raise PrebuiltError(f"{cell.id}: {rel} is missing or differs from the build job's manifest")
    library = library_path(cell.id, repo, library_file(cell.platform))
    return BuiltCell(
        cell_id=cell.id,
        library=library,
        llama_built_now=False,
        llama_package=Path(),
        llama_package_id=str(manifest["llama_package_id"]),
        seconds=float(manifest["seconds"]),
        log=path,
        prebuilt=True,
    )


def pack_cells(cells: Sequence[Cell], repo: Path, archive: Path, failed: Sequence[Cell] = ()) -> Path:
    """The cells' files and manifests, relative to the repository, symlinks and modes kept
    (an artifact store keeps neither), and the failure notes of the cells that `failed`."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for cell in cells:
            for path in [*_cell_files(cell, repo), cell_build_dir(cell.id, repo) / MANIFEST]:
                tar.add(path, arcname=str(path.relative_to(repo)), recursive=False)
        for cell in failed:
            note = cell_build_dir(cell.id, repo) / FAILED_NOTE
            tar.add(note, arcname=str(note.relative_to(repo)), recursive=False)
    return archive


def unpack_cells(artifacts: Path, repo: Path, log: Log) -> list[str]:
    archives = sorted(artifacts.rglob("cells-*.tar.gz")) if artifacts.is_dir() else []
    if not archives:
        raise UsageError(f"--artifacts {artifacts}: no cells-*.tar.gz there (the build jobs' artifacts)")
    names = []
    for archive in archives:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(repo, filter="data")
        names.append(archive.name)
        log(f"unpacked {archive}")
    return names
