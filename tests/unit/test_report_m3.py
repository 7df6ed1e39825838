"""The M3 report: device-free checks on a CUDA platform's CPU fallback, boxes ticked for what
the evidence covers with the part that waits for a device, the declared baseline, the
"verifiable here" table, device-gated items claimed by evidence, and figures with dates."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eliza.core.evidence import Counts, EvidenceRecord, HostInfo, InputFingerprint, LoadedRecord, Status
from eliza.core.matrix import (
    Baseline,
    Cell,
    Check,
    CheckKind,
    ChecklistScope,
    DeviceGatedItem,
    ExitBox,
    ExitChecklist,
    Gate,
    Matrix,
    Platform,
    Requirement,
    VerifiableItem,
)
from eliza.core.report import GridState, HeaderFacts, PlatformCapability, Report, build_report
from eliza.formats.report_json import report_to_dict
from tests.signing import TEST_POLICY, library_subject, signed

R = Requirement
PARTS = {"native": "n1", "bundle": "b1"}
DECLARED = "1" * 40

CPU = Platform(
    id="linux-cpu", description="cpu", os="linux", arch="x86_64", llama_backend="cpu",
    build_requires=(R.CONAN,), run_requires=(R.X86_64_V3_CPU,), allowed_gates=("npu",),
)  # fmt: skip
CUDA = Platform(
    id="linux-cuda", description="cuda", os="linux", arch="x86_64", llama_backend="cuda",
    build_requires=(R.CONAN, R.NVCC), run_requires=(R.X86_64_V3_CPU, R.NVIDIA_GPU),
    fallback_run_requires=(R.X86_64_V3_CPU,), allowed_gates=("npu",),
)  # fmt: skip
NPU = Gate(
    id="npu", description="npu", cmake_option="ELIZA_ENABLE_NPU", conan_option="with_npu",
    factory="npu-rt", artifacts=("text/*.npu",),
)  # fmt: skip


def _check(id_: str, kind: CheckKind, *, run: bool, device_free: bool = False) -> Check:
    return Check(
        id=id_, kind=kind, description=id_, pass_rule=id_, needs_run=run, device_free=device_free
    )  # fmt: skip


BUILD = _check("build", CheckKind.BUILD, run=False)
SELECTOR = _check("selector", CheckKind.SELECTOR, run=True, device_free=True)
REFERENCE = _check("byte-identity-reference", CheckKind.BYTE_IDENTITY_REFERENCE, run=True)
BASELINE = _check("byte-identity-baseline", CheckKind.BYTE_IDENTITY_BASELINE, run=True)
CHECKS = (BUILD, SELECTOR, REFERENCE, BASELINE)
LINUX_ANY = ChecklistScope(os="linux", arch="x86_64", gates="any")
LINUX_NONE = ChecklistScope(os="linux", arch="x86_64", gates="none")

GPU_ITEM = DeviceGatedItem(
    id="gpu-run", title="GPU run", needs="an NVIDIA GPU", milestone="M3", evidence="identity on a GPU",
    platforms=("linux-cuda",), checks=("byte-identity-reference",), metrics=("tok_s",),
)  # fmt: skip
PIXEL_ITEM = DeviceGatedItem(
    id="pixel", title="Pixel run", needs="a Pixel", milestone="M4", evidence="logs", platforms=("linux-cuda",)
)


def make_matrix(items: tuple[DeviceGatedItem, ...] = (GPU_ITEM,)) -> Matrix:
    cells = tuple(Cell(platform=p, gates=g, checks=CHECKS) for p in (CPU, CUDA) for g in ((), (NPU,)))
    return Matrix(
        source="matrix.yaml",
        sha256="f" * 64,
        platforms=(CPU, CUDA),
        gates=(NPU,),
        checks=CHECKS,
        cells=cells,
        device_gated=items,
        exit_checklist=ExitChecklist(
            milestone="M3",
            boxes=(
                ExitBox(text="selector", checks=("selector",), scope=LINUX_ANY),
                ExitBox(text="identity", checks=("build", "byte-identity-baseline"), scope=LINUX_NONE),
            ),
        ),
        baseline=Baseline(ref=DECLARED, label="pre-M3"),
        verifiable_here=(
            VerifiableItem(item="Selector", how="fakes", checks=("selector",), scope=LINUX_ANY),
        ),
    )


GPU_LESS = {
    "linux-cpu": PlatformCapability(can_build=True, build_reason="ok", can_run=True, run_reason="ok"),
    "linux-cuda": PlatformCapability(
        can_build=True,
        build_reason="ok",
        can_run=False,
        run_reason="needs an NVIDIA GPU: no driver",
        can_run_fallback=True,
        fallback_reason="has an x86-64-v3 CPU",
    ),
}


def rec(
    cell: str,
    check: str,
    *,
    details: Mapping[str, Any] | None = None,
    metrics: Mapping[str, float] | None = None,
    finished: str = "2026-01-31T12:00:10Z",
) -> LoadedRecord:
    record = EvidenceRecord(
        cell=cell, check=check, status=Status.PASSED, reason="", counts=Counts(ran=2, passed=2, failed=0),
        fingerprint=InputFingerprint.of(PARTS), commit="c0ffee", dirty=False,
        host=HostInfo(os="linux", cpu="x86_64"), artifacts=(), started_at="2026-01-31T12:00:00Z",
        finished_at=finished, duration_s=1.0, metrics=dict(metrics or {}), details=dict(details or {}),
        log_tail="", subjects=(library_subject(cell),),
    )  # fmt: skip
    return signed(LoadedRecord(path=Path(f"ev/{cell}-{check}.json"), record=record, cell=cell, check=check))


def report_of(*records: LoadedRecord, matrix: Matrix | None = None) -> Report:
    return build_report(
        matrix or make_matrix(),
        records=records,
        current_fingerprint=lambda cell, check: InputFingerprint.of(PARTS),
        capabilities=GPU_LESS,
        artifact_matches=lambda a: None,
        facts=HeaderFacts(commit="c0ffee", dirty=False, generated_at="2026-02-01T00:00:00Z", host="h"),
        trust=TEST_POLICY,
    )


CELLS = ("linux-cpu.none", "linux-cpu.npu", "linux-cuda.none", "linux-cuda.npu")


def test_device_free_checks_of_a_cuda_cell_are_runnable_on_a_gpu_less_host() -> None:
    report = report_of()
    # Without evidence a device-free check is merely not run: this host could run it.
    assert report.entry("linux-cuda.none", "selector").state is GridState.NOT_RUN
    gpu = report.entry("linux-cuda.none", "byte-identity-reference")
    assert gpu.state is GridState.NOT_RUNNABLE_HERE
    assert "NVIDIA GPU" in gpu.reason and "claims gpu-run" in gpu.reason


def test_an_item_without_checks_still_gates_the_platform_it_names() -> None:
    report = report_of(matrix=make_matrix((PIXEL_ITEM,)))
    assert report.entry("linux-cuda.none", "byte-identity-reference").state is GridState.DEVICE_GATED
    assert report.entry("linux-cuda.none", "selector").state is GridState.NOT_RUN
    [row] = report.device_gated
    assert not row.claimed and row.missing == ("no check of the matrix produces this evidence yet",)


def test_a_box_ticks_here_when_only_device_runs_are_missing() -> None:
    selectors = [rec(c, "selector") for c in CELLS]
    baseline = {"baseline_commit": DECLARED}
    identity = [rec(c, "byte-identity-baseline", details=baseline) for c in ("linux-cpu.none",)]
    builds = [rec(c, "build") for c in CELLS]  # the selector counts against each cell's build
    report = report_of(*selectors, *identity, *builds)
    box1, box2 = report.checklist
    assert box1.ticked and not box1.ticked_here and box1.waits == ()
    assert not box2.ticked and box2.ticked_here and box2.missing == ()
    [wait] = box2.waits
    assert wait.startswith(
        "linux-cuda.none · byte-identity-baseline: NOT RUNNABLE HERE — needs an NVIDIA GPU"
    )
    assert box2.notes == (f"checked against the declared baseline {DECLARED[:12]} (pre-M3)",)
    # One not-run entry that this host could run makes the box plainly open.
    report = report_of(*selectors, *identity, builds[0])
    assert not report.checklist[1].ticked_here
    assert any(m.startswith("linux-cuda.none · build: NOT RUN") for m in report.checklist[1].missing)


def test_evidence_against_another_baseline_does_not_tick_the_pre_m3_box() -> None:
    other = "2" * 40
    report = report_of(
        rec("linux-cpu.none", "byte-identity-baseline", details={"baseline_commit": other}),
        *[rec(c, "build") for c in ("linux-cpu.none", "linux-cuda.none")],
    )
    assert report.entry("linux-cpu.none", "byte-identity-baseline").state is GridState.VERIFIED
    box = report.checklist[1]
    assert not box.ticked and not box.ticked_here
    assert any(f"checked against {other[:12]}, not the declared baseline" in m for m in box.missing)


def test_the_verifiable_here_table_is_judged_from_evidence() -> None:
    builds = [rec(c, "build") for c in CELLS]
    [row] = report_of(*[rec(c, "selector") for c in CELLS[:3]], *builds).verifiable_here
    assert not row.verified and row.counts == "3 of 4 entries VERIFIED"
    assert any(m.startswith("linux-cuda.npu · selector: NOT RUN") for m in row.missing)
    [row] = report_of(*[rec(c, "selector") for c in CELLS], *builds).verifiable_here
    assert row.verified and row.counts == "4 of 4 entries VERIFIED"
    # the bundles its evidence covers are named: the selector runs on the fixture only
    assert row.bundles == ("tiny",)
    as_json = report_to_dict(report_of())
    assert as_json["verifiable_here"][0]["item"] == "Selector"


def test_a_device_item_is_claimed_by_verified_evidence_with_its_metrics() -> None:
    assert not report_of().device_gated[0].claimed
    with_tok_s = [rec(c, "byte-identity-reference", metrics={"tok_s": 812.5}) for c in CELLS[2:]]
    builds = [rec(c, "build") for c in CELLS[2:]]
    row = report_of(*with_tok_s, *builds).device_gated[0]
    assert row.claimed and row.missing == ()
    assert {r.cell for r in row.claim_evidence} == {"linux-cuda.none", "linux-cuda.npu"}
    without = [rec("linux-cuda.none", "byte-identity-reference"), with_tok_s[1]]
    row = report_of(*without, *builds).device_gated[0]
    assert not row.claimed
    assert row.missing == ("linux-cuda.none · byte-identity-reference: the evidence has no tok_s",)


def test_figures_say_when_they_were_measured() -> None:
    report = report_of(
        rec("linux-cpu.none", "byte-identity-reference", metrics={"seam_overhead_ratio": 0.991, "tokens": 3}),
    )
    [figure] = report.figures  # tokens is a count, not a figure
    assert (figure.name, figure.value, figure.measured_at) == (
        "seam_overhead_ratio",
        "0.991",
        "2026-01-31T12:00:10Z",
    )
    assert figure.fresh


def test_a_figure_shared_by_checks_of_one_run_is_listed_once() -> None:
    # The FFI run's tok/s is in the reference and the baseline evidence of a cell alike.
    report = report_of(
        rec("linux-cpu.none", "byte-identity-reference", metrics={"tok_s": 99.5}),
        rec("linux-cpu.none", "byte-identity-baseline", metrics={"tok_s": 99.5}),
        rec("linux-cpu.npu", "byte-identity-reference", metrics={"tok_s": 99.5}),
    )
    assert [(f.cell, f.check) for f in report.figures] == [
        ("linux-cpu.none", "byte-identity-reference"),
        ("linux-cpu.npu", "byte-identity-reference"),
    ]


def test_a_scope_where_everything_waits_for_a_device_is_not_ticked_here() -> None:
    nothing_runs = dict(GPU_LESS)
    nothing_runs["linux-cpu"] = PlatformCapability(
        can_build=True, build_reason="ok", can_run=False, run_reason="needs an x86-64-v3 CPU"
    )
    report = build_report(
        make_matrix(),
        records=[rec(c, "build") for c in ("linux-cpu.none", "linux-cuda.none")],
        current_fingerprint=lambda cell, check: InputFingerprint.of(PARTS),
        capabilities=nothing_runs,
        artifact_matches=lambda a: None,
        facts=HeaderFacts(commit="c0ffee", dirty=False, generated_at="2026-02-01T00:00:00Z", host="h"),
        trust=TEST_POLICY,
    )
    box = report.checklist[1]  # build is VERIFIED, but byte-identity-baseline nowhere
    assert box.waits and not box.missing
    assert not box.ticked and not box.ticked_here


def test_baseline_evidence_that_names_no_commit_does_not_count_for_the_declared_baseline() -> None:
    report = report_of(
        rec("linux-cpu.none", "byte-identity-baseline"),
        *[rec(c, "build") for c in ("linux-cpu.none", "linux-cuda.none")],
    )
    box = report.checklist[1]
    assert not box.ticked_here
    assert "linux-cpu.none · byte-identity-baseline: the evidence names no baseline commit" in box.missing


def test_a_cpu_fallback_run_shows_in_the_grid_and_claims_no_device_item() -> None:
    fallback = {"ran_on": "CPU fallback, without nvidia-gpu"}
    records = [rec(c, "byte-identity-reference", metrics={"tok_s": 9.0}, details=fallback) for c in CELLS[2:]]
    builds = [rec(c, "build") for c in CELLS]
    report = report_of(*records, rec("linux-cpu.none", "selector"), *builds)
    entry = report.entry("linux-cuda.none", "byte-identity-reference")
    assert entry.state is GridState.VERIFIED and entry.qualifier == "CPU fallback"
    assert report.entry("linux-cpu.none", "selector").qualifier == ""
    row = report.device_gated[0]
    assert not row.claimed
    assert (
        "linux-cuda.none · byte-identity-reference: ran on the CPU fallback, without nvidia-gpu, "
        "not on the device" in row.missing
    )
