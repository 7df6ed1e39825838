"""build_report: every declared (cell, check) of the matrix judged against the evidence."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from eliza.core.evidence import EvidenceRecord, LoadedRecord
from eliza.core.matrix import CheckKind, Matrix
from eliza.core.perf_waivers import PerfPolicy
from eliza.core.report.checklist import checklist_box, device_row, verifiable_row
from eliza.core.report.judge import BuildStanding, applies, evaluate
from eliza.core.report.model import (
    UNPROBED,
    ArtifactVerifier,
    Entry,
    Figure,
    FingerprintSource,
    HeaderFacts,
    LoadProblem,
    PerfRow,
    PlatformCapability,
    Report,
    ReportHeader,
    Row,
    StateCount,
    cell_anchor,
    entry_anchor,
)
from eliza.core.report.perf import decision, perf_entry, perf_rows, report_date
from eliza.core.report.states import GridState
from eliza.core.trust import TrustPolicy

# Measured figures the report lists with the time they were measured (counts such as
# tokens_compared are not figures).
FIGURE_METRICS = (
    "seam_overhead_ratio",
    "seam_overhead_ratio_q1",
    "seam_overhead_ratio_q3",
    "seam_overhead_ci_low",  # the perf statistics of the same samples (eliza.core.perf_stats)
    "seam_overhead_ci_high",
    "seam_overhead_p",
    "tok_s",
    "first_token_ms",
    "peak_rss_kb",
    "drafter_acceptance",
    "sanitizer_reports",  # the native-suite check of a sanitizer cell
    "tests_ran",
)
# Families of figures: the thread races' counts (race.<race>.<count>), and each side's
# prefill and decode speed on backend-agreement's long prompts, past a sliding window
# (long_<prefill|decode>_tok_s_<side>): information that no check judges.
FIGURE_PREFIXES = ("race.", "long_")

# --------------------------------------------------------------------------- assembly


def _problem(path: Path | str, message: str) -> LoadProblem:
    # Loader messages start with the path for standalone use; the report shows it apart.
    prefix = f"{path}: "
    return LoadProblem(path=str(path), message=message.removeprefix(prefix))


def _distinct(figures: Iterable[Figure]) -> tuple[Figure, ...]:
    """One line per (cell, figure, value): checks of one bench run share its numbers."""
    seen: set[tuple[str, str, str]] = set()
    kept = []
    for f in figures:
        if (f.cell, f.name, f.value) not in seen:
            seen.add((f.cell, f.name, f.value))
            kept.append(f)
    return tuple(kept)


def _chosen(entry: Entry, candidates: Sequence[LoadedRecord]) -> EvidenceRecord | None:
    """The record an entry was judged from."""
    if entry.evidence is None:
        return None
    return next(
        (c.record for c in candidates if c.record is not None and str(c.path) == entry.evidence.path), None
    )


def build_report(
    matrix: Matrix,
    *,
    records: Sequence[LoadedRecord],
    current_fingerprint: FingerprintSource,
    capabilities: Mapping[str, PlatformCapability],
    artifact_matches: ArtifactVerifier,
    facts: HeaderFacts,
    trust: TrustPolicy,
) -> Report:
    """Evaluate every declared (cell, check) against the evidence.

    `records` may come from many directories; duplicates of one (cell, check) are resolved
    by preferring evidence fresh for the current inputs, then the latest `finished_at`.
    `capabilities` is keyed by platform id; a platform missing from it is treated as not
    probed (neither buildable nor runnable here). `trust`: the keys whose signatures count,
    each for its scope; a check that runs the library counts only against the library of
    its cell's VERIFIED build evidence (its build check is judged first).
    """
    problems: list[LoadProblem] = []
    good: dict[tuple[str, str], list[LoadedRecord]] = {}
    broken: dict[tuple[str, str], list[LoadedRecord]] = {}
    cells = {c.id: c for c in matrix.cells}
    checks = {c.id: c for c in matrix.checks}

    for item in records:
        if item.problem is not None or item.record is None:
            problems.append(_problem(item.path, item.problem or "no record"))
            if item.cell is not None and item.check is not None:
                broken.setdefault((item.cell, item.check), []).append(item)
            continue
        record = item.record
        if record.cell not in cells:
            problems.append(_problem(item.path, f"ignored: the matrix declares no cell {record.cell!r}"))
            continue
        if record.check not in checks:
            problems.append(_problem(item.path, f"ignored: the matrix declares no check {record.check!r}"))
            continue
        why_not = applies(cells[record.cell], checks[record.check])
        if why_not is not None:
            problems.append(
                _problem(item.path, f"ignored: check {record.check!r} on {record.cell!r} {why_not}")
            )
            continue
        good.setdefault((record.cell, record.check), []).append(item)

    policy = PerfPolicy(
        waivers=matrix.perf_waivers,
        today=report_date(facts.generated_at),
        milestone=matrix.exit_checklist.milestone if matrix.exit_checklist else "",
    )
    perf: list[PerfRow] = []

    rows: list[Row] = []
    for cell in matrix.cells:
        capability = capabilities.get(cell.platform.id, UNPROBED)
        judged: dict[str, Entry] = {}
        builds = [c for c in matrix.checks if c.kind is CheckKind.BUILD]
        standing: BuildStanding | None = None
        for check in (*builds, *(c for c in matrix.checks if c.kind is not CheckKind.BUILD)):
            why_not = applies(cell, check)
            anchor = entry_anchor(cell.id, check.id)
            if why_not is not None:
                judged[check.id] = Entry(
                    cell=cell.id,
                    check=check.id,
                    kind=check.kind,
                    state=GridState.NOT_APPLICABLE,
                    reason=why_not,
                    anchor=anchor,
                )
                continue
            entry = evaluate(
                cell,
                check,
                good.get((cell.id, check.id), []),
                broken.get((cell.id, check.id), []),
                current_fingerprint,
                capability,
                matrix.device_gated,
                artifact_matches,
                trust,
                None if check.kind is CheckKind.BUILD else standing,
            )
            judged_from = _chosen(entry, good.get((cell.id, check.id), []))
            if check.kind is CheckKind.BUILD and standing is None:
                standing = BuildStanding.of(cell, entry, judged_from)
            entry = perf_entry(entry, judged_from, policy)
            if judged_from is not None and entry.kind is CheckKind.PERF and entry.evidence is not None:
                perf += perf_rows(entry, judged_from, cell.platform.id, decision(entry, judged_from, policy))
            judged[check.id] = entry
        entries = [judged[c.id] for c in matrix.checks]
        rows.append(
            Row(
                cell=cell.id,
                platform=cell.platform.id,
                platform_description=cell.platform.description,
                gate_key=cell.gate_key,
                anchor=cell_anchor(cell.id),
                entries=tuple(entries),
            )
        )

    all_entries = [e for r in rows for e in r.entries]
    applicable = [e for e in all_entries if e.state is not GridState.NOT_APPLICABLE]
    header = ReportHeader(
        commit=facts.commit,
        dirty=facts.dirty,
        generated_at=facts.generated_at,
        host=facts.host,
        matrix_source=matrix.source,
        matrix_sha256=matrix.sha256,
        verified=sum(1 for e in applicable if e.state is GridState.VERIFIED),
        declared=len(applicable),
        by_state=tuple(
            StateCount(state=s, count=sum(1 for e in all_entries if e.state is s)) for s in GridState
        ),
    )
    local = [k for k in trust.keys if k.local]
    policy_keys = len(trust.keys) - len(local)
    named = f"{policy_keys} key{'s' if policy_keys != 1 else ''} of the trust policy"
    header = replace(
        header,
        trust=f"counts evidence signed by {named} and by this machine's key {local[0].id} (a local report)"
        if local
        else f"counts evidence signed by {named} only (--release)",
    )
    device_rows = tuple(device_row(item, rows, all_entries) for item in matrix.device_gated)
    figures = _distinct(
        Figure(
            cell=e.cell,
            check=e.check,
            name=m.name,
            value=m.value,
            measured_at=e.evidence.finished_at,
            fresh=e.evidence.fresh,
            anchor=e.anchor,
        )
        for e in all_entries
        if e.evidence is not None
        for m in e.evidence.metrics
        if m.name in FIGURE_METRICS or m.name.startswith(FIGURE_PREFIXES)
    )
    return Report(
        header=header,
        legend=tuple(GridState),
        columns=matrix.checks,
        rows=tuple(rows),
        checklist_milestone=matrix.exit_checklist.milestone if matrix.exit_checklist else "",
        checklist=tuple(
            checklist_box(i, spec, matrix, rows)
            for i, spec in enumerate(matrix.exit_checklist.boxes if matrix.exit_checklist else (), start=1)
        ),
        device_gated=device_rows,
        verifiable_here=tuple(verifiable_row(v, matrix, rows) for v in matrix.verifiable_here),
        figures=figures,
        problems=tuple(problems),
        perf=tuple(perf),
    )
