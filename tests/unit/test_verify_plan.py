"""The verify planner in-process: every decision verify makes, from matrices written into
tmp_path, host facts and evidence made here. No compiler, no build."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from eliza.core.cell_id import CellId
from eliza.core.evidence import Counts, EvidenceRecord, HostInfo, Status
from eliza.core.fingerprint import InputHashes, fingerprint_for
from eliza.core.host import HostFacts, Tool, VulkanDevice, decide
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import CheckKind, Matrix
from eliza.core.report.states import GridState
from eliza.core.verify_plan import (
    BACKEND_PERF_REFERENCE,
    Build,
    BuildRole,
    Keep,
    KnownRecord,
    PlanFacts,
    Run,
    Selection,
    Skip,
    VerifyPlan,
    compares_with_baseline,
    perf_identity,
    plan,
    simulated_identity,
)
from eliza.formats.matrix_yaml import load_matrix


def tool(name: str) -> Tool:
    return Tool(name=name, path=f"/usr/bin/{name}", version="1.0")


# An x86-64-v3 Linux host with the arm64 cross compiler and qemu, nvcc and installable
# cuBLAS, no GPU, no phone, no Mac: what this project's dev box has.
HOST = HostFacts(
    os="linux",
    arch="x86_64",
    cpu_count=2,
    cpu_flags=frozenset(
        {"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3", "avx", "avx2"}
        | {"bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}
    ),
    compiler=tool("g++"),
    conan=tool("conan"),
    cmake=tool("cmake"),
    ninja=tool("ninja"),
    nvcc=tool("nvcc"),
    cuda_version="13.0",
    cublas_installable=True,
    programs={n: tool(n) for n in ("aarch64-linux-gnu-g++", "aarch64-linux-gnu-gcc", "qemu-aarch64")},
    existing_dirs=frozenset({"/usr/aarch64-linux-gnu"}),
)
HASHES = InputHashes(
    native="n1",
    recipes="r1",
    bundle="b1",
    prompts="p1",
    selector_tests="s1",
    gate_tests="g1",
    bench="be1",
    llama_source="0.3.36",
    tools={
        "compiler": "1.0",
        "cmake": "1.0",
        "conan": "1.0",
        "ninja": "1.0",
        "nvcc": "1.0",
        "abidiff": "2.2",
    },
    build_check="bc1",
    abi_check="ac1",
    native_tests="nt1",
)
BASELINE = "808e7c19fbed23fc8ecaef52353f8dc0ab829031"


def facts(matrix: Matrix, **kw: object) -> PlanFacts:
    caps = {p.id: decide(HOST, p) for p in matrix.platforms}
    base = PlanFacts(capabilities=caps, hashes=HASHES, cached_llama=frozenset({("linux-cpu", "none")}))
    return replace(base, **kw)  # type: ignore[arg-type]


def evidence_for(
    matrix: Matrix,
    cells: list[str],
    *,
    status: Status = Status.PASSED,
    intact: bool = True,
    baseline: str = BASELINE,
    details: dict[str, object] | None = None,
) -> dict[tuple[str, str], KnownRecord]:
    """Passing evidence of every check of the cells, fingerprinted against HASHES."""
    out: dict[tuple[str, str], KnownRecord] = {}
    for cell_id in cells:
        cell = matrix.cell(cell_id)
        for check in cell.checks:
            commit = baseline if compares_with_baseline(cell, check) else ""
            if check.kind is CheckKind.PERF and check.subject == "backend":
                commit = perf_identity(BACKEND_PERF_REFERENCE, check.rounds)
            elif check.kind is CheckKind.PERF:
                # as the planner names it on HOST (the simulated CPU's part included)
                simulator = decide(HOST, cell.platform).simulator
                commit = perf_identity(baseline, check.rounds, simulated_identity(check, simulator))
            extra: dict[str, object] = {"compared_with_no_gate": True} if check.kind is CheckKind.ABI else {}
            record = EvidenceRecord(
                cell=cell.id,
                check=check.id,
                status=status,
                reason="",
                counts=Counts(
                    ran=3,
                    passed=3 if status is Status.PASSED else 1,
                    failed=0 if status is Status.PASSED else 2,
                ),
                fingerprint=fingerprint_for(cell, check, HASHES, commit),
                commit="c0ffee",
                dirty=False,
                host=HostInfo(os="linux", cpu="x86_64"),
                started_at="2026-11-30T12:00:00Z",
                finished_at="2026-11-30T12:00:10Z",
                duration_s=10.0,
                details={**extra, **(details or {})},
            )
            out[(cell.id, check.id)] = KnownRecord(
                record=record, path=f"build/evidence/{cell.id}__{check.id}.json", artifacts_intact=intact
            )
    return out


def steps_for(p: VerifyPlan, cell: str, check: str) -> list[object]:
    wanted = CellId.parse(cell)
    return [s for s in p.steps if s.cell == wanted and getattr(s, "check", None) == check]


def only_step(p: VerifyPlan, cell: str, check: str) -> object:
    found = steps_for(p, cell, check)
    assert len(found) == 1, found
    return found[0]


LINUX_CPU = ["linux-cpu.none", "linux-cpu.litert", "linux-cpu.mlx", "linux-cpu.litert+mlx"]
LINUX_ARM = ["linux-arm64.none", "linux-arm64.litert", "linux-arm64.mlx", "linux-arm64.litert+mlx"]
SELECT_ALL = Selection(baseline_commit=BASELINE)


# --- fresh versus stale ----------------------------------------------------------------


def test_fresh_evidence_is_kept_and_nothing_is_built(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix, evidence=evidence_for(matrix, LINUX_CPU + LINUX_ARM)), SELECT_ALL)
    cpu_and_arm = [
        s for s in p.steps if s.cell.platform in ("linux-cpu", "linux-arm64") and s.cell.variant is None
    ]
    # the real bundle's checks under qemu are the only steps that are not kept: they never
    # run there (the no-gate cell's reference and agreement, each runtime's agreement)
    emulated_only = [s for s in cpu_and_arm if not isinstance(s, Keep)]
    assert [(str(s.cell), s.check) for s in emulated_only] == [
        ("linux-arm64.none", "byte-identity-reference.gemma3-270m"),
        ("linux-arm64.none", "cross-arch-agreement.gemma3-270m"),
        ("linux-arm64.litert", "backend-agreement.gemma3-270m"),
        ("linux-arm64.mlx", "backend-agreement.gemma3-270m"),
        ("linux-arm64.litert+mlx", "backend-agreement.gemma3-270m"),
    ]
    assert cpu_and_arm and all(isinstance(s, Keep) for s in cpu_and_arm if s not in emulated_only)
    assert p.builds == [] and p.runs == []
    keep = only_step(p, "linux-cpu.none", "selector")
    assert isinstance(keep, Keep) and keep.evidence.endswith("linux-cpu.none__selector.json")


def test_a_changed_native_tree_reruns_and_rebuilds_and_names_the_input(matrix: Matrix) -> None:
    known = evidence_for(matrix, LINUX_CPU + LINUX_ARM)
    p = plan(matrix, facts(matrix, evidence=known, hashes=replace(HASHES, native="n2")), SELECT_ALL)
    assert not p.kept
    built = {str(b.cell) for b in p.builds if not b.commit}
    assert built == set(LINUX_CPU + LINUX_ARM)
    run = only_step(p, "linux-cpu.mlx", "abi")
    assert isinstance(run, Run) and "native" in run.reason


def test_changed_selector_tests_rerun_only_the_selector_and_need_no_build(matrix: Matrix) -> None:
    known = evidence_for(matrix, LINUX_CPU + LINUX_ARM)
    p = plan(matrix, facts(matrix, evidence=known, hashes=replace(HASHES, selector_tests="s2")), SELECT_ALL)
    assert {r.check for r in p.runs} == {"selector"}
    assert len(p.runs) == 8
    # the libraries stand (their build evidence is kept): nothing to build
    assert p.builds == []


def test_failed_evidence_and_missing_artifacts_rerun(matrix: Matrix) -> None:
    failed = evidence_for(matrix, LINUX_CPU, status=Status.FAILED)
    p = plan(matrix, facts(matrix, evidence=failed), SELECT_ALL)
    run = only_step(p, "linux-cpu.none", "selector")
    assert isinstance(run, Run) and run.reason.startswith("last run failed")
    gone = evidence_for(matrix, LINUX_CPU, intact=False)
    p = plan(matrix, facts(matrix, evidence=gone), SELECT_ALL)
    build = only_step(p, "linux-cpu.none", "build")
    assert isinstance(build, Run) and "artifact" in build.reason
    # the selector judges no artifact of its own: it stands while its inputs do
    assert isinstance(only_step(p, "linux-cpu.none", "selector"), Keep)


def test_a_record_whose_shared_artifact_was_written_again_runs_again(matrix: Matrix) -> None:
    """The plan and the report judge a record alike: a gate-fallthrough record (a check
    whose artifacts the plan did not weigh on their own) naming a platform's junit file
    that a later run wrote again is INVALID in the report, so the plan runs it again
    rather than keeping it; the same record with the file as recorded, or absent here
    (the report: not verified, not a mismatch), stands."""
    from eliza.core.evidence import Artifact
    from eliza.core.report.model import ArtifactResult, ArtifactState

    junit = "build/junit/gates-linux-cpu.xml"

    def with_junit(state: ArtifactState) -> dict[tuple[str, str], KnownRecord]:
        known = evidence_for(matrix, LINUX_CPU)
        for cell in ("linux-cpu.litert", "linux-cpu.mlx"):
            entry = known[(cell, "gate-fallthrough")]
            record = replace(entry.record, artifacts=(Artifact(path=junit, sha256="ab" * 32),))
            known[(cell, "gate-fallthrough")] = replace(
                entry,
                record=record,
                artifacts_intact=state is ArtifactState.MATCH,
                artifacts=(ArtifactResult(path=junit, sha256="ab" * 32, state=state),),
            )
        return known

    p = plan(matrix, facts(matrix, evidence=with_junit(ArtifactState.MISMATCH)), SELECT_ALL)
    for cell in ("linux-cpu.litert", "linux-cpu.mlx"):
        run = only_step(p, cell, "gate-fallthrough")
        assert isinstance(run, Run), run
        assert "the report would count it INVALID" in run.reason and junit in run.reason, run.reason
    for state in (ArtifactState.MATCH, ArtifactState.ABSENT):
        p = plan(matrix, facts(matrix, evidence=with_junit(state)), SELECT_ALL)
        assert isinstance(only_step(p, "linux-cpu.mlx", "gate-fallthrough"), Keep), state


def test_a_run_check_of_another_library_than_the_cells_build_reruns(matrix: Matrix) -> None:
    from tests.signing import library_subject

    known = evidence_for(matrix, LINUX_CPU)

    def naming(cell: str, check: str, sha: str) -> None:
        entry = known[(cell, check)]
        record = replace(entry.record, subjects=(library_subject(cell, sha),))
        known[(cell, check)] = replace(entry, record=record)

    built, other = "a" * 64, "b" * 64
    for check in ("build", "selector", "consumer"):
        naming("linux-cpu.none", check, built)
    naming("linux-cpu.none", "gate-fallthrough", other)  # ran against a library since replaced
    p = plan(matrix, facts(matrix, evidence=known), SELECT_ALL)
    assert isinstance(only_step(p, "linux-cpu.none", "selector"), Keep)
    assert isinstance(only_step(p, "linux-cpu.none", "consumer"), Keep)
    run = only_step(p, "linux-cpu.none", "gate-fallthrough")
    assert isinstance(run, Run) and "bbbbbbbbbbbb" in run.reason and "aaaaaaaaaaaa" in run.reason
    # a build-time check (abi) is judged by its artifacts, not by the binding
    assert isinstance(only_step(p, "linux-cpu.none", "abi"), Keep)


def test_rerun_runs_everything_runnable(matrix: Matrix) -> None:
    known = evidence_for(matrix, LINUX_CPU)
    p = plan(matrix, facts(matrix, evidence=known), replace(SELECT_ALL, rerun=True))
    assert not p.kept
    assert all(r.reason == "--rerun" for r in p.runs)


def test_abi_evidence_of_a_narrower_build_is_not_kept(matrix: Matrix) -> None:
    known = evidence_for(matrix, LINUX_CPU)
    narrow = known[("linux-cpu.mlx", "abi")]
    known[("linux-cpu.mlx", "abi")] = replace(
        narrow, record=replace(narrow.record, details={"compared_with_no_gate": False})
    )
    p = plan(matrix, facts(matrix, evidence=known), SELECT_ALL)
    run = only_step(p, "linux-cpu.mlx", "abi")
    assert isinstance(run, Run) and "narrower" in run.reason
    assert run.needs == (CellId.parse("linux-cpu.none"),)


# --- platform groups ---------------------------------------------------------------------


def test_one_stale_gate_fallthrough_reruns_the_whole_platform(matrix: Matrix) -> None:
    known = evidence_for(matrix, LINUX_CPU)
    del known[("linux-cpu.mlx", "gate-fallthrough")]
    p = plan(matrix, facts(matrix, evidence=known), SELECT_ALL)
    runs = [r for r in p.runs if r.check == "gate-fallthrough" and r.cell.platform == "linux-cpu"]
    assert len(runs) == 4
    other = only_step(p, "linux-cpu.none", "gate-fallthrough")
    assert isinstance(other, Run) and "gate-fallthrough runs again" in other.reason
    # the bench group is untouched
    assert isinstance(only_step(p, "linux-cpu.none", "byte-identity-reference"), Keep)


def test_the_bench_group_needs_the_reference_cell_and_the_baseline(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), SELECT_ALL)
    gates = only_step(p, "linux-cpu.mlx", "byte-identity-gates")
    assert isinstance(gates, Run) and CellId.parse("linux-cpu.none") in gates.needs
    base = only_step(p, "linux-cpu.mlx", "byte-identity-baseline")
    assert isinstance(base, Run) and base.baseline_commit == BASELINE
    baselines = [b for b in p.builds if b.role is BuildRole.BASELINE]
    assert [(str(b.cell), b.commit) for b in baselines] == [("linux-cpu.none", BASELINE)]


def test_without_a_baseline_commit_the_baseline_check_is_skipped_with_evidence(matrix: Matrix) -> None:
    why = "the declared baseline is not in this clone (a shallow clone?)"
    known = evidence_for(matrix, LINUX_CPU)
    p = plan(matrix, facts(matrix, evidence=known), Selection(baseline_commit=None, no_baseline_reason=why))
    skip = only_step(p, "linux-cpu.none", "byte-identity-baseline")
    assert isinstance(skip, Skip) and skip.records and skip.reason == why
    assert f"byte-identity-baseline not run: {why}" in p.notes
    # and the rest of the bench group stands
    assert isinstance(only_step(p, "linux-cpu.none", "byte-identity-drafter"), Keep)


def test_no_bench_skips_the_identity_checks_without_evidence(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), replace(SELECT_ALL, bench=False))
    skip = only_step(p, "linux-cpu.litert", "byte-identity-gates")
    assert isinstance(skip, Skip) and skip.reason == "--no-bench" and not skip.records
    assert isinstance(only_step(p, "linux-cpu.litert", "selector"), Run)


# --- emulation, CPU fallback, slow builds, devices --------------------------------------


def test_an_emulated_platform_runs_under_its_emulator(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), SELECT_ALL)
    run = only_step(p, "linux-arm64.litert", "selector")
    assert isinstance(run, Run) and run.how.startswith("emulated: ") and "qemu-aarch64" in run.how
    assert any("linux-arm64: checks run as target binaries" in n for n in p.notes)


def test_cross_arch_agreement_needs_the_reference_platform_cell(matrix: Matrix) -> None:
    known = evidence_for(matrix, ["linux-cpu.none"])
    p = plan(
        matrix,
        facts(matrix, evidence=known),
        Selection(cells=frozenset({CellId.parse("linux-arm64.litert")})),
    )
    agree = only_step(p, "linux-arm64.litert", "cross-arch-agreement")
    assert isinstance(agree, Run) and CellId.parse("linux-cpu.none") in agree.needs
    # linux-cpu.none's build evidence stands, so its library needs no build
    assert [str(b.cell) for b in p.builds] == ["linux-arm64.none", "linux-arm64.litert"]
    roles = {str(b.cell): b.role for b in p.builds}
    assert roles == {"linux-arm64.none": BuildRole.REFERENCE, "linux-arm64.litert": BuildRole.SUBJECT}


def test_a_reference_cell_another_check_needs_is_built_as_reference(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), Selection(cells=frozenset({CellId.parse("linux-arm64.litert")})))
    roles = {str(b.cell): b.role for b in p.builds}
    assert roles["linux-cpu.none"] is BuildRole.REFERENCE
    # only the selected cell is a subject: the references get no steps of their own
    assert {str(s.cell) for s in p.steps if not isinstance(s, Build)} == {"linux-arm64.litert"}


def test_cuda_runs_device_free_checks_on_the_cpu_fallback(matrix: Matrix) -> None:
    cached = frozenset({("linux-cpu", "none"), ("linux-cuda", "none")})
    p = plan(matrix, facts(matrix, cached_llama=cached), SELECT_ALL)
    selector = only_step(p, "linux-cuda.mlx", "selector")
    assert isinstance(selector, Run) and selector.how == "CPU fallback, without nvidia-gpu"
    bench = only_step(p, "linux-cuda.mlx", "byte-identity-reference")
    assert isinstance(bench, Skip) and bench.state in (GridState.NOT_RUNNABLE_HERE, GridState.DEVICE_GATED)
    build = only_step(p, "linux-cuda.none", "build")
    assert isinstance(build, Run) and build.needs == (CellId.parse("linux-cpu.none"),)


def test_cuda_alone_builds_the_cpu_reference_for_its_fallback_check(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), Selection(cells=frozenset({CellId.parse("linux-cuda.none")})))
    roles = {str(b.cell): b.role for b in p.builds}
    assert roles == {"linux-cpu.none": BuildRole.CPU_FALLBACK_REFERENCE, "linux-cuda.none": BuildRole.SUBJECT}


def test_a_slow_platform_not_cached_is_skipped_with_build_evidence(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), SELECT_ALL)
    skip = only_step(p, "linux-cuda.none", "build")
    assert isinstance(skip, Skip) and skip.records and "slow build not started" in skip.reason
    assert not any(s.cell.platform == "linux-cuda" for s in p.steps if isinstance(s, (Run, Build)))
    # its other checks write nothing: the report judges them as the host allows
    other = only_step(p, "linux-cuda.none", "selector")
    assert isinstance(other, Skip) and not other.records


def test_a_slow_variant_runs_only_when_named_cached_or_not(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), SELECT_ALL)
    skip = only_step(p, "linux-cpu.none@asan-ubsan", "native-suite")
    assert isinstance(skip, Skip) and skip.records and "--cell linux-cpu.none@asan-ubsan" in skip.reason
    named = Selection(cells=frozenset({CellId.parse("linux-cpu.none@asan-ubsan")}))
    p = plan(matrix, facts(matrix), named)
    assert isinstance(only_step(p, "linux-cpu.none@asan-ubsan", "native-suite"), Run)
    # its llama.cpp package in the cache changes nothing of a plain verify
    cached = frozenset({("linux-cpu", "none"), ("linux-cpu", "address+undefined")})
    with_cache = plan(matrix, facts(matrix, cached_llama=cached), SELECT_ALL)
    assert with_cache == plan(matrix, facts(matrix), SELECT_ALL)


def test_a_plain_verify_keeps_a_named_slow_variants_fresh_evidence(matrix: Matrix) -> None:
    # `nox -s build-linux-cpu.none@asan-ubsan` (or a named verify) wrote passing evidence;
    # a plain verify does not start the variant, and must not record a skip over it.
    variant = "linux-cpu.none@asan-ubsan"
    known = evidence_for(matrix, [*LINUX_CPU, variant])
    for selection in (SELECT_ALL, replace(SELECT_ALL, rerun=True)):
        p = plan(matrix, facts(matrix, evidence=known), selection)
        for check in ("build", "native-suite"):
            step = only_step(p, variant, check)
            assert isinstance(step, Keep), step
            assert "fresh passing evidence" in step.reason and f"--cell {variant}" in step.reason
        assert not any(s.cell == CellId.parse(variant) for s in p.runs + p.builds)
    # stale evidence (inputs changed) is no longer the variant's word: the skip is recorded
    stale = plan(matrix, facts(matrix, evidence=known, hashes=replace(HASHES, native="n2")), SELECT_ALL)
    skip = only_step(stale, variant, "native-suite")
    assert isinstance(skip, Skip) and skip.records
    # a fresh failure stands: the skip writes nothing over it
    failed = evidence_for(matrix, [variant], status=Status.FAILED)
    p = plan(matrix, facts(matrix, evidence={**known, **failed}), SELECT_ALL)
    skip = only_step(p, variant, "native-suite")
    assert isinstance(skip, Skip) and not skip.records and "(failed) stands" in skip.reason
    # its missing library is no evidence to keep
    gone = evidence_for(matrix, [variant], intact=False)
    p = plan(matrix, facts(matrix, evidence={**known, **gone}), SELECT_ALL)
    build = only_step(p, variant, "build")
    assert isinstance(build, Skip) and build.records


def test_a_slow_platforms_fresh_build_evidence_stands_when_its_package_left_the_cache(
    matrix: Matrix,
) -> None:
    cuda = [c.id for c in matrix.cells_of("linux-cuda")]
    known = evidence_for(
        matrix,
        LINUX_CPU + cuda,
        details={"subchecks": [{"name": "without a GPU: runs on the CPU fallback"}]},
    )
    p = plan(matrix, facts(matrix, evidence=known), SELECT_ALL)
    assert isinstance(only_step(p, "linux-cuda.none", "build"), Keep)
    assert not any(s.cell.platform == "linux-cuda" for s in p.runs + p.builds)


def test_device_only_platforms_are_device_gated_or_not_buildable(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), SELECT_ALL)
    run = only_step(p, "android-arm64.litert", "byte-identity-reference")
    assert isinstance(run, Skip) and run.state is GridState.DEVICE_GATED and not run.records
    build = only_step(p, "macos-arm64.none", "build")
    assert isinstance(build, Skip) and build.state is GridState.NOT_BUILDABLE_HERE
    assert "Xcode" in build.reason
    assert any(n.startswith("macos-arm64: not buildable here") for n in p.notes)


def test_a_platform_that_cannot_run_is_not_runnable_here(tmp_path: Path) -> None:
    matrix = load_matrix(REPO_ROOT / "matrix.yaml")
    no_qemu = replace(HOST, programs={n: tool(n) for n in ("aarch64-linux-gnu-g++", "aarch64-linux-gnu-gcc")})
    caps = {p.id: decide(no_qemu, p) for p in matrix.platforms}
    p = plan(matrix, replace(facts(matrix), capabilities=caps), SELECT_ALL)
    skip = only_step(p, "linux-arm64.none", "selector")
    assert (
        isinstance(skip, Skip) and skip.state is GridState.NOT_RUNNABLE_HERE and "qemu-aarch64" in skip.reason
    )
    assert isinstance(only_step(p, "linux-arm64.none", "build"), Run)


# --- selection, build sessions, the plan's forms ------------------------------------------


def test_cell_selection_plans_that_cell_and_its_references_only(matrix: Matrix) -> None:
    p = plan(
        matrix,
        facts(matrix),
        Selection(cells=frozenset({CellId.parse("linux-cpu.mlx")}), baseline_commit=BASELINE),
    )
    subjects = {str(s.cell) for s in p.steps if not isinstance(s, Build)}
    assert subjects == {"linux-cpu.mlx"}
    roles = {str(b.cell): b.role for b in p.builds if not b.commit}
    assert roles == {"linux-cpu.none": BuildRole.REFERENCE, "linux-cpu.mlx": BuildRole.SUBJECT}


def test_a_build_session_plans_build_and_abi_and_builds_every_cell(matrix: Matrix) -> None:
    known = evidence_for(matrix, LINUX_CPU)
    kinds = frozenset({CheckKind.BUILD, CheckKind.ABI})
    cells = frozenset(CellId.parse(c) for c in LINUX_CPU)
    selection = Selection(cells=cells, kinds=kinds, build_all=True, baseline_commit=BASELINE)
    p = plan(matrix, facts(matrix, evidence=known), selection)
    assert {str(b.cell) for b in p.builds} == set(LINUX_CPU)
    assert {s.check for s in p.steps if not isinstance(s, Build)} == {"build", "abi"}
    assert all(isinstance(s, Keep) for s in p.steps if not isinstance(s, Build))


def test_plan_lines_group_steps_by_cell_with_every_reason(matrix: Matrix) -> None:
    known = evidence_for(matrix, LINUX_CPU)
    p = plan(matrix, facts(matrix, evidence=known), SELECT_ALL)
    lines = p.lines()
    assert lines[-1].startswith("plan: ") and f"{len(p.kept)} kept" in lines[-1]
    at = lines.index("linux-cpu.none:")
    block = lines[at + 1 : at + 1 + len(list(steps_for(p, "linux-cpu.none", "build")))]
    assert block and all(line.startswith("  keep ") for line in block)
    assert all(("keep" not in line and "skip" not in line) or ": " in line for line in lines)
    as_json = p.as_dict()
    assert as_json["counts"] == p.counts()
    assert len(as_json["steps"]) == len(p.steps)  # type: ignore[arg-type]


def test_cell_ids_parse_and_print_round_trip() -> None:
    for text in ("linux-cpu.none", "linux-cpu.litert+mlx", "linux-cpu.none@asan-ubsan"):
        assert str(CellId.parse(text)) == text
    assert CellId.parse("linux-cpu.none").is_reference
    assert not CellId.parse("linux-cpu.none@asan-ubsan").is_reference
    for bad in ("linux-cpu", "linux-cpu.mlx+litert", "linux-cpu.none@", ".none"):
        with pytest.raises(ValueError, match=r"linux-cpu|none|@"):
            CellId.parse(bad)


def test_the_matrix_names_each_platform_reference_cell_once(matrix: Matrix) -> None:
    for platform in matrix.platforms:
        ref = matrix.reference_cell(platform.id)
        assert ref is not None and ref.ref == CellId(platform=platform.id)
        assert matrix.cell(ref.ref) is ref


def test_the_abi_of_x86_64_release_cells_is_compared_with_the_pre_m3_library(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), SELECT_ALL)
    abi = only_step(p, "linux-cpu.litert", "abi")
    assert isinstance(abi, Run) and abi.baseline_commit == BASELINE
    # the same baseline build serves the bench and the abi check
    assert [(str(b.cell), b.commit) for b in p.builds if b.commit] == [("linux-cpu.none", BASELINE)]
    arm = only_step(p, "linux-arm64.litert", "abi")
    assert isinstance(arm, Run) and arm.baseline_commit == ""  # another architecture: not compared
    # a record made against another baseline (or none) is stale for this one
    known = evidence_for(matrix, LINUX_CPU, baseline="0" * 40)
    p = plan(matrix, facts(matrix, evidence=known), SELECT_ALL)
    stale = only_step(p, "linux-cpu.mlx", "abi")
    assert isinstance(stale, Run) and "baseline" in stale.reason


def test_the_same_skip_already_on_record_is_not_written_again(matrix: Matrix) -> None:
    variant = "linux-cpu.none@asan-ubsan"
    known = evidence_for(matrix, LINUX_CPU)
    first = only_step(plan(matrix, facts(matrix, evidence=known), SELECT_ALL), variant, "native-suite")
    assert isinstance(first, Skip) and first.records
    skipped = evidence_for(matrix, [variant], status=Status.SKIPPED)
    on_record = {key: replace(k, record=replace(k.record, reason=first.reason)) for key, k in skipped.items()}
    again = only_step(
        plan(matrix, facts(matrix, evidence={**known, **on_record}), SELECT_ALL), variant, "native-suite"
    )
    assert isinstance(again, Skip) and not again.records and again.reason == first.reason
    # another reason (or other inputs) is written
    other = {
        key: replace(k, record=replace(k.record, reason="an older reason")) for key, k in skipped.items()
    }
    written = only_step(
        plan(matrix, facts(matrix, evidence={**known, **other}), SELECT_ALL), variant, "native-suite"
    )
    assert isinstance(written, Skip) and written.records


VULKAN_HOST = replace(
    HOST,
    vulkan_headers="1.3.239 at /usr/include/vulkan",
    glslc=tool("glslc"),
    vulkan_devices=(
        VulkanDevice(index=0, name="llvmpipe (LLVM 15.0.6, 256 bits)", driver="llvmpipe", device_type="cpu"),
    ),
)


def vulkan_facts(matrix: Matrix, **kw: object) -> PlanFacts:
    caps = {p.id: decide(VULKAN_HOST, p) for p in matrix.platforms}
    cached = frozenset({("linux-cpu", "none"), ("linux-vulkan", "none")})
    return replace(PlanFacts(capabilities=caps, hashes=HASHES, cached_llama=cached), **kw)  # type: ignore[arg-type]


def test_a_named_only_platform_stays_out_of_a_plain_verify_even_when_cached(matrix: Matrix) -> None:
    p = plan(matrix, vulkan_facts(matrix), SELECT_ALL)
    skip = only_step(p, "linux-vulkan.none", "build")
    assert isinstance(skip, Skip) and skip.records and "--platform linux-vulkan" in skip.reason
    assert not any(s.cell.platform == "linux-vulkan" for s in p.steps if isinstance(s, (Run, Build)))


def test_a_named_vulkan_cell_runs_on_the_device_and_builds_its_agreement_reference(matrix: Matrix) -> None:
    named = Selection(cells=frozenset({CellId.parse("linux-vulkan.none")}))
    p = plan(matrix, vulkan_facts(matrix), named)
    roles = {str(b.cell): b.role for b in p.builds}
    assert roles["linux-vulkan.none"] is BuildRole.SUBJECT and "linux-cpu.none" in roles
    agreement = only_step(p, "linux-vulkan.none", "cross-arch-agreement")
    assert isinstance(agreement, Run) and "Vulkan device 0: llvmpipe" in agreement.how
    assert "a software device" in agreement.how
    assert isinstance(only_step(p, "linux-vulkan.none", "cross-arch-agreement.gemma3-270m"), Run)


def test_without_a_vulkan_device_the_vulkan_cells_build_but_do_not_run(matrix: Matrix) -> None:
    host = replace(VULKAN_HOST, vulkan_devices=(), vulkan_device_reason="the Vulkan loader lists no device")
    caps = {p.id: decide(host, p) for p in matrix.platforms}
    named = Selection(cells=frozenset({CellId.parse("linux-vulkan.none")}))
    p = plan(matrix, replace(vulkan_facts(matrix), capabilities=caps), named)
    assert isinstance(only_step(p, "linux-vulkan.none", "build"), Run)
    skip = only_step(p, "linux-vulkan.none", "byte-identity-reference")
    assert isinstance(skip, Skip) and "a Vulkan device: the Vulkan loader lists no device" in skip.reason
