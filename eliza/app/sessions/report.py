"""`nox -s report`: judge evidence from one or many directories against the current tree
and render the report (HTML, Markdown, JSON)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.app.context import Context
from eliza.app.errors import UsageError
from eliza.app.options import Parser
from eliza.app.project import current
from eliza.app.services.reporting import render_and_say
from eliza.core.matrix import Matrix

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class ReportOptions:
    evidence: tuple[Path, ...]  # () : the default directories
    out: Path
    allow_missing: bool = False
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
        "--release",
        action="store_true",
        help=f"trust only the keys of {matrix.source}'s trust policy, not this machine's own key",
    )
    args = parser.parse_args(list(argv))
    return ReportOptions(
        evidence=tuple(args.evidence), out=args.out, allow_missing=args.allow_missing, release=args.release
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
    return render_and_say(ctx.matrix, dirs, options.out, ctx.log, release=options.release)
