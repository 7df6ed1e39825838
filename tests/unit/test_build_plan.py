"""Build plans and the session table, checked from the shipped matrix with no compiler."""

from __future__ import annotations

from pathlib import Path

from eliza.core.build_plan import llama_binary_key, llama_option_args, plan_cell_build
from eliza.core.layout import REPO_ROOT
from eliza.core.sessions import SessionKind, matrix_sessions
from eliza.formats.matrix_yaml import load_matrix

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
GATE_OPTIONS = tuple(g.conan_option for g in MATRIX.gates)


def option_values(argv: tuple[str, ...]) -> dict[str, str]:
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    return dict(p.split("=", 1) for p in pairs)


def test_gate_cells_share_llama_options_and_differ_only_in_gates(tmp_path: Path) -> None:
    cells = tuple(c for c in MATRIX.cells_of("linux-cpu") if c.variant is None)
    plans = [
        plan_cell_build(c, repo=tmp_path, all_gate_options=GATE_OPTIONS, llama_version="0.3.36")
        for c in cells
    ]
    llama = [{k: v for k, v in option_values(p.argv).items() if k.startswith("llama-cpp/")} for p in plans]
    assert all(opts == llama[0] for opts in llama)
    assert llama[0]["llama-cpp/*:cpu_isa"] == MATRIX.platform("linux-cpu").llama_options["cpu_isa"]
    for cell, plan in zip(cells, plans, strict=True):
        values = option_values(plan.argv)
        enabled = {g.conan_option for g in cell.gates}
        # every gate of the matrix is passed, ON exactly for the cell's own gates
        assert {o: values[f"&:{o}"] for o in GATE_OPTIONS} == {o: str(o in enabled) for o in GATE_OPTIONS}
    assert len({p.output_dir for p in plans}) == len(cells)
    assert all(p.output_dir.is_relative_to(tmp_path / "build" / "linux-cpu") for p in plans)


def test_a_sanitizer_variant_gets_its_own_llama_package_and_flags(tmp_path: Path) -> None:
    release = MATRIX.cell("linux-cpu.none")
    asan = MATRIX.cell("linux-cpu.none@asan-ubsan")
    assert asan.variant is not None and asan.variant.sanitizers == ("address", "undefined")
    plans = [
        plan_cell_build(c, repo=tmp_path, all_gate_options=GATE_OPTIONS, llama_version="0.3.36")
        for c in (release, asan)
    ]
    before, after = (option_values(p.argv) for p in plans)
    # the release command is what it was before variants existed: no sanitize option at all
    assert not any("sanitize" in key for key in before)
    assert after["llama-cpp/*:sanitize"] == "address+undefined"
    assert after["&:sanitize"] == "address+undefined"
    assert {k: v for k, v in after.items() if "sanitize" not in k} == before
    assert plans[1].output_dir == tmp_path / "build" / "linux-cpu" / "none@asan-ubsan"
    assert plans[0].output_dir != plans[1].output_dir


def test_cells_share_a_llama_binary_key_exactly_when_their_llama_options_agree(tmp_path: Path) -> None:
    # the build fetches one llama.cpp binary from the remote per key: a key shared by cells
    # whose llama.cpp differs would leave the second one to compile it
    for platform in ("linux-cpu", "linux-arm64"):
        cells = MATRIX.cells_of(platform)
        plans = {
            c.id: plan_cell_build(c, repo=tmp_path, all_gate_options=GATE_OPTIONS, llama_version="0.3.36")
            for c in cells
        }
        options = {
            cell: {k: v for k, v in option_values(plan.argv).items() if k.startswith("llama-cpp/")}
            for cell, plan in plans.items()
        }
        for a in cells:
            for b in cells:
                same = llama_binary_key(a) == llama_binary_key(b)
                assert same == (options[a.id] == options[b.id]), (a.id, b.id)
    keys = {llama_binary_key(c) for c in MATRIX.cells_of("linux-cpu")}
    assert len(keys) == 2, keys  # the release build and the sanitizer variant's


def test_cuda_platform_turns_on_cuda_with_matrix_architectures() -> None:
    platform = MATRIX.platform("linux-cuda")
    opts = dict(a.split("=", 1) for a in llama_option_args(platform) if a != "-o")
    assert opts["llama-cpp/*:with_cuda"] == "True"
    assert opts["llama-cpp/*:cuda_architectures"] == platform.llama_options["cuda_architectures"]
    cpu = dict(a.split("=", 1) for a in llama_option_args(MATRIX.platform("linux-cpu")) if a != "-o")
    assert cpu["llama-cpp/*:with_cuda"] == "False"


def test_plan_updates_recipes_and_reports_json(tmp_path: Path) -> None:
    plan = plan_cell_build(
        MATRIX.cells[0], repo=tmp_path, all_gate_options=GATE_OPTIONS, llama_version="fork.abc"
    )
    argv = list(plan.argv)
    assert argv[:3] == ["conan", "build", str(tmp_path)]
    assert "--update" in argv and argv[argv.index("--format") + 1] == "json"
    assert "user.eliza:llama_cpp_version=fork.abc" in argv


def test_session_table_covers_every_platform_and_cell() -> None:
    specs = matrix_sessions(MATRIX)
    names = [s.name for s in specs]
    assert len(names) == len(set(names))
    for platform in MATRIX.platforms:
        assert f"build-{platform.id}" in names
    for cell in MATRIX.cells:
        assert f"build-{cell.id}" in names
    linux = next(s for s in specs if s.name == "build-linux-cpu")
    cells = MATRIX.cells_of("linux-cpu")
    slow = [c for c in cells if c.variant is not None and c.variant.slow_build]
    product = [c for c in cells if c not in slow]
    assert slow and product, "the matrix has a slow-build variant cell on linux-cpu"
    assert linux.kind is SessionKind.BUILD_PLATFORM and f"{len(product)} cells" in linux.description
    # the platform session builds its product cells; a slow variant's cell only its own session
    assert linux.cells == tuple(c.id for c in product)
    for cell in slow:
        assert f"build-{cell.id} builds its variant" in linux.description
        assert next(s for s in specs if s.name == f"build-{cell.id}").cells == (cell.id,)
    for cell in product:
        assert cell.id == f"linux-cpu.{cell.key}" and cell.key in linux.description.split("(")[1], cell.id
    assert all(s.description for s in specs)


def test_session_descriptions_say_what_a_variant_or_an_emulator_changes() -> None:
    specs = {s.name: s for s in matrix_sessions(MATRIX)}
    for cell in MATRIX.cells:
        described = specs[f"build-{cell.id}"].description
        assert (cell.variant is not None and f"{cell.variant.id} variant" in described) or (
            cell.variant is None and "variant" not in described
        ), cell.id
    for platform in MATRIX.platforms:
        if not MATRIX.cells_of(platform.id):
            continue
        bench = specs[f"bench-{platform.id}"].description
        assert (platform.emulator is not None) == ("no seam-overhead timing" in bench), platform.id


def test_llama_cpp_choices_are_the_package_options_too_and_agree(tmp_path: Path) -> None:
    for platform_id in ("linux-cpu", "linux-cuda", "linux-arm64"):
        (cell,) = [c for c in MATRIX.cells_of(platform_id) if c.variant is None and not c.gates]
        values = option_values(
            plan_cell_build(cell, repo=tmp_path, all_gate_options=GATE_OPTIONS, llama_version="0.3.36").argv
        )
        llama = {k.removeprefix("llama-cpp/*:"): v for k, v in values.items() if k.startswith("llama-cpp/")}
        ours = {k.removeprefix("&:"): v for k, v in values.items() if k.removeprefix("&:") in llama}
        assert ours == llama and llama["with_cuda"] == str(platform_id == "linux-cuda")
