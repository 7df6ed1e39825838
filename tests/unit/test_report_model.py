"""The report model: grid states from evidence, duplicates, capability reasons, M3 checklist."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from eliza.core.evidence import (
    SCHEMA_VERSION,
    Artifact,
    Counts,
    EvidenceRecord,
    HostInfo,
    InputFingerprint,
    LoadedRecord,
    Status,
    Subject,
)
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Cell, Check, CheckKind, DeviceGatedItem, Gate, Matrix, Platform, Requirement
from eliza.core.report import (
    REPORT_SCHEMA_VERSION,
    ArtifactState,
    GridState,
    HeaderFacts,
    PlatformCapability,
    Report,
    build_report,
    entry_anchor,
)
from eliza.formats.evidence_json import read_records, write_record
from eliza.formats.matrix_yaml import load_matrix
from eliza.formats.report_json import report_to_dict
from tests.signing import TEST_KEY, TEST_POLICY, library_subject, signed

CURRENT = {"native": "n1", "recipes": "r1", "lockfile": "l1", "matrix": "m1", "bundle": "b1"}
GOOD_SHA = "a" * 64
BAD_SHA = "b" * 64

LINUX = Platform(
    id="linux-cpu",
    description="Linux x86_64, CPU",
    os="linux",
    arch="x86_64",
    llama_backend="cpu",
    build_requires=(Requirement.CXX_COMPILER, Requirement.CONAN),
    run_requires=(Requirement.X86_64_V3_CPU,),
    allowed_gates=("npu", "xla"),
)
ANDROID = Platform(
    id="android-arm64",
    description="Android arm64",
    os="android",
    arch="arm64",
    llama_backend="cpu",
    build_requires=(Requirement.ANDROID_NDK,),
    run_requires=(Requirement.ANDROID_DEVICE,),
    allowed_gates=("npu",),
)
NPU = Gate(
    id="npu",
    description="NPU runtime",
    cmake_option="ELIZA_ENABLE_NPU",
    conan_option="with_npu",
    factory="npu-rt",
    artifacts=("text/*.npumodel",),
    runtime_platforms=("android-arm64",),
)
XLA = Gate(
    id="xla",
    description="XLA runtime",
    cmake_option="ELIZA_ENABLE_XLA",
    conan_option="with_xla",
    factory="xla-rt",
    artifacts=("text/*.xlapkg",),
    runtime_platforms=("macos-arm64",),
)

# The project's own exit checklist: the boxes are data of matrix.yaml.
EXIT_CHECKLIST = load_matrix(REPO_ROOT / "matrix.yaml").exit_checklist


def _check(id_: str, kind: CheckKind, needs_run: bool, gated_only: bool = False) -> Check:
    return Check(
        id=id_,
        kind=kind,
        description=f"{id_} check",
        pass_rule=f"{id_} passes",
        needs_run=needs_run,
        gated_cells_only=gated_only,
    )


BUILD = _check("build", CheckKind.BUILD, needs_run=False)
SELECTOR = _check("selector", CheckKind.SELECTOR, needs_run=True)
REFERENCE = _check("byte-identity-reference", CheckKind.BYTE_IDENTITY_REFERENCE, needs_run=True)
BASELINE = _check("byte-identity-baseline", CheckKind.BYTE_IDENTITY_BASELINE, needs_run=True)
FALLTHROUGH = _check("gate-fallthrough", CheckKind.GATE_FALLTHROUGH, needs_run=True, gated_only=True)
ABI = _check("abi", CheckKind.ABI, needs_run=False, gated_only=True)
CONSUMER = _check("consumer", CheckKind.CONSUMER, needs_run=True)
CHECKS = (BUILD, SELECTOR, REFERENCE, BASELINE, FALLTHROUGH, ABI, CONSUMER)

DEVICE_ITEM = DeviceGatedItem(
    id="npu-on-device",
    title="NPU on-device tok/s, first-token, peak RSS",
    needs="Pixel",
    milestone="M4",
    evidence="bench record from a Pixel run",
    platforms=("android-arm64",),
)


def make_matrix() -> Matrix:
    cells = (
        Cell(platform=LINUX, gates=(), checks=CHECKS),
        Cell(platform=LINUX, gates=(NPU,), checks=CHECKS),
        Cell(platform=LINUX, gates=(XLA,), checks=CHECKS),
        Cell(platform=ANDROID, gates=(), checks=CHECKS),
        Cell(platform=ANDROID, gates=(NPU,), checks=CHECKS),
    )
    return Matrix(
        source="matrix.yaml",
        sha256="f" * 64,
        platforms=(LINUX, ANDROID),
        gates=(NPU, XLA),
        checks=CHECKS,
        cells=cells,
        device_gated=(DEVICE_ITEM,),
        exit_checklist=EXIT_CHECKLIST,
    )


CAPS = {
    "linux-cpu": PlatformCapability(
        can_build=True,
        build_reason="toolchain found",
        can_run=True,
        run_reason="ok",
    ),
    "android-arm64": PlatformCapability(
        can_build=False,
        build_reason="android-ndk not found (ANDROID_NDK_HOME unset)",
        can_run=False,
        run_reason="no android device attached",
    ),
}
FACTS = HeaderFacts(commit="c0ffee", dirty=False, generated_at="2026-02-01T00:00:00Z", host="test host")


def record(
    cell: str,
    check: str,
    *,
    status: Status = Status.PASSED,
    ran: int = 2,
    passed: int | None = None,
    failed: int = 0,
    parts: Mapping[str, str] = CURRENT,
    finished: str = "2026-01-31T12:00:10Z",
    artifacts: tuple[Artifact, ...] = (),
    reason: str = "",
    log_tail: str = "",
    details: Mapping[str, Any] | None = None,
    subjects: tuple[Subject, ...] | None = None,
) -> EvidenceRecord:
    return EvidenceRecord(
        cell=cell,
        check=check,
        status=status,
        reason=reason,
        counts=Counts(ran=ran, passed=ran - failed if passed is None else passed, failed=failed),
        fingerprint=InputFingerprint.of(parts),
        commit="c0ffee",
        dirty=False,
        host=HostInfo(os="linux", cpu="x86_64"),
        artifacts=artifacts,
        started_at="2026-01-31T12:00:00Z",
        finished_at=finished,
        duration_s=10.0,
        metrics={"tok_s": 100.0},
        details=details or {},
        log_tail=log_tail,
        subjects=subjects if subjects is not None else (library_subject(cell),),
    )


def loaded(rec: EvidenceRecord, path: str = "ev/x.json") -> LoadedRecord:
    return signed(LoadedRecord(path=Path(path), record=rec, cell=rec.cell, check=rec.check))


def current_of(cell: Cell, check: Check) -> InputFingerprint:
    return InputFingerprint.of(CURRENT)


def verify_artifact(artifact: Artifact) -> bool | None:
    return {GOOD_SHA: True, BAD_SHA: False}.get(artifact.sha256)


def report_of(
    *records: LoadedRecord,
    caps: Mapping[str, PlatformCapability] = CAPS,
    current: Any = None,
) -> Report:
    return build_report(
        make_matrix(),
        records=list(records),
        current_fingerprint=current if current is not None else current_of,
        capabilities=caps,
        artifact_matches=verify_artifact,
        facts=FACTS,
        trust=TEST_POLICY,
    )


def test_fresh_passing_nonempty_evidence_is_verified() -> None:
    lib = Artifact(path="lib.so", sha256=GOOD_SHA)
    report = report_of(loaded(record("linux-cpu.none", "build", artifacts=(lib,))))
    entry = report.entry("linux-cpu.none", "build")
    assert entry.state is GridState.VERIFIED
    assert entry.reason == "2/2 passed on the current inputs"
    assert entry.evidence is not None and entry.evidence.fresh
    assert entry.evidence.artifacts[0].state is ArtifactState.MATCH
    assert entry.anchor == entry_anchor("linux-cpu.none", "build")
    assert report.header.verified == 1
    # 5 cells x 7 checks, minus gate-fallthrough and abi on the two no-gate cells
    assert report.header.declared == 31
    by_state = {c.state: c.count for c in report.header.by_state}
    assert by_state[GridState.NOT_APPLICABLE] == 4


def test_other_fingerprint_is_stale_and_names_differing_parts() -> None:
    old = dict(CURRENT, native="n0", bundle="b0")
    report = report_of(loaded(record("linux-cpu.none", "build", parts=old)))
    entry = report.entry("linux-cpu.none", "build")
    assert entry.state is GridState.STALE
    assert "bundle, native" in entry.reason
    assert "last result: passed" in entry.reason
    assert entry.evidence is not None and entry.evidence.differing_parts == ("bundle", "native")
    assert report.header.verified == 0


def test_stale_when_only_the_current_key_is_known_or_nothing_is() -> None:
    old = dict(CURRENT, native="n0")
    key_only = {("linux-cpu.none", "build"): InputFingerprint.of(CURRENT).key}
    entry = report_of(loaded(record("linux-cpu.none", "build", parts=old)), current=key_only).entry(
        "linux-cpu.none", "build"
    )
    assert entry.state is GridState.STALE
    assert "current parts not supplied" in entry.reason
    # the mapping has no entry for this pair: freshness cannot be established, never VERIFIED
    entry = report_of(loaded(record("linux-cpu.none", "selector")), current=key_only).entry(
        "linux-cpu.none", "selector"
    )
    assert entry.state is GridState.STALE
    assert "could not be fingerprinted" in entry.reason


def test_artifact_mismatch_is_invalid_and_absent_artifact_is_noted() -> None:
    bad = record("linux-cpu.none", "build", artifacts=(Artifact(path="build/lib.so", sha256=BAD_SHA),))
    entry = report_of(loaded(bad)).entry("linux-cpu.none", "build")
    assert entry.state is GridState.INVALID
    assert "build/lib.so" in entry.reason
    elsewhere = Artifact(path="elsewhere/lib.so", sha256="c" * 64)
    absent = record("linux-cpu.none", "build", artifacts=(elsewhere,))
    entry = report_of(loaded(absent)).entry("linux-cpu.none", "build")
    assert entry.state is GridState.VERIFIED
    assert any("elsewhere/lib.so" in n and "not re-checked" in n for n in entry.notes)


def test_ran_nothing_is_never_verified() -> None:
    entry = report_of(loaded(record("linux-cpu.none", "selector", ran=0))).entry("linux-cpu.none", "selector")
    assert entry.state is GridState.NOT_RUN
    assert "ran nothing" in entry.reason


def test_passed_with_contradicting_counts_is_invalid() -> None:
    rec = record("linux-cpu.none", "selector", ran=3, passed=2, failed=0)
    entry = report_of(loaded(rec)).entry("linux-cpu.none", "selector")
    assert entry.state is GridState.INVALID
    assert "2/3 passed" in entry.reason


def test_failed_error_and_skipped_carry_their_reason() -> None:
    report = report_of(
        loaded(record("linux-cpu.none", "selector", status=Status.FAILED, failed=1, reason="rank tie case")),
        loaded(record("linux-cpu.none", "build", status=Status.ERROR, ran=0, reason="cmake crashed")),
        loaded(
            record(
                "linux-cpu.none",
                "byte-identity-baseline",
                status=Status.SKIPPED,
                ran=0,
                reason="no baseline ref given",
            )
        ),
    )
    selector = report.entry("linux-cpu.none", "selector")
    assert selector.state is GridState.FAILED
    assert "failed: rank tie case (1/2 passed, 1 failed)" in selector.reason
    build = report.entry("linux-cpu.none", "build")
    assert build.state is GridState.FAILED and "error: cmake crashed" in build.reason
    skipped = report.entry("linux-cpu.none", "byte-identity-baseline")
    assert skipped.state is GridState.NOT_RUN and skipped.reason == "skipped: no baseline ref given"


def test_merging_two_directories_gives_one_report_with_both_cells(tmp_path: Path) -> None:
    write_record(tmp_path / "job-a", record("linux-cpu.none", "build"), TEST_KEY)
    write_record(tmp_path / "job-b", record("linux-cpu.npu", "build"), TEST_KEY)
    report = report_of(*read_records([tmp_path / "job-a", tmp_path / "job-b"], TEST_POLICY.public_keys()))
    assert report.entry("linux-cpu.none", "build").state is GridState.VERIFIED
    assert report.entry("linux-cpu.npu", "build").state is GridState.VERIFIED
    assert report.header.verified == 2
    assert report.problems == ()


def test_duplicates_prefer_fresh_then_latest_and_list_the_rest() -> None:
    stale_newer = record(
        "linux-cpu.none", "build", parts=dict(CURRENT, native="n0"), finished="2026-01-31T13:00:00Z"
    )
    fresh_older = record(
        "linux-cpu.none",
        "build",
        status=Status.FAILED,
        failed=1,
        reason="link error",
        finished="2026-01-31T12:00:10Z",
    )
    fresh_newest = record("linux-cpu.none", "build", finished="2026-01-31T12:30:00Z")
    report = report_of(
        loaded(stale_newer, "a/r.json"), loaded(fresh_older, "b/r.json"), loaded(fresh_newest, "c/r.json")
    )
    entry = report.entry("linux-cpu.none", "build")
    assert entry.state is GridState.VERIFIED
    assert entry.evidence is not None and entry.evidence.path == "c/r.json"
    assert [(s.path, s.fresh, s.status) for s in entry.superseded] == [
        ("b/r.json", True, Status.FAILED),
        ("a/r.json", False, Status.PASSED),
    ]
    # a stale record never wins over a fresh one, however recent
    report = report_of(loaded(stale_newer, "a/r.json"), loaded(fresh_older, "b/r.json"))
    assert report.entry("linux-cpu.none", "build").state is GridState.FAILED


def test_no_evidence_reasons_from_capability_and_device_gating() -> None:
    caps = dict(CAPS)
    caps["linux-cpu"] = PlatformCapability(
        can_build=True,
        build_reason="toolchain found",
        can_run=False,
        run_reason="CPU lacks AVX2 (x86-64-v3)",
    )
    report = report_of(caps=caps)
    build = report.entry("android-arm64.none", "build")
    assert build.state is GridState.NOT_BUILDABLE_HERE
    assert build.reason == "android-ndk not found (ANDROID_NDK_HOME unset)"
    selector = report.entry("android-arm64.npu", "selector")
    assert selector.state is GridState.DEVICE_GATED
    assert "M4" in selector.reason and "Pixel" in selector.reason
    assert [g.id for g in selector.gated_by] == ["npu-on-device"]
    assert any("not buildable here" in n for n in selector.notes)
    run = report.entry("linux-cpu.none", "selector")
    assert run.state is GridState.NOT_RUNNABLE_HERE and run.reason == "CPU lacks AVX2 (x86-64-v3)"
    assert report.entry("linux-cpu.none", "build").state is GridState.NOT_RUN
    assert report.entry("linux-cpu.none", "build").reason == "no evidence found"
    gated_row = report.device_gated[0]
    assert gated_row.claimed is False
    assert "android-arm64.npu · selector" in gated_row.cells


def test_unprobed_platform_is_not_buildable_here() -> None:
    report = report_of(caps={})
    entry = report.entry("linux-cpu.none", "build")
    assert entry.state is GridState.NOT_BUILDABLE_HERE
    assert "not probed" in entry.reason


def test_not_applicable_is_distinct_and_records_for_it_are_ignored_with_a_problem() -> None:
    report = report_of(loaded(record("linux-cpu.none", "abi"), "ev/linux-cpu.none__abi.json"))
    entry = report.entry("linux-cpu.none", "abi")
    assert entry.state is GridState.NOT_APPLICABLE
    assert entry.state.label == "n/a"
    assert "at least one gate" in entry.reason
    [problem] = report.problems
    assert problem.path == "ev/linux-cpu.none__abi.json"
    assert "ignored" in problem.message


def test_malformed_and_orphan_records_are_problems() -> None:
    broken = LoadedRecord(
        path=Path("ev/linux-cpu.npu__abi.json"),
        problem="ev/linux-cpu.npu__abi.json: field 'counts.ran': required field is missing",
        cell="linux-cpu.npu",
        check="abi",
    )
    unreadable = LoadedRecord(path=Path("ev/zzz__y.json"), problem="ev/zzz__y.json: not valid JSON: x")
    orphan = loaded(record("linux-gpu.none", "build"), "ev/linux-gpu.none__build.json")
    report = report_of(broken, unreadable, orphan)
    entry = report.entry("linux-cpu.npu", "abi")
    assert entry.state is GridState.INVALID
    assert "counts.ran" in entry.reason
    messages = {p.path: p.message for p in report.problems}
    assert "required field is missing" in messages["ev/linux-cpu.npu__abi.json"]
    assert "not valid JSON" in messages["ev/zzz__y.json"]
    assert "no cell 'linux-gpu.none'" in messages["ev/linux-gpu.none__build.json"]


def _all_m3_evidence() -> list[LoadedRecord]:
    items = []
    for check in ("build", "selector", "byte-identity-reference", "byte-identity-baseline"):
        items.append(record("linux-cpu.none", check))
    for cell in ("linux-cpu.npu", "linux-cpu.xla"):
        for check in ("build", "selector", "gate-fallthrough", "abi", "consumer"):
            items.append(record(cell, check))
    return [loaded(r, f"ev/{r.cell}__{r.check}.json") for r in items]


def test_checklist_ticks_only_from_verified_evidence() -> None:
    empty = report_of()
    assert [b.ticked for b in empty.checklist] == [False, False, False, False]
    box1 = empty.checklist[0]
    assert "byte-for-byte" in box1.text
    assert any(m.startswith("linux-cpu.none · build: NOT RUN") for m in box1.missing)
    assert {(r.cell, r.check) for r in box1.evidence} == {
        ("linux-cpu.none", "build"),
        ("linux-cpu.none", "byte-identity-reference"),
        ("linux-cpu.none", "byte-identity-baseline"),
    }
    # android cells never count toward the Linux x64 milestone
    assert all(r.cell.startswith("linux-cpu.") for b in empty.checklist for r in b.evidence)

    full = report_of(*_all_m3_evidence())
    assert [b.ticked for b in full.checklist] == [True, True, True, True]
    assert all(b.missing == () for b in full.checklist)
    box4 = full.checklist[3]
    assert {(r.cell, r.check) for r in box4.evidence} == {
        ("linux-cpu.npu", "abi"),
        ("linux-cpu.xla", "abi"),
        ("linux-cpu.npu", "consumer"),
        ("linux-cpu.xla", "consumer"),
    }
    assert all(r.anchor == entry_anchor(r.cell, r.check) for r in box4.evidence)

    # one stale ABI record unticks box 4 and says what is missing; the others stay ticked
    evidence = [e for e in _all_m3_evidence() if (e.cell, e.check) != ("linux-cpu.xla", "abi")]
    evidence.append(loaded(record("linux-cpu.xla", "abi", parts=dict(CURRENT, native="old"))))
    partial = report_of(*evidence)
    assert [b.ticked for b in partial.checklist] == [True, True, True, False]
    [missing] = partial.checklist[3].missing
    assert missing.startswith("linux-cpu.xla · abi: STALE") and "native" in missing


def test_checklist_says_when_the_matrix_lacks_a_check_kind() -> None:
    matrix = make_matrix()
    without_baseline = tuple(c for c in CHECKS if c.kind is not CheckKind.BYTE_IDENTITY_BASELINE)
    matrix = Matrix(
        source=matrix.source,
        sha256=matrix.sha256,
        platforms=matrix.platforms,
        gates=matrix.gates,
        checks=without_baseline,
        cells=tuple(Cell(platform=c.platform, gates=c.gates, checks=without_baseline) for c in matrix.cells),
        device_gated=matrix.device_gated,
        exit_checklist=matrix.exit_checklist,
    )
    report = build_report(
        matrix,
        records=_all_m3_evidence(),
        current_fingerprint=current_of,
        capabilities=CAPS,
        artifact_matches=verify_artifact,
        facts=FACTS,
        trust=TEST_POLICY,
    )
    box1 = report.checklist[0]
    assert not box1.ticked
    assert "no byte-identity-baseline check applies to the linux x86_64 no-gate cells" in box1.missing


def test_json_form_round_trips_with_states() -> None:
    report = report_of(
        loaded(record("linux-cpu.none", "build")),
        loaded(record("linux-cpu.none", "selector", parts=dict(CURRENT, matrix="m0"))),
    )
    data = json.loads(json.dumps(report_to_dict(report)))
    assert data["schema_version"] == REPORT_SCHEMA_VERSION
    assert data["evidence_schema_version"] == SCHEMA_VERSION
    states = {(e["cell"], e["check"]): e["state"] for row in data["rows"] for e in row["entries"]}
    assert states[("linux-cpu.none", "build")] == "verified"
    assert states[("linux-cpu.none", "selector")] == "stale"
    assert states[("linux-cpu.none", "abi")] == "n/a"
    assert states[("android-arm64.none", "build")] == "not-buildable-here"
    assert data["header"]["verified"] == 1
    assert [b["ticked"] for b in data["checklist"]] == [False, False, False, False]
    assert data["device_gated"][0]["claimed"] is False
    assert {item["state"] for item in data["legend"]} == {s.value for s in GridState}


@pytest.mark.parametrize("state", list(GridState))
def test_every_state_has_label_short_word_and_css_class(state: GridState) -> None:
    assert state.label and state.short and state.meaning
    assert state.css.startswith("st-") and "/" not in state.css
