"""nox sessions for libelizainference, generated from matrix.yaml.

A table of contents: every session asks `eliza` for the work. Sessions run in the current
environment (install it first: `bash ci/setup.sh`, see README). Every session takes
`-- --help`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import nox

sys.path.insert(0, str(Path(__file__).resolve().parent))

from eliza.app import project
from eliza.app.context import Context, current_context
from eliza.app.errors import ElizaError, NotHere
from eliza.app.logs import quiet_third_party
from eliza.app.options import strict_requested
from eliza.core.cell_id import CellId
from eliza.core.matrix import Matrix
from eliza.core.sessions import SessionKind, SessionSpec, matrix_sessions
from eliza.formats.matrix_yaml import MatrixError

T = TypeVar("T")

# Each session imports its own use case (eliza.app.sessions.*) when it runs: `nox -l`, a
# mistyped option or a small session does not pay for importing what every other session
# needs (numpy, jsonschema, jinja2, the signing and report stacks).

nox.options.default_venv_backend = "none"
nox.options.sessions = ["tests"]
nox.options.error_on_missing_interpreters = True
# Sessions run without virtualenvs, so nox's probe for uv says nothing useful.
logging.getLogger("nox").addFilter(lambda record: record.getMessage() != "uv binary not found.")
quiet_third_party()  # no line of a session comes from a third-party logger below a warning

try:
    MATRIX = project.load_project_matrix()
except MatrixError as exc:  # fail before any session or build starts, naming file/line/key
    sys.stderr.write(f"{exc}\n")
    raise SystemExit(2) from None
for _warning in MATRIX.warnings:  # every invocation (nox -l included) shows them
    sys.stderr.write(f"warning: {_warning}\n")


def _guarded(session: nox.Session, work: Callable[[], object]) -> None:
    """Every error a session raises on purpose is an ElizaError: a user's mistake is one line
    and exit 2; "not possible here" a skip, or exit 3 under --strict; what ran and failed
    fails the session (exit 1) with its message."""
    try:
        work()
    except NotHere as exc:
        if not strict_requested(session.posargs, project.current().env):
            session.skip(str(exc))
        sys.stderr.write(f"nox > error: {exc}\n")
        raise SystemExit(exc.exit_code) from None
    except ElizaError as exc:
        if exc.exit_code == 1:  # it ran and failed: nox's own "Session ... aborted" line
            session.error(str(exc))
        sys.stderr.write(f"nox > error: {exc}\n")
        raise SystemExit(exc.exit_code) from None


def _use_case(
    session: nox.Session,
    parse: Callable[[Sequence[str], Mapping[str, str], Matrix], T],
    run: Callable[[T, Context], object],
    *,
    show: bool = False,
) -> None:
    """A session: its options parsed once from argv and the environment, then its use case
    run in this invocation's context (`show`: print what it returns)."""

    def work() -> None:
        options = parse(session.posargs, project.current().env, MATRIX)
        result = run(options, current_context(session.log, MATRIX))
        if show:
            print(result)

    _guarded(session, work)


def _register(spec: SessionSpec) -> None:
    if spec.kind is SessionKind.BENCH_PLATFORM:

        def run(session: nox.Session) -> None:
            from eliza.app.sessions import bench

            def parse(
                argv: Sequence[str], env: Mapping[str, str], matrix: Matrix
            ) -> bench.BenchSessionOptions:
                return bench.parse_options(argv, env, matrix, spec.platform)

            _use_case(session, parse, bench.run)

    else:
        cell_ids = spec.cells

        def run(session: nox.Session) -> None:
            def work() -> None:
                from eliza.app.sessions import build

                env = project.current().env
                options = build.parse_options(session.posargs, env, [CellId.parse(c) for c in cell_ids])
                for built in build.run(options, current_context(session.log, MATRIX)):
                    print(built.library)

            _guarded(session, work)

    run.__doc__ = spec.description
    nox.session(name=spec.name, python=False)(run)


for _spec in matrix_sessions(MATRIX):
    _register(_spec)


@nox.session(python=False)
def tests(session: nox.Session) -> None:
    """The pytest suite: unit tests of the pure modules, the C ABI, the selector and the gate cells."""
    from eliza.app.sessions import suite

    command, env = suite.pytest_command(session.posargs)
    session.run(*command, env=env)


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
    """Greedy text from the tiny bundle through the C ABI: `-- [--cell ID] [--max-tokens N] PROMPT`."""
    from eliza.app.sessions import generate as generate_session

    _use_case(session, generate_session.parse_options, generate_session.run, show=True)


@nox.session(python=False)
def verify(session: nox.Session) -> None:
    """The main job: build every cell this host can build, generate text, run the checks, write the report."""
    from eliza.app.sessions import verify as verify_session

    _use_case(session, verify_session.parse_options, verify_session.run)


@nox.session(python=False)
def fuzz(session: nox.Session) -> None:
    """Fuzz the C ABI with atheris under the sanitizer cell: `-- [--seconds N] [--target NAME]`."""
    from eliza.app.sessions import fuzz as fuzz_session

    _use_case(session, fuzz_session.parse_options, fuzz_session.run, show=True)


@nox.session(name="import-evidence", python=False)
def import_evidence_session(session: nox.Session) -> None:
    """Bring in evidence made elsewhere (a device run): `-- DIR...`; the report judges it like any record."""
    from eliza.app.sessions import import_evidence

    _use_case(session, import_evidence.parse_options, import_evidence.run)


@nox.session(name="abi-baseline", python=False)
def abi_baseline(session: nox.Session) -> None:
    """Regenerate native/abi, the released ABI baseline, from the no-gate build (after a deliberate bump)."""
    from eliza.app.sessions import abi_baseline as abi_baseline_session

    _use_case(session, abi_baseline_session.parse_options, abi_baseline_session.run)


@nox.session(python=False)
def devices(session: nox.Session) -> None:
    """The lab's devices (`-- --devices PATH`, ELIZA_DEVICES): reachable or why, platform, cells."""
    from eliza.app.sessions import devices as devices_session

    _use_case(session, devices_session.parse_options, devices_session.run)


@nox.session(python=False)
def report(session: nox.Session) -> None:
    """Render the report (HTML, Markdown, JSON) from evidence directories: `nox -s report -- DIR...`."""
    from eliza.app.sessions import report as report_session

    _use_case(session, report_session.parse_options, report_session.run)


@nox.session(python=False)
def release(session: nox.Session) -> None:
    """Ship the verified cells: Conan package, archive, SBOM, signed provenance (`-- --version V`)."""
    from eliza.app.sessions import release as release_session

    _use_case(session, release_session.parse_options, release_session.run)


@nox.session(name="keys", python=False)
def keys_session(session: nox.Session) -> None:
    """This machine's evidence-signing public key and key id, and the matrix.yaml entry to trust it."""
    from eliza.app.sessions import keys

    _use_case(session, keys.parse_options, keys.run)


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
def ci_files_session(session: nox.Session) -> None:
    """Regenerate .github/workflows/matrix.yml and .github/actionlint.yaml from the matrix."""
    session.run("python", "-m", "eliza.cli", "ci-files", *session.posargs)


@nox.session(name="ci-build", python=False)
def ci_build(session: nox.Session) -> None:
    """CI build job: every cell of a platform, llama.cpp once (`-- --platform P --out DIR`)."""
    from eliza.app.sessions import ci

    _use_case(session, ci.parse_build_options, ci.run_build)


@nox.session(name="ci-check", python=False)
def ci_check(session: nox.Session) -> None:
    """CI check job: one cell's checks on the build job's cells, compiling nothing (`-- --cell C`)."""
    from eliza.app.sessions import ci

    _use_case(session, ci.parse_check_options, ci.run_check)


@nox.session(name="ci-report", python=False)
def ci_report(session: nox.Session) -> None:
    """CI report job: every job's evidence into one report (`-- --evidence DIR --artifacts DIR`)."""
    from eliza.app.sessions import ci

    _use_case(session, ci.parse_report_options, ci.run_report)


@nox.session(name="ci-rehearse", python=False)
def ci_rehearse(session: nox.Session) -> None:
    """The generated workflow's jobs this host can run, each in a fresh clone (`-- --help`)."""
    from eliza.app.sessions import ci_rehearsal

    _use_case(session, ci_rehearsal.parse_options, ci_rehearsal.run)


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff, mypy --strict, the import contract, drift of the generated CI files, actionlint."""
    session.run("ruff", "check", "eliza", "tests", "noxfile.py", "conanfile.py", "test_package")
    session.run("mypy", "--strict", "eliza")
    session.run("lint-imports", "--no-cache")
    session.run("python", "-m", "eliza.cli", "ci-files", "--check")
    from eliza.app.services import ci_files

    _guarded(session, lambda: ci_files.lint_workflows(session.log))
