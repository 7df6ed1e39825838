"""What a release may ship (eliza.core.release), judged on reports the real judge builds:
every default-bundle check VERIFIED and the library's bytes those records name, or the
cell is refused with a line per reason."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest

from eliza.core import release
from eliza.core.evidence import Counts, EvidenceRecord, HostInfo, InputFingerprint, LoadedRecord, Status
from eliza.core.matrix import Cell, Check, CheckKind, Matrix, Platform, Requirement, Variant
from eliza.core.report import HeaderFacts, PlatformCapability, Report, build_report
from eliza.core.report.compare import compare_reports
from eliza.core.trust import SignatureCheck
from eliza.formats.report_json import report_to_dict
from tests.signing import TEST_POLICY, library_subject, signed

PARTS = {"native": "n1", "bundle": "b1"}
KID = "0123456789abcdef"
LIB = hashlib.sha256(b"the verified library").hexdigest()
CPU = Platform(
    id="linux-cpu", description="cpu", os="linux", arch="x86_64", llama_backend="cpu",
    build_requires=(Requirement.CONAN,), run_requires=(Requirement.X86_64_V3_CPU,),
)  # fmt: skip


def _check(id_: str, kind: CheckKind, bundle: str = "tiny", declared: str = "") -> Check:
    return Check(
        id=id_, kind=kind, description=id_, pass_rule=id_, needs_run=kind is not CheckKind.BUILD,
        bundle=bundle, declared_id=declared,
    )  # fmt: skip


BUILD = _check("build", CheckKind.BUILD)
SELECTOR = _check("selector", CheckKind.SELECTOR)
GEMMA = _check("byte-identity-reference.gemma3-270m", CheckKind.BYTE_IDENTITY_REFERENCE, "gemma3-270m",
               "byte-identity-reference")  # fmt: skip
CHECKS = (BUILD, SELECTOR, GEMMA)
ASAN = Variant(id="asan-ubsan", description="sanitizers", sanitizers=("address", "undefined"))
CELL = Cell(platform=CPU, gates=(), checks=CHECKS)
MATRIX = Matrix(
    source="matrix.yaml", sha256="f" * 64, platforms=(CPU,), gates=(), checks=CHECKS,
    cells=(CELL, Cell(platform=CPU, gates=(), checks=(BUILD,), variant=ASAN)),
)  # fmt: skip
CAN = {"linux-cpu": PlatformCapability(can_build=True, build_reason="ok", can_run=True, run_reason="ok")}


def rec(check: str, *, status: Status = Status.PASSED, library: str = LIB) -> LoadedRecord:
    failed = 0 if status is Status.PASSED else 1
    record = EvidenceRecord(
        cell=CELL.id, check=check, status=status, reason="" if status is Status.PASSED else "planted",
        counts=Counts(ran=2, passed=2 - failed, failed=failed),
        fingerprint=InputFingerprint.of(PARTS), commit="c0ffee", dirty=False,
        host=HostInfo(os="linux", cpu="x86_64"), artifacts=(), started_at="2026-01-31T12:00:00Z",
        finished_at="2026-01-31T12:00:10Z", duration_s=1.0, metrics={}, details={}, log_tail="",
        subjects=(library_subject(CELL.id, library),),
    )  # fmt: skip
    return signed(LoadedRecord(path=Path(f"ev/{check}.json"), record=record, cell=CELL.id, check=check))


def report_of(*records: LoadedRecord, runnable: bool = True) -> Report:
    can = CAN if runnable else {
        "linux-cpu": PlatformCapability(can_build=True, build_reason="ok", can_run=False, run_reason="no CPU")
    }  # fmt: skip
    return build_report(
        MATRIX, records=records, current_fingerprint=lambda cell, check: InputFingerprint.of(PARTS),
        capabilities=can, artifact_matches=lambda a: None,
        facts=HeaderFacts(commit="c0ffee", dirty=False, generated_at="2026-02-01T00:00:00Z", host="h"),
        trust=TEST_POLICY,
    )  # fmt: skip


def judge(
    report: Report, sha: str | None = LIB, *, can_build: bool = True, named: bool = False
) -> release.CellVerdict:
    library = release.LibraryBytes(path="build/linux-cpu/none/build/libelizainference.so", sha256=sha)
    return release.judge_cell(
        report,
        CELL,
        library,
        default_bundle="tiny",
        can_build=can_build,
        build_reason="needs Xcode",
        named=named,
    )


def test_a_cell_whose_checks_are_verified_on_these_bytes_ships() -> None:
    verdict = judge(report_of(rec("build"), rec("selector"), rec(GEMMA.id)))
    assert verdict.verdict is release.Verdict.SHIP, verdict.reasons
    assert verdict.verified_checks == ("build", "selector", GEMMA.id)
    assert "ships (3 checks VERIFIED" in verdict.line()


def test_a_failed_check_refuses_the_cell_naming_the_check_and_its_state() -> None:
    report = report_of(rec("build"), rec("selector", status=Status.FAILED), rec(GEMMA.id))
    verdict = judge(report)
    assert verdict.verdict is release.Verdict.REFUSED
    assert verdict.reasons == (f"selector: FAILED ({report.entry(CELL.id, 'selector').reason})",)


def test_a_library_changed_after_verify_refuses_the_cell_naming_both_hashes() -> None:
    changed = hashlib.sha256(b"one byte changed").hexdigest()
    verdict = judge(report_of(rec("build"), rec("selector"), rec(GEMMA.id)), changed)
    assert verdict.verdict is release.Verdict.REFUSED
    (reason,) = verdict.reasons
    assert (
        changed in reason
        and LIB in reason
        and "build, byte-identity-reference.gemma3-270m, selector" in reason
    )


def test_evidence_no_trusted_key_signed_refuses_the_cell() -> None:
    untrusted = rec("selector")
    untrusted = LoadedRecord(
        path=untrusted.path, record=untrusted.record, cell=untrusted.cell, check=untrusted.check,
        signature=SignatureCheck(keyids=(KID,), problem=f"signed by key {KID}, not in the policy"),
    )  # fmt: skip
    verdict = judge(report_of(rec("build"), untrusted, rec(GEMMA.id)))
    assert verdict.verdict is release.Verdict.REFUSED
    assert verdict.reasons[0].startswith("selector: UNTRUSTED") and KID in verdict.reasons[0]


def test_a_default_check_never_run_refuses_but_another_bundle_not_runnable_here_is_noted() -> None:
    missing = judge(report_of(rec("build"), rec(GEMMA.id)))
    assert missing.verdict is release.Verdict.REFUSED
    assert missing.reasons[0].startswith("selector: NOT RUN")
    # Gemma's check was not run and could have been: that refuses too.
    assert judge(report_of(rec("build"), rec("selector"))).reasons[0].startswith(f"{GEMMA.id}: NOT RUN")
    # On a host that cannot run it (an emulated platform, say), the cell ships and says so.
    noted = judge(report_of(rec("build"), rec("selector"), runnable=False))
    assert noted.verdict is release.Verdict.SHIP
    assert noted.not_verified == (f"{GEMMA.id}: NOT RUNNABLE HERE (no CPU)",)
    assert "not verified here" in noted.line()


def test_a_failing_check_of_another_bundle_refuses_too() -> None:
    verdict = judge(report_of(rec("build"), rec("selector"), rec(GEMMA.id, status=Status.FAILED)))
    assert verdict.verdict is release.Verdict.REFUSED
    assert verdict.reasons[0].startswith(f"{GEMMA.id}: FAILED")


def test_a_cell_neither_built_nor_buildable_here_is_left_out_unless_named() -> None:
    report = report_of()
    left_out = judge(report, None, can_build=False)
    assert left_out.verdict is release.Verdict.NOT_HERE
    assert release.not_here_lines([left_out], MATRIX) == [
        "not here: linux-cpu (1 cell(s)): not built here, and this host cannot build it: needs Xcode"
    ]
    named = judge(report, None, can_build=False, named=True)
    assert named.verdict is release.Verdict.REFUSED and "needs Xcode" in named.reasons[0]
    unbuilt = judge(report, None)
    assert unbuilt.verdict is release.Verdict.REFUSED and "does not exist" in unbuilt.reasons[0]
    # A slow platform's cell (CUDA) that verify did not build is left out, unless named.
    slow = Cell(platform=replace(CPU, slow_build=True), gates=(), checks=CHECKS)
    library = release.LibraryBytes(path="x", sha256=None)
    left_out = release.judge_cell(
        report, slow, library, default_bundle="tiny", can_build=True, build_reason="ok", named=False
    )
    assert left_out.verdict is release.Verdict.NOT_HERE and "slow build" in left_out.reasons[0]
    named_slow = release.judge_cell(
        report, slow, library, default_bundle="tiny", can_build=True, build_reason="ok", named=True
    )
    assert named_slow.verdict is release.Verdict.REFUSED and "does not exist" in named_slow.reasons[0]


def test_candidates_are_the_default_variant_and_a_named_sanitizer_cell_is_refused() -> None:
    assert [c.id for c in release.candidates(MATRIX, ())] == [CELL.id]
    with pytest.raises(ValueError, match="never shipped"):
        release.candidates(MATRIX, ("linux-cpu.none@asan-ubsan",))
    with pytest.raises(ValueError, match=r"not a cell of matrix\.yaml"):
        release.candidates(MATRIX, ("linux-cpu.nope",))


@pytest.mark.parametrize(
    ("version", "problem"),
    [("9.0.0", ""), ("9.2.1-rc.1", ""), ("10.0.0", "ABI version, 9"), ("9.0", "not a semantic version"),
     ("v9.0.0", "not a semantic version")],
)  # fmt: skip
def test_the_major_version_is_the_abi(version: str, problem: str) -> None:
    found = release.version_problem(version, 9)
    assert (problem in found) if problem else found == ""


def test_sha256sums_is_what_sha256sum_checks() -> None:
    files = {"b.tar.gz": hashlib.sha256(b"b").hexdigest(), "a.tar.gz": hashlib.sha256(b"a").hexdigest()}
    assert release.sha256sums(files).splitlines() == [
        f"{files['a.tar.gz']}  a.tar.gz",
        f"{files['b.tar.gz']}  b.tar.gz",
    ]


def test_release_notes_put_regressions_first_then_what_shipped_and_what_was_refused() -> None:
    old = report_to_dict(report_of(rec("build"), rec("selector"), rec(GEMMA.id)))
    new = report_of(rec("build"), rec("selector", status=Status.FAILED), rec(GEMMA.id))
    since = compare_reports(old, report_to_dict(new), old_source="9.0.0/report.json")
    shipped = release.ShippedCell(
        cell="linux-cpu.mlx", archive="elizainference-9.1.0-linux-cpu.mlx.tar.gz", archive_sha256=LIB,
        archive_bytes=123, library_sha256=LIB, package_ref="elizainference/9.1.0#r:p#q",
    )  # fmt: skip
    refused = judge(new)
    notes = release.release_notes(
        version="9.1.0", commit="c0ffee", trust="t", shipped=[shipped], refused=[refused], since=since
    )
    assert notes.index("### Regressions") < notes.index("## Shipped") < notes.index("## Refused")
    regressions = notes.split("### Regressions")[1].split("##")[0]
    assert (
        f"- {since.regressions[0].describe()}" in regressions
        and "selector: verified -> failed" in regressions
    )
    assert shipped.archive in notes and LIB in notes
