"""Judging evidence from one or many directories against the current tree and rendering
the report (HTML, Markdown, JSON): what `nox -s report`, verify and the CI report job share."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from eliza.adapters import git
from eliza.adapters.abi_tools import abidiff_version
from eliza.adapters.browser import screenshot
from eliza.adapters.conan import llama_source_version
from eliza.app.project import capability, current, host_facts
from eliza.app.services import recording
from eliza.app.services.bench_options import bundle_inputs, default_settings_description
from eliza.app.services.bundle import ensure_tiny_bundle
from eliza.app.services.clock import now
from eliza.app.services.inputs import fuzz_inputs, input_hashes
from eliza.app.services.shipping import cell_verdicts
from eliza.app.services.signing import report_trust
from eliza.core.evidence import Artifact, InputFingerprint, utc_timestamp
from eliza.core.fingerprint import InputHashes, fingerprint_for
from eliza.core.host import Capability, bundle_blockers, check_blockers
from eliza.core.layout import default_prompts
from eliza.core.matrix import Cell, Check, Matrix
from eliza.core.release import ship_view
from eliza.core.report import GridState, HeaderFacts, PlatformCapability, Report, build_report
from eliza.core.report.compare import compare_reports
from eliza.core.report.model import Figure, LoadProblem, cell_anchor
from eliza.formats.evidence_json import read_records
from eliza.formats.files import HASH_MEMO
from eliza.formats.fuzz_json import FuzzSummaryError, read_fuzz_summary
from eliza.formats.report_json import report_to_dict
from eliza.formats.report_render import ReportPaths, render_report

Log = Callable[[str], None]


def render(
    matrix: Matrix,
    evidence_dirs: Sequence[Path],
    out_dir: Path,
    bundle: Path,
    *,
    hashes: InputHashes | None = None,
    artifact_matches: Callable[[Artifact], bool | None] | None = None,
    capabilities: Mapping[str, Capability] | None = None,
    compare_with: tuple[str, Mapping[str, Any]] | None = None,
    release: bool = False,
) -> tuple[ReportPaths, Report]:
    """Reads evidence from every directory, judges it against the current tree, renders
    HTML, Markdown and JSON. Returns (paths, report). `hashes` and `artifact_matches`: what
    the caller already read of the tree this invocation (verify), so nothing is hashed twice.
    `release`: trust only the keys of the matrix's trust policy, not this machine's."""
    project = current()
    trust = report_trust(matrix, project, release=release)
    host = host_facts()
    if hashes is None:
        hashes = input_hashes(
            project.repo,
            bundle,
            default_prompts(project.repo),
            host,
            abidiff_version(),
            llama_source=llama_source_version(project.env),
            bench_settings=default_settings_description(project.env),
            other_bundles=bundle_inputs(project.repo, matrix),
        )
    memo = project.build_root / "report-evidence-schema-valid.json"
    records = read_records(list(evidence_dirs), trust.public_keys(), memo=memo)
    # Where several records of one (cell, check) disagree, the first directory's (this
    # checkout's own evidence, before imported evidence) sets what "current" means.
    baselines = {
        (r.record.cell, r.record.check): str(r.record.details.get("baseline_commit", ""))
        for r in reversed(records)
        if r.record is not None and r.record.details.get("baseline_commit")
    }
    # A perf record's reference and rounds (its fingerprint's `reference` part).
    baselines |= {
        (r.record.cell, r.record.check): str(r.record.details["perf"]["reference_identity"])
        for r in reversed(records)
        if r.record is not None
        and isinstance(r.record.details.get("perf"), dict)
        and "reference_identity" in r.record.details["perf"]
    }
    # Tool versions are facts of the host that ran a check, which the host rendering the
    # report (a CI report job, say) may not have: the report takes them as recorded, while
    # verify, on the host that runs checks, re-runs a check when its tools changed.
    recorded_tools = {
        (r.record.cell, r.record.check): r.record.fingerprint.parts["tools"]
        for r in reversed(records)
        if r.record is not None and "tools" in r.record.fingerprint.parts
    }

    def current_fingerprint(cell: Cell, check: Check) -> InputFingerprint:
        fresh = fingerprint_for(cell, check, hashes, baselines.get((cell.id, check.id), ""))
        tools = recorded_tools.get((cell.id, check.id))
        return fresh if tools is None else InputFingerprint.of({**fresh.parts, "tools": tools})

    judged = {}
    decided = {}
    for platform in matrix.platforms:
        # A lab's devices (verify's capabilities) decide where a platform's checks run.
        can = capabilities[platform.id] if capabilities is not None else capability(platform)
        decided[platform.id] = can
        blockers = {
            **check_blockers(host, matrix.checks, platform),
            **bundle_blockers(matrix.checks, matrix.bundles, can),
        }
        judged[platform.id] = PlatformCapability.of(can, blockers)
    state = git.git_state(project.repo)
    cpu = host.cpu_model or host.arch
    report = build_report(
        matrix,
        records=records,
        current_fingerprint=current_fingerprint,
        capabilities=judged,
        artifact_matches=artifact_matches
        or recording.ArtifactHashes(repo=project.repo, memo=project.cache / HASH_MEMO).resolve,
        facts=HeaderFacts(
            commit=state.commit,
            dirty=state.dirty,
            generated_at=utc_timestamp(now()),
            host=f"{host.describe()} ({cpu}, {host.cpu_count} threads)",
        ),
        trust=trust,
    )
    report = with_fuzz_figures(report, project.build_root / "fuzz" / "summary.json", project.repo)
    verdicts = cell_verdicts(report, matrix, project.repo, decided)
    report = replace(report, would_ship=tuple(ship_view(v) for v in verdicts))
    if compare_with is not None:
        source, old = compare_with
        report = replace(report, since=compare_reports(old, report_to_dict(report), old_source=source))
    # A report rendered elsewhere (a release's, `--out DIR`) takes the chart this checkout
    # drew last from the same rows.
    return render_report(report, out_dir, charts=project.build_root / "report-charts"), report


def with_fuzz_figures(report: Report, summary_path: Path, repo: Path) -> Report:
    """The last `nox -s fuzz` run's executions, corpus size and findings per target, as
    figures of its cell (current while the library's sources and the targets are)."""
    try:
        summary = read_fuzz_summary(summary_path)
    except FuzzSummaryError as exc:
        problem = LoadProblem(path=str(summary_path), message=str(exc).removeprefix(f"{summary_path}: "))
        return replace(report, problems=(*report.problems, problem))
    if summary is None:
        return report
    fresh = summary.inputs == fuzz_inputs(repo)
    figures = [
        Figure(
            cell=summary.cell,
            check="fuzz",
            name=f"fuzz.{t.name}.{name}",
            value=value,
            measured_at=summary.finished_at,
            fresh=fresh,
            anchor=cell_anchor(summary.cell),
        )
        for t in summary.targets
        for name, value in (
            ("executions", f"{t.executions} in {t.seconds:.0f} s"),
            ("corpus_files", str(t.corpus_files)),
            ("findings", ", ".join(t.findings) or "0"),
            ("leak_check", t.leak_check),
        )
    ]
    return replace(report, figures=(*report.figures, *figures))


def describe_paths(paths: ReportPaths, png: Path | None) -> str:
    also = [paths.markdown.name, paths.json.name] + ([png.name] if png else [])
    return f"report: {paths.html} (also {', '.join(also)})"


def summary_line(report: Report) -> str:
    """ "V of N checks verified (a breakdown of the N)": the breakdown adds up to N; entries
    where a check does not apply are not checks, and are counted apart."""
    header = report.header
    counted = [s for s in header.by_state if s.count and s.state is not GridState.NOT_APPLICABLE]
    states = ", ".join(f"{s.count} {s.state.label}" for s in counted)
    return f"{header.verified} of {header.declared} checks verified ({states})"


# Wide enough for a grid column of the widest state label and for the perf chart
# (perf_chart.MAX_COLUMNS panels), tall enough for any matrix's grid and the chart; the
# white canvas left over is trimmed.
_COLUMN_PX, _CELL_COLUMN_PX, _MIN_WIDTH = 112, 260, 1900
_HEIGHT = 9000


def overview_window(report: Report) -> tuple[int, int]:
    """(width, height) of the window the screenshot is taken in."""
    columns = len(report.columns) + (1 if report.would_ship else 0)
    return max(_MIN_WIDTH, _CELL_COLUMN_PX + _COLUMN_PX * columns), _HEIGHT


def report_screenshot(html: Path, png: Path, report: Report) -> Path | None:
    """The report's screenshot: the page's overview (#overview: the header, the whole grid with
    every column and row and what would ship, the perf chart at its own size)."""
    width, height = overview_window(report)
    return screenshot(html, png, width=width, height=height, fragment="overview", trim=True)


def render_and_say(
    matrix: Matrix,
    evidence_dirs: Sequence[Path],
    out_dir: Path,
    log: Log,
    *,
    compare_with: tuple[str, Mapping[str, Any]] | None = None,
    release: bool = False,
) -> tuple[Path, Report]:
    """Renders the report with the tiny bundle (deterministic: regenerating it lets a fresh
    report host judge bundle-dependent evidence instead of calling it stale), its
    screenshot, and says where they are and what they count."""
    paths, rep = render(
        matrix, evidence_dirs, out_dir, ensure_tiny_bundle(), compare_with=compare_with, release=release
    )
    log(describe_paths(paths, report_screenshot(paths.html, out_dir / "report.png", rep)))
    log(summary_line(rep))
    log(f"trust: {rep.header.trust}")
    if rep.since is not None:
        log(rep.since.summary())
        for change in rep.since.regressions:
            log(f"  regressed: {change.describe()}")
    return paths.html, rep
