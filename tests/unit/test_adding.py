"""Adding a platform or a gate is one matrix.yaml entry: every derived artefact follows
(sessions, build plans, CI jobs, report rows, the exit checklist's scope), with no
compiler. The native side of a new gate is covered by tests/integration."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from eliza.app.services.ci_files import templates_dir
from eliza.core.build_plan import llama_option_args, plan_cell_build
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Matrix
from eliza.core.report import GridState, HeaderFacts, PlatformCapability, build_report
from eliza.core.sessions import matrix_sessions
from eliza.formats.ci_workflow import render_workflow
from eliza.formats.matrix_yaml import parse_matrix
from tests.signing import TEST_POLICY

RAW: dict[str, Any] = yaml.safe_load((REPO_ROOT / "matrix.yaml").read_text())
HOST_PLATFORM = RAW["platforms"][0]  # the reference platform, built on this host


def with_platform() -> Matrix:
    data = yaml.safe_load(yaml.safe_dump(RAW))
    data["platforms"].append(
        {
            **HOST_PLATFORM,
            "id": "linux-cpu-v2",
            "description": "Linux x86-64 at the x86-64-v2 level",
            "llama_options": {"cpu_isa": "x86-64-v2"},
        }
    )
    data["cells"]["product"].append({"platforms": ["linux-cpu-v2"], "gate_sets": [[]]})
    return parse_matrix(yaml.safe_dump(data), "matrix.yaml")


def with_gate() -> Matrix:
    data = yaml.safe_load(yaml.safe_dump(RAW))
    data["gates"].append(
        {
            "id": "qnn",
            "description": "Qualcomm QNN in-process backend",
            "cmake_option": "ELIZA_ENABLE_QNN",
            "conan_option": "with_qnn",
            "factory": "qnn",
            "artifacts": ["text/*.qnnbin"],
        }
    )
    data["platforms"][0]["allowed_gates"].append("qnn")
    data["cells"]["product"].append({"platforms": [HOST_PLATFORM["id"]], "gate_sets": [["qnn"]]})
    return parse_matrix(yaml.safe_dump(data), "matrix.yaml")


def jobs(matrix: Matrix) -> dict[str, Any]:
    workflow: dict[str, Any] = yaml.safe_load(render_workflow(matrix, templates_dir(REPO_ROOT))["matrix.yml"])
    return workflow["jobs"]


def report_states(matrix: Matrix) -> dict[tuple[str, str], GridState]:
    can = PlatformCapability(can_build=True, build_reason="", can_run=True, run_reason="")
    report = build_report(
        matrix,
        records=[],
        current_fingerprint=lambda cell, check: None,
        capabilities={p.id: can for p in matrix.platforms},
        artifact_matches=lambda artifact: None,
        facts=HeaderFacts(commit="c", dirty=False, generated_at="2026-01-01T00:00:00.000Z", host="h"),
        trust=TEST_POLICY,
    )
    return {(e.cell, e.check): e.state for e in report.entries()}


def test_a_new_platform_gets_sessions_plans_jobs_and_report_rows(tmp_path: Path) -> None:
    matrix = with_platform()
    names = {s.name for s in matrix_sessions(matrix)}
    assert {"build-linux-cpu-v2", "build-linux-cpu-v2.none", "bench-linux-cpu-v2"} <= names
    cell = matrix.cell("linux-cpu-v2.none")
    plan = plan_cell_build(
        cell, repo=tmp_path, all_gate_options=tuple(g.conan_option for g in matrix.gates), llama_version="v"
    )
    assert "llama-cpp/*:cpu_isa=x86-64-v2" in plan.argv
    # its own llama.cpp package: the options differ from the reference platform's
    assert llama_option_args(cell.platform) != llama_option_args(matrix.platforms[0])
    assert "linux-cpu-v2_none" in jobs(matrix)
    states = report_states(matrix)
    assert {(cell.id, c.id) for c in cell.checks} <= set(states)
    assert all(states[(cell.id, c.id)] is GridState.NOT_RUN for c in cell.checks)


def test_a_new_gate_gets_sessions_options_jobs_and_report_rows(tmp_path: Path) -> None:
    matrix = with_gate()
    host = HOST_PLATFORM["id"]
    cell = matrix.cell(f"{host}.qnn")
    assert f"build-{host}.qnn" in {s.name for s in matrix_sessions(matrix)}
    options = tuple(g.conan_option for g in matrix.gates)
    plan = plan_cell_build(cell, repo=tmp_path, all_gate_options=options, llama_version="v")
    assert "&:with_qnn=True" in plan.argv
    # every other cell passes the new gate OFF, so no cell silently changes
    for other in matrix.cells_of(host):
        if other.id != cell.id:
            argv = plan_cell_build(other, repo=tmp_path, all_gate_options=options, llama_version="v").argv
            assert "&:with_qnn=False" in argv
    assert f"{host}_qnn" in jobs(matrix)
    states = report_states(matrix)
    assert (cell.id, "byte-identity-gates") in states  # a gated cell: the gated-only checks apply
    checklist = matrix.exit_checklist
    assert checklist is not None
    assert any(box.scope.contains(cell) for box in checklist.boxes if box.scope.gates == "some")
