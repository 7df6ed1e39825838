"""The planner and the perf check: it runs natively on the four linux-cpu cells against
the baseline commit's build, never under the emulator, not with --no-bench, and fresh
evidence of the same reference and rounds is kept."""

from __future__ import annotations

from dataclasses import replace

from eliza.core.evidence import Status
from eliza.core.matrix import CheckKind, Matrix
from eliza.core.report.states import GridState
from eliza.core.verify_plan import Build, BuildRole, Keep, Run, Selection, Skip, perf_identity, plan
from tests.unit.test_verify_plan import (
    BASELINE,
    HASHES,
    LINUX_CPU,
    SELECT_ALL,
    evidence_for,
    facts,
    only_step,
)

OTHER = "1" * 40


def test_perf_runs_on_the_linux_cpu_cells_against_the_baseline_build(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), SELECT_ALL)
    for cell in LINUX_CPU:
        step = only_step(p, cell, "perf")
        assert isinstance(step, Run) and step.kind is CheckKind.PERF
        assert step.how == "native" and step.baseline_commit == BASELINE
    assert [b.commit for b in p.builds if b.role is BuildRole.BASELINE] == [BASELINE]


def test_perf_is_never_timed_under_the_emulator(matrix: Matrix) -> None:
    arm = matrix.cell("linux-arm64.none")
    assert "perf" not in {c.id for c in arm.checks}  # its matrix entry lists its own checks
    p = plan(matrix, facts(matrix), SELECT_ALL)
    cuda = only_step(p, "linux-cuda.none", "perf")
    assert isinstance(cuda, Skip)  # no GPU here and perf is not device-free


def test_no_bench_and_no_reference_skip_perf_saying_why(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), Selection(baseline_commit=BASELINE, bench=False))
    step = only_step(p, "linux-cpu.none", "perf")
    assert isinstance(step, Skip) and step.reason == "--no-bench"
    p = plan(matrix, facts(matrix), Selection(baseline_commit=None, no_baseline_reason="a shallow clone"))
    step = only_step(p, "linux-cpu.none", "perf")
    assert isinstance(step, Skip) and step.records and step.state is GridState.NOT_RUN
    assert "a shallow clone" in step.reason and "--perf-reference" in step.reason


def test_a_perf_reference_commit_is_built_and_a_directory_builds_nothing(matrix: Matrix) -> None:
    p = plan(matrix, facts(matrix), Selection(baseline_commit=BASELINE, perf_reference_commit=OTHER))
    step = only_step(p, "linux-cpu.none", "perf")
    assert isinstance(step, Run) and step.baseline_commit == OTHER
    assert {b.commit for b in p.builds if isinstance(b, Build) and b.role is BuildRole.BASELINE} == {
        BASELINE,
        OTHER,
    }
    p = plan(matrix, facts(matrix), Selection(baseline_commit=None, perf_reference_library="ab" * 32))
    step = only_step(p, "linux-cpu.none", "perf")
    assert isinstance(step, Run) and step.baseline_commit == ""


def test_fresh_perf_evidence_is_kept_and_other_rounds_or_reference_rerun_it(matrix: Matrix) -> None:
    known = evidence_for(matrix, LINUX_CPU)
    p = plan(matrix, facts(matrix, evidence=known), SELECT_ALL)
    assert isinstance(only_step(p, "linux-cpu.none", "perf"), Keep)
    rounds = matrix.check("perf").rounds
    p = plan(
        matrix, facts(matrix, evidence=known), Selection(baseline_commit=BASELINE, perf_rounds=rounds + 2)
    )
    step = only_step(p, "linux-cpu.none", "perf")
    assert isinstance(step, Run) and "reference" in step.reason
    p = plan(
        matrix,
        facts(matrix, evidence=known),
        Selection(baseline_commit=BASELINE, perf_reference_commit=OTHER),
    )
    assert isinstance(only_step(p, "linux-cpu.none", "perf"), Run)
    assert perf_identity(BASELINE, rounds) != perf_identity(OTHER, rounds)


def test_inconclusive_perf_evidence_stands_until_more_rounds_or_rerun(matrix: Matrix) -> None:
    cell = "linux-cpu.none"
    known = evidence_for(matrix, LINUX_CPU)
    undecided = evidence_for(matrix, [cell], status=Status.INCONCLUSIVE)
    known[(cell, "perf")] = undecided[(cell, "perf")]

    def perf_step(selection: Selection, **kw: object) -> object:
        return only_step(plan(matrix, facts(matrix, evidence=known, **kw), selection), cell, "perf")

    kept = perf_step(SELECT_ALL)
    assert isinstance(kept, Keep) and "inconclusive" in kept.reason and "--rounds N" in kept.reason
    p = plan(matrix, facts(matrix, evidence=known), SELECT_ALL)
    assert [r for r in p.runs if r.cell.platform == "linux-cpu"] == []  # nothing changed, nothing runs
    rounds = matrix.check("perf").rounds
    assert isinstance(perf_step(Selection(baseline_commit=BASELINE, perf_rounds=2 * rounds)), Run)
    assert isinstance(perf_step(Selection(baseline_commit=BASELINE, rerun=True)), Run)
    # an undecided record whose inputs changed is stale like any other
    assert isinstance(perf_step(SELECT_ALL, hashes=replace(HASHES, native="n2")), Run)
    # only perf: an inconclusive record of another check (none writes one today) runs again
    known[(cell, "selector")] = undecided[(cell, "selector")]
    p = plan(matrix, facts(matrix, evidence=known), SELECT_ALL)
    assert isinstance(only_step(p, cell, "selector"), Run)


def test_backend_perf_runs_on_the_cells_with_a_runtime_and_needs_no_baseline(matrix: Matrix) -> None:
    """backend-perf times a gate's runtime against the same library's llama.cpp path: it
    applies to the cells with a gate whose runtime the platform has, builds no reference, runs without
    a declared baseline, and its identity is the llama.cpp path and the rounds."""
    assert {c.id for c in matrix.cells if "backend-perf" in {k.id for k in c.checks}} == {
        "linux-cpu.litert",
        "linux-cpu.mlx",
        "linux-cpu.litert+mlx",
        "macos-arm64.mlx",
    }
    p = plan(matrix, facts(matrix), Selection(baseline_commit=None, no_baseline_reason="a shallow clone"))
    for cell in ("linux-cpu.mlx", "linux-cpu.litert+mlx"):
        step = only_step(p, cell, "backend-perf")
        assert isinstance(step, Run) and step.kind is CheckKind.PERF and step.baseline_commit == ""
    assert not [b for b in p.builds if b.role is BuildRole.BASELINE]  # perf itself is skipped there
    p = plan(matrix, facts(matrix), Selection(baseline_commit=BASELINE, bench=False))
    step = only_step(p, "linux-cpu.mlx", "backend-perf")
    assert isinstance(step, Skip) and step.reason == "--no-bench"
