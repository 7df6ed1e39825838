"""nox sessions for libelizainference, generated from matrix.yaml.

A table of contents: every session asks `eliza` for the work. Sessions run in the current
environment (install it first: `bash ci/setup.sh`, see README).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eliza.app import build, bundle, project
from eliza.app.bench import bench
from eliza.app.report import report as render_report_session
from eliza.app.verify import ChecksFailed
from eliza.app.verify import verify as verify_all
from eliza.core.sessions import SessionKind, SessionSpec, matrix_sessions
from eliza.formats.matrix_yaml import MatrixError

nox.options.default_venv_backend = "none"
nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True

try:
    MATRIX = project.load_project_matrix()
except MatrixError as exc:  # fail before any session or build starts, naming file/line/key
    sys.stderr.write(f"{exc}\n")
    raise SystemExit(2) from None
for _warning in MATRIX.warnings:  # every invocation (nox -l included) shows them
    sys.stderr.write(f"warning: {_warning}\n")


def _strict(session: nox.Session) -> bool:
    return "--strict" in session.posargs or project.current().strict


def _not_here(session: nox.Session, exc: Exception) -> None:
    if _strict(session):
        session.error(str(exc))
    session.skip(str(exc))


def _build(session: nox.Session, cell_ids: tuple[str, ...]) -> None:
    cells = tuple(MATRIX.cell(c) for c in cell_ids)
    try:
        built = build.build_cells(cells, MATRIX, on_built=lambda b: session.log(build.describe_build(b)))
    except build.NotBuildableHere as exc:
        _not_here(session, exc)
        return
    except build.BUILD_ERRORS as exc:
        session.error(str(exc))
    llama_builds = sum(b.llama_built_now for b in built)
    session.log(
        f"{len(built)} cell(s) built; llama.cpp built {llama_builds} time(s), reused "
        f"{len(built) - llama_builds} time(s)"
    )
    for b in built:
        print(b.library)


def _register(spec: SessionSpec) -> None:
    if spec.kind is SessionKind.BENCH_PLATFORM:

        def run(session: nox.Session) -> None:
            try:
                bench(MATRIX, spec.platform, session.posargs, session.log)
            except build.NotBuildableHere as exc:
                _not_here(session, exc)
            except ChecksFailed as exc:
                session.error(str(exc))

    else:
        cell_ids = (
            (spec.cell,) if spec.cell is not None else tuple(c.id for c in MATRIX.cells_of(spec.platform))
        )

        def run(session: nox.Session) -> None:
            _build(session, cell_ids)

    run.__doc__ = spec.description
    nox.session(name=spec.name, python=False)(run)


for _spec in matrix_sessions(MATRIX):
    _register(_spec)


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """The pytest suite: unit tests of the pure modules, the C ABI, the selector and the gate cells."""
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(name="test-selector", python=False)
def test_selector(session: nox.Session) -> None:
    """Selector unit tests against the compiled selector (the test kit) with fake factories."""
    session.run("python", "-m", "pytest", "tests/selector", *session.posargs)


@nox.session(name="unit", python=False)
def unit(session: nox.Session) -> None:
    """Fast tests of the pure modules only (no compiler, no build)."""
    session.run("python", "-m", "pytest", "tests/unit", *session.posargs)


@nox.session(python=False)
def generate(session: nox.Session) -> None:
    """Build linux-cpu (no gates) and generate text from the tiny bundle through the C ABI."""
    built = build.ensure_cell_built("linux-cpu.none")
    tiny = bundle.ensure_tiny_bundle()
    prompt = " ".join(session.posargs) or "Once upon a time there was"
    tokens, text = bundle.generate_text(built.library, tiny, prompt)
    session.log(f"library: {built.library}")
    session.log(f"bundle: {tiny}")
    print(f"{prompt}{text.decode('utf-8', errors='replace')}")
    session.log(f"{len(tokens)} tokens generated (greedy)")


@nox.session(python=False)
def verify(session: nox.Session) -> None:
    """The main job: build every cell this host can build, generate text, run the checks, write the report."""
    try:
        verify_all(MATRIX, session.posargs, session.log)
    except ChecksFailed as exc:
        session.error(str(exc))


@nox.session(python=False)
def report(session: nox.Session) -> None:
    """Render the report (HTML, Markdown, JSON) from evidence directories: `nox -s report -- DIR...`."""
    render_report_session(MATRIX, session.posargs, session.log)


@nox.session(python=False)
def benchmarks(session: nox.Session) -> None:
    """pytest-benchmark of decode through the C ABI vs plain llama.h (saved for --benchmark-compare)."""
    session.run(
        "python",
        "-m",
        "pytest",
        "tests/benchmarks",
        "--benchmark-only",
        "--benchmark-autosave",
        "--benchmark-columns=min,median,iqr,max,rounds",
        *session.posargs,
    )


@nox.session(name="ci-files", python=False)
def ci_files(session: nox.Session) -> None:
    """Regenerate ci/workflows/ from matrix.yaml (one CI job per cell plus the report job)."""
    session.run("python", "-m", "eliza.cli", "ci-files")


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff, mypy --strict, the import contract of eliza's layers, and drift of the generated CI files."""
    session.run("ruff", "check", "eliza", "tests", "noxfile.py", "conanfile.py")
    session.run("mypy", "--strict", "eliza")
    session.run("lint-imports", "--no-cache")
    session.run("python", "-m", "eliza.cli", "ci-files", "--check")
