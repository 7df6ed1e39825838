"""Planning a cell's build: pure functions from a matrix cell to the Conan command line.

Running the plan is the Conan adapter's job (eliza.adapters.conan). Keeping the two apart lets the
tests check the exact command, options and folders of every cell with no compiler.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from eliza.core.conan_profiles import BUILD_PROFILE, host_profile_name
from eliza.core.layout import cell_build_dir
from eliza.core.matrix import Cell, Matrix, Platform
from eliza.core.target import export_control, library_file

LLAMA_PACKAGE = "llama-cpp"


@dataclass(frozen=True, kw_only=True)
class CellBuildPlan:
    cell_id: str
    output_dir: Path
    library: Path
    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


def llama_choices(platform: Platform) -> dict[str, str]:
    """llama.cpp's options for the platform: its llama_options and whether it is the CUDA or
    the Vulkan build. with_vulkan is named only where it is on: a package without it is the
    one built before the option existed (the recipes leave it out of their package ids)."""
    options = dict(platform.llama_options)
    options["with_cuda"] = "True" if platform.llama_backend == "cuda" else "False"
    if platform.llama_backend == "vulkan":
        options["with_vulkan"] = "True"
    return dict(sorted(options.items()))


def llama_option_args(platform: Platform) -> tuple[str, ...]:
    args: list[str] = []
    for key, value in llama_choices(platform).items():
        args += ["-o", f"{LLAMA_PACKAGE}/*:{key}={value}"]
    return tuple(args)


def llama_choice_args(platform: Platform) -> tuple[str, ...]:
    """The same choices as this package's own options (conanfile.py passes them on to
    llama-cpp): a consumer, whose graph never holds llama.cpp, selects the binary by them."""
    args: list[str] = []
    for key, value in llama_choices(platform).items():
        args += ["-o", f"&:{key}={value}"]
    return tuple(args)


def package_option_defaults(matrix: Matrix) -> dict[str, str]:
    """The package's options a consumer gets without naming them, as conanfile.py declares
    them from the same matrix (llama_choices there): every gate off, no sanitizer, and of
    llama.cpp's choices the value of the first platform that sets one (with_cuda and
    with_vulkan: False)."""
    defaults = {g.conan_option: "False" for g in matrix.gates} | {"sanitize": "none"}
    found: dict[str, str] = {}
    for platform in matrix.platforms:
        for key, value in platform.llama_options.items():
            found.setdefault(key, value)
    return defaults | {"with_cuda": "False", "with_vulkan": "False"} | dict(sorted(found.items()))


def gate_option_args(cell: Cell, all_gate_options: tuple[str, ...]) -> tuple[str, ...]:
    """Every known gate is passed explicitly, ON or OFF, so a cell's options are complete."""
    enabled = {g.conan_option for g in cell.gates}
    args: list[str] = []
    for option in sorted(all_gate_options):
        args += ["-o", f"&:{option}={'True' if option in enabled else 'False'}"]
    return tuple(args)


def conan_build_argv(
    source: Path, out: Path, platform: Platform, llama_version: str, build_type: str = "Release"
) -> list[str]:
    """`conan build` of a source tree for a platform, without this tree's own options (gates,
    test kit), so a baseline checkout of an older commit builds with the same command."""
    return [
        "conan",
        "build",
        str(source),
        "--output-folder",
        str(out),
        # What the binaries are for, and this machine, where the build runs.
        "--profile:host",
        host_profile_name(platform),
        "--profile:build",
        BUILD_PROFILE,
        "--settings:host",
        f"build_type={build_type}",
        "--build",
        "missing",
        # Re-read recipes from the in-repo index: without it Conan keeps a cached recipe
        # revision and an edited recipe would silently not apply.
        "--update",
        "--format",
        "json",
        "--conf",
        f"user.eliza:llama_cpp_version={llama_version}",
        "--conf",
        f"user.eliza:export_control={export_control(platform).value}",
        *llama_option_args(platform),
    ]


def cell_runtimes(cell: Cell) -> tuple[tuple[str, str], ...]:
    """(gate id, Conan reference) of each of the cell's gates whose runtime its platform
    gets (matrix.yaml: runtime_package on runtime_platforms)."""
    return tuple((g.id, ref) for g in cell.gates if (ref := g.runtime_for(cell.platform.id)))


def llama_binary_key(cell: Cell) -> tuple[str, str | None]:
    """Cells with equal keys link the same llama.cpp binary: a platform's gates never change
    llama.cpp's options (the seam leaves its path alone), a build variant gives it its own
    (the sanitize option `plan_cell_build` adds)."""
    return (cell.platform.id, cell.variant.id if cell.variant is not None else None)


def plan_cell_build(
    cell: Cell,
    *,
    repo: Path,
    all_gate_options: tuple[str, ...],
    llama_version: str,
    build_type: str = "Release",
    with_test_kit: bool = False,
    extra_conf: Mapping[str, str] | None = None,
) -> CellBuildPlan:
    out = cell_build_dir(cell.id, repo)
    argv = [
        *conan_build_argv(repo, out, cell.platform, llama_version, build_type),
        *gate_option_args(cell, all_gate_options),
        *llama_choice_args(cell.platform),
        "-o",
        f"&:with_test_kit={'True' if with_test_kit else 'False'}",
    ]
    if cell.variant is not None:  # its own llama.cpp package and the library's flags
        sanitize = cell.variant.sanitize_option
        argv += ["-o", f"{LLAMA_PACKAGE}/*:sanitize={sanitize}", "-o", f"&:sanitize={sanitize}"]
    runtimes = cell_runtimes(cell)
    if runtimes:  # the gates' runtime packages (conanfile.py requires them)
        argv += ["--conf", "user.eliza:runtimes=" + ",".join(f"{g}={ref}" for g, ref in runtimes)]
    for key, value in sorted((extra_conf or {}).items()):
        argv += ["--conf", f"{key}={value}"]
    return CellBuildPlan(
        cell_id=cell.id, output_dir=out, library=out / "build" / library_file(cell.platform), argv=tuple(argv)
    )
