"""Building cells: each platform's llama.cpp package once from the Conan cache, then one
Conan build of libelizainference per cell."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from eliza.adapters import conan, conan_remote
from eliza.adapters.checkout_lock import checkout_lock, conan_home_lock
from eliza.adapters.conan import BuildError
from eliza.adapters.cuda import CudaError, prepare_toolkit
from eliza.adapters.llama_source import SourceError
from eliza.app.errors import NotHere, UsageError

__all__ = ["BUILD_ERRORS", "BuiltCell", "build_cells", "describe_build", "preflight"]
from eliza.adapters.runtime_wheels import WHEELS_VARIABLE, RuntimeWheelError, ensure_wheel, wheel_pin
from eliza.app.project import capability, current, load_project_matrix
from eliza.app.services.built import BuiltCell
from eliza.app.services.prebuilt import load_prebuilt
from eliza.app.services.profiles import conan_profiles_for
from eliza.core.binary_remote import BinaryRemote, RemoteSettingError, remote_from_env
from eliza.core.build_plan import CellBuildPlan, cell_runtimes, llama_binary_key, plan_cell_build
from eliza.core.conan_profiles import ProfileError
from eliza.core.layout import library_path
from eliza.core.matrix import Cell, Matrix, Platform
from eliza.core.target import library_file

NotBuildableHere = NotHere  # this host lacks what a platform needs to build

Log = Callable[[str], None]

# What a build can fail with, each carrying a message that names the cell and the log.
BUILD_ERRORS: tuple[type[BaseException], ...] = (
    BuildError,
    CudaError,
    SourceError,
    ProfileError,
    RuntimeWheelError,
)


def plan_for(cell: Cell, matrix: Matrix, llama_version: str, env: dict[str, str]) -> CellBuildPlan:
    for _, ref in cell_runtimes(cell):  # the runtimes' recipes take their wheels from one folder
        env = {**env, WHEELS_VARIABLE: str(ensure_wheel(current().cache, wheel_pin(ref, cell.platform)))}
    plan = plan_cell_build(
        cell,
        repo=current().repo,
        all_gate_options=tuple(g.conan_option for g in matrix.gates),
        llama_version=llama_version,
        with_test_kit=True,
    )
    # The recipe reads its options and gate table from the same matrix as the sessions.
    return replace(plan, env={**env, "ELIZA_MATRIX": str(Path(matrix.source).resolve())})


def platform_env(platform: Platform) -> dict[str, str]:
    """What a platform's build adds to the environment (the CUDA toolkit view for CUDA)."""
    if platform.llama_backend == "cuda":
        project = current()
        return prepare_toolkit(project.cache, project.env).build_env()
    return {}


# A CI check job's cells come from its build job's artifact: the processes it starts (the
# pytest suites verify runs) are told so through the environment, and then "building" a
# cell is loading it (eliza.app.services.prebuilt), and nothing is compiled.
PREBUILT_VARIABLE = "ELIZA_PREBUILT_CELLS"
# Verify builds every library a check needs before the check runs: the suites it starts
# are told so, and take each cell's library where its build left it, building nothing.
BUILT_VARIABLE = "ELIZA_CELLS_BUILT"


def built_here(cell: Cell) -> BuiltCell:
    """A cell this run already built (or whose build stands): its library, nothing built."""
    library = library_path(cell.id, current().repo, library_file(cell.platform))
    if not library.is_file():
        raise BuildError(
            f"{cell.id}: {BUILT_VARIABLE}=1 says the cell is built, but {library} is missing "
            f"(build it: nox -s build-{cell.id})"
        )
    return BuiltCell(
        cell_id=cell.id,
        library=library,
        llama_built_now=False,
        llama_package=Path(),
        llama_package_id="",
        seconds=0.0,
        log=library.parent.parent / "conan-build.log",
    )


def binary_remote() -> BinaryRemote | None:
    """The Conan remote of ELIZA_CONAN_REMOTE_URL (None when unset)."""
    try:
        return remote_from_env(current().env)
    except RemoteSettingError as exc:
        raise UsageError(str(exc)) from None


def preflight(cells: tuple[Cell, ...]) -> BinaryRemote | None:
    """What build_cells refuses before building anything: a malformed remote setting
    (UsageError), a platform this host cannot build (NotBuildableHere). Sessions call it
    before they wait for the checkout lock. Returns the remote, if one is set."""
    remote = binary_remote()
    for platform in {c.platform.id: c.platform for c in cells}.values():
        can = capability(platform)
        if not can.can_build:
            raise NotBuildableHere(f"{platform.id} cannot be built on this host: {can.build_reason}")
    return remote


def build_cells(
    cells: tuple[Cell, ...],
    matrix: Matrix,
    *,
    echo: bool = False,
    on_built: Callable[[BuiltCell], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
    on_failed: Callable[[Cell, BaseException], None] | None = None,
) -> list[BuiltCell]:
    """Builds cells in order. Cells of one platform share one llama.cpp package: the first
    builds it if the Conan cache lacks it (and the Conan remote, when one is set, lacks it
    too), the others reuse it. A cell's build error goes to `on_failed`, when given, and the
    next cell builds (the result then lacks that cell); without it, it is raised."""
    env = current().env
    if env.get(PREBUILT_VARIABLE) == "1" or env.get(BUILT_VARIABLE) == "1":  # a suite verify runs
        loader = load_prebuilt if env.get(PREBUILT_VARIABLE) == "1" else built_here
        loaded = [loader(c) for c in cells]
        for done in loaded:
            if on_built:
                on_built(done)
        return loaded
    remote = preflight(cells)
    project = current()
    log = on_progress or (lambda _: None)
    what = "build " + ", ".join(c.id for c in cells)
    # Whoever builds (a session, a test's fixture, a second test process) holds the checkout's
    # lock, so two processes never build one cell's tree at once, and the Conan home's, so
    # checkouts that share the home never run Conan at once.
    with (
        checkout_lock(project.build_root, what, log),
        conan_home_lock(conan.conan_home(project.cache), what, log),
    ):
        return _build_locked(
            cells, matrix, remote, echo=echo, on_built=on_built, on_progress=on_progress, on_failed=on_failed
        )


def _build_locked(
    cells: tuple[Cell, ...],
    matrix: Matrix,
    remote: BinaryRemote | None,
    *,
    echo: bool,
    on_built: Callable[[BuiltCell], None] | None,
    on_progress: Callable[[str], None] | None,
    on_failed: Callable[[Cell, BaseException], None] | None = None,
) -> list[BuiltCell]:
    project = current()
    conan.prepare_conan_home(project.cache, project.repo, conan_profiles_for(c.platform for c in cells))
    source = conan.resolve_llama_source(project.cache, project.env)
    built: list[BuiltCell] = []
    envs: dict[str, dict[str, str]] = {}
    fetched: set[tuple[str, str | None]] = set()  # one download per llama.cpp binary
    for cell in cells:
        env = envs.setdefault(cell.platform.id, platform_env(cell.platform))
        plan = plan_for(cell, matrix, source.version, env)
        if remote is not None and llama_binary_key(cell) not in fetched:
            fetched.add(llama_binary_key(cell))
            said = conan_remote.fetch_llama(plan, source, project.cache, remote)
            if on_progress is not None:
                on_progress(f"{cell.id}: {said}")
        try:
            result = conan.run_build(plan, source, project.cache, echo=echo, on_progress=on_progress)
        except BUILD_ERRORS as exc:
            if on_failed is None:
                raise
            on_failed(cell, exc)
            continue
        done = BuiltCell(
            cell_id=cell.id,
            library=result.library,
            llama_built_now=result.llama_binary == "Build",
            llama_package=result.llama_package_folder,
            llama_package_id=result.llama_package_id,
            seconds=result.seconds,
            log=result.log,
            llama_seconds=result.llama_seconds,
        )
        built.append(done)
        if on_built:
            on_built(done)
    return built


def ensure_cell_built(cell_id: str) -> BuiltCell:
    """Builds the cell (a no-op rebuild when nothing changed) and returns it."""
    matrix = load_project_matrix()
    return build_cells((matrix.cell(cell_id),), matrix, echo=False)[0]


def describe_build(cell: BuiltCell) -> str:
    if cell.prebuilt:
        return f"{cell.cell_id}: {cell.library} (from the build job's artifact; nothing compiled here)"
    how = "built now" if cell.llama_built_now else "reused from the Conan cache"
    package = cell.llama_package_id[:12]
    return f"{cell.cell_id}: {cell.library} ({cell.seconds:.1f}s; llama.cpp {how}: package {package})"


def llama_package_cached(platform: Platform, sanitize: str = "none") -> bool:
    project = current()
    return conan.package_cached(project.cache, platform, conan.llama_source_version(project.env), sanitize)
