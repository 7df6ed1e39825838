"""`nox -s report`: judge evidence from one or many directories against the current tree
and render the report (HTML, Markdown, JSON)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.app.context import Context
from eliza.app.errors import ChecksFailed, UsageError
from eliza.app.options import Parser
from eliza.app.project import current
from eliza.app.services.reporting import render_and_say
from eliza.core.matrix import Matrix
from eliza.core.report.compare import ReportFormatError
from eliza.formats.report_json import read_report

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    evidence: tuple[Path, ...]  # () : the default directories
    out: Path
    allow_missing: bool = False
    compare: Path | None = None  # --compare OLD/report.json
    fail_on_regression: bool = False
    release: bool = False


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> ReportOptions:
    project = current()
    parser = Parser("nox -s report --")
    parser.add_argument(
        "evidence",
        nargs="*",
        type=Path,
        help=f"evidence directories (default: {project.evidence_dir}, "
        f"and {project.imported_evidence_dir} if present)",
    )
    parser.add_argument("--out", type=Path, default=project.report_dir, help="where the report is written")
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="render even when an evidence directory does not exist (it is listed as a load problem)",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="OLD/report.json",
        help='add a section "since OLD": changed states, regressions first, newly verified, metric changes',
    )
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="with --compare: exit 1 when any cell x check regressed since OLD",
    )
    parser.add_argument(
        "--release",
        action="store_true",
        help=f"trust only the keys of {matrix.source}'s trust policy, not this machine's own key",
    )
    args = parser.parse_args(list(argv))
    if args.fail_on_regression and args.compare is None:
        parser.error("--fail-on-regression goes with --compare OLD/report.json")
    return ReportOptions(
        evidence=tuple(args.evidence),
        out=args.out,
        allow_missing=args.allow_missing,
        compare=args.compare,
        fail_on_regression=args.fail_on_regression,
        release=args.release,
    )


def run(options: ReportOptions, ctx: Context) -> Path:
    dirs = list(options.evidence) or ctx.project.default_evidence_dirs()
    # A directory the user named must exist (a typo must not replace a good report); the
    # default one may not exist yet on a fresh checkout, which renders as "nothing run".
    missing = [d for d in options.evidence if not d.is_dir()]
    if missing and not options.allow_missing:
        # Checked before rendering, so a typo never overwrites a good report.
        raise UsageError(
            f"evidence directory {missing[0]} does not exist; nothing was rendered "
            "(name an existing directory, or pass --allow-missing)"
        )
    old = None
    if options.compare is not None:
        try:
            old = (str(options.compare), read_report(options.compare))
        except ReportFormatError as exc:
            raise UsageError(f"--compare {exc}") from None
    html, report = render_and_say(
        ctx.matrix, dirs, options.out, ctx.log, compare_with=old, release=options.release
    )
    if options.fail_on_regression and report.since is not None and report.since.regressed:
        raise ChecksFailed(f"{len(report.since.regressions)} regression(s) since {options.compare}")
    return html
