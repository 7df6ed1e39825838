"""Shared fixtures. Native tests build (or reuse) the cell of ELIZA_TEST_CELL and the tiny
bundle through the same eliza functions the nox sessions use."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from eliza.adapters.ffi import Context, Library
from tests.selection import test_cell, test_cells, test_platform

# Checked as the suites load, before anything is collected or built.
TEST_CELL = test_cell()
test_cells(test_platform())


@pytest.fixture(scope="session")
def tiny_bundle() -> Path:
    from eliza.app.services.bundle import ensure_tiny_bundle

    return ensure_tiny_bundle()


@pytest.fixture(scope="session")
def library_path() -> Path:
    """The library of ELIZA_TEST_CELL (default: the first no-gate cell): verify runs the
    native and selector suites once per cell this way. A cell whose library this process
    cannot load (another architecture, a device's) is skipped, saying why."""
    from eliza.app.project import capability, load_project_matrix
    from eliza.app.services.build import ensure_cell_built

    can = capability(load_project_matrix().cell(TEST_CELL).platform)
    if not can.loads_in_process:
        pytest.skip(f"{TEST_CELL}'s library cannot be loaded into this process: {can.in_process_reason()}")
    return ensure_cell_built(TEST_CELL).library


@pytest.fixture(scope="session")
def lib(library_path: Path) -> Library:
    return Library(library_path)


@pytest.fixture()
def ctx(lib: Library, tiny_bundle: Path) -> Iterator[Context]:
    with lib.open_context(tiny_bundle) as context:
        yield context


# --------------------------------------------------------------------------- test tiers
#
# Every test belongs to exactly one tier: its module's own marker (pytestmark), else its
# folder's entry below. A test in a folder without an entry and without a marker stops the
# collection, naming it. `nox -s tests` runs the default tiers; `-- --tier slow` the slow
# one (CI runs it on a schedule), `--tier all` every tier.
TIERS = {
    "unit": "pure modules, no compiler, no build",
    "cell": "needs built cells: one build of each cell shared by the whole run",
    "e2e": "copies of the repository, real nox sessions",
    "slow": "cold builds from nothing, reproducibility, the CI rehearsal, the sanitizer cell, fuzzing",
}
DEFAULT_TIERS = ("unit", "cell", "e2e")
FOLDER_TIERS = {
    "unit": "unit",
    "native": "cell",
    "selector": "cell",
    "gates": "cell",
    "bench": "cell",
    "backends": "cell",
    "benchmarks": "cell",
    "consumers": "cell",
    "report": "cell",
    "bundles": "cell",
    "integration": "e2e",
    "ci": "e2e",
    "slow": "slow",
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--tier",
        action="append",
        choices=[*TIERS, "all"],
        help=f"run the tests of this tier (repeatable; default: {', '.join(DEFAULT_TIERS)})",
    )


def pytest_configure(config: pytest.Config) -> None:
    for name, words in TIERS.items():
        config.addinivalue_line("markers", f"{name}: tier: {words}")
    config.addinivalue_line("markers", f"{CHECKOUT}: {CHECKOUT_WORDS}")
    config.addinivalue_line("markers", f"{AS_OTHER_USER}: {AS_OTHER_USER_WORDS}")


# --------------------------------------------------------------------------- parallel runs
#
# `nox -s tests` runs the default tiers in several processes (pytest-xdist, --dist
# loadgroup). A process takes a whole group: each module is one, so its module fixtures (a
# clone, a server) are made once, and each cell-tier folder is one, so its session fixtures
# (the consumers' JNI glue) are too. Every test that runs sessions on this checkout itself
# (verify, build-*, ci-build, the mistakes corpus that checks nothing changed under build/)
# is marked `checkout` and shares one group: they run one after another, as sessions on one
# checkout do. Builds from the other processes wait on the checkout's lock
# (eliza.adapters.checkout_lock).
CHECKOUT = "checkout"
CHECKOUT_WORDS = "runs sessions on this checkout (its build/): never beside another such test"
# A test that starts a process as another user (root dropping to `nobody`) is marked so:
# tests/integration/test_private_checkout.py runs every such test again from a copy of the
# repository under a 0700 directory, where that user can read nothing of the checkout.
AS_OTHER_USER = "as_other_user"
AS_OTHER_USER_WORDS = "starts a process as another user: also run from a checkout under a private directory"
FOLDER_GROUPS = {"consumers", "gates", "selector", "bench", "benchmarks", "report"}


def parallel_group(item: pytest.Item) -> str:
    if item.get_closest_marker(CHECKOUT) is not None:
        return CHECKOUT
    parts = Path(str(item.fspath)).relative_to(Path(__file__).parent).parts
    return parts[0] if parts[0] in FOLDER_GROUPS else "/".join(parts)


def tier_of(item: pytest.Item) -> str | list[str] | None:
    """The test's tier (its own marker, else its folder's), a list when it has several."""
    own = sorted({m.name for m in item.iter_markers() if m.name in TIERS})
    if own:
        return own[0] if len(own) == 1 else own
    parts = Path(str(item.fspath)).relative_to(Path(__file__).parent).parts
    return FOLDER_TIERS.get(parts[0]) if len(parts) > 1 else None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist turns xdist_group marks into groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers = {item.nodeid: tier_of(item) for item in items}
    wrong = [n for n, t in tiers.items() if not isinstance(t, str)]
    if wrong:
        raise pytest.UsageError(
            f"{len(wrong)} test(s) declare no tier or several, e.g. {wrong[0]} ({tiers[wrong[0]]}): give the "
            f"module `pytestmark = pytest.mark.<tier>` ({', '.join(TIERS)}) or its folder an entry in "
            "FOLDER_TIERS (tests/conftest.py)"
        )
    groups = {item.nodeid: parallel_group(item) for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    chosen = config.getoption("--tier") or list(DEFAULT_TIERS)
    wanted = set(TIERS) if "all" in chosen else set(chosen)
    keep = [item for item in items if tiers[item.nodeid] in wanted]
    dropped = [item for item in items if tiers[item.nodeid] not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = heaviest_first(keep, tiers, groups)


# The order the groups go out to the processes in (eliza.core.suite passes xdist
# --no-loadscope-reorder): end-to-end groups first, then the cell tier's, the unit tests last,
# and within a tier the groups of more tests first. The many small unit groups then fill the
# processes up at the end, instead of a minute-long end-to-end test starting when the others
# have nothing left. A stable sort: a group's tests, and a module's, keep their order.
TIER_ORDER = ("slow", "e2e", "cell", "unit")


def heaviest_first(
    items: list[pytest.Item], tiers: dict[str, str | list[str] | None], groups: dict[str, str]
) -> list[pytest.Item]:
    size: dict[str, int] = {}
    for item in items:
        size[groups[item.nodeid]] = size.get(groups[item.nodeid], 0) + 1

    def rank(item: pytest.Item) -> tuple[int, int, str]:
        group = groups[item.nodeid]
        tier = tiers[item.nodeid]
        return (TIER_ORDER.index(tier) if isinstance(tier, str) else 0, -size[group], group)

    return sorted(items, key=rank)
