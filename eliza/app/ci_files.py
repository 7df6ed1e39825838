"""`nox -s ci-files` and the drift check of `nox -s lint`: the generated CI workflow is
rewritten from matrix.yaml, or compared with it."""

from __future__ import annotations

import sys
from pathlib import Path

from eliza.app.project import current, load_project_matrix
from eliza.formats.ci_workflow import MARKER, render_workflow
from eliza.formats.files import atomic_write_text


def templates_dir(repo: Path) -> Path:
    return repo / "templates" / "ci"


def workflows_dir(repo: Path) -> Path:
    return repo / "ci" / "workflows"


def write_or_check(*, check: bool, out_dir: Path | None = None, matrix_path: Path | None = None) -> int:
    repo = current().repo
    out_dir = out_dir or workflows_dir(repo)
    matrix = load_project_matrix(matrix_path)
    wanted = render_workflow(matrix, templates_dir(repo))
    existing = {p.name: p for p in out_dir.glob("*.yml")} if out_dir.is_dir() else {}
    if check:
        stale = sorted(n for n in wanted if n not in existing or existing[n].read_text() != wanted[n])
        stale += sorted(n for n, p in existing.items() if n not in wanted and MARKER in p.read_text())
        if stale:
            print(
                f"{out_dir}: out of date with {matrix.source} ({', '.join(stale)}); run `nox -s ci-files`",
                file=sys.stderr,
            )
            return 1
        print(f"{out_dir}: up to date with {matrix.source}")
        return 0
    for path in existing.values():  # old generated outputs go first, hand-written files stay
        if MARKER in path.read_text():
            path.unlink()
    for name, text in wanted.items():
        atomic_write_text(out_dir / name, text)
        print(f"wrote {out_dir / name}")
    return 0
