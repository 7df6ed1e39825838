"""`nox -s release -- --version V [--cell ID ...]`: ship exactly the bytes the report
verified.

Check first: the report is rendered from the evidence, and each candidate cell ships only
when every check of its default bundle is VERIFIED and its library is byte for byte the one
its evidence names (eliza.core.release). Then, per cell that ships: the Conan package
(`conan export-pkg` of the verified build tree, its test_package run against it), its
files as `elizainference-V-<cell>.tar.gz`, the CycloneDX SBOM Conan's tool wrote, and a
signed SLSA provenance statement; beside them SHA256SUMS, the report and the release notes.
Everything is written into a temporary directory that becomes `build/release/V` whole, and
only then are the packages uploaded to the Conan remote, when one is configured.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eliza.adapters.checkout_lock import conan_home_lock
from eliza.adapters.conan import conan_home, prepare_conan_home, resolve_llama_source
from eliza.adapters.conan_package import (
    SBOM_IN_METADATA,
    ExportedPackage,
    export_package,
    upload_package,
    write_archive,
)
from eliza.app.context import Context
from eliza.app.errors import BuildFailed, ChecksFailed, UsageError
from eliza.app.options import Parser
from eliza.app.project import current
from eliza.app.services.build import BUILD_ERRORS, binary_remote, plan_for, platform_env
from eliza.app.services.bundle import ensure_tiny_bundle
from eliza.app.services.clock import now
from eliza.app.services.exclusive import exclusive
from eliza.app.services.prebuilt import unpack_cells
from eliza.app.services.profiles import conan_profiles_for
from eliza.app.services.reporting import render
from eliza.app.services.shipping import cell_verdicts
from eliza.app.services.signing import signing_key
from eliza.core import release as policy
from eliza.core.build_plan import package_option_defaults
from eliza.core.c_abi import abi_version
from eliza.core.evidence import utc_timestamp
from eliza.core.layout import library_path
from eliza.core.matrix import Cell, Matrix
from eliza.core.report import Report
from eliza.core.report.compare import ReportFormatError
from eliza.core.target import library_file
from eliza.formats.files import atomic_write_directory, sha256_file
from eliza.formats.provenance import ResourceDescriptor, provenance_statement, sign_provenance
from eliza.formats.report_json import read_report
from eliza.formats.sbom import sbom_licenses, sbom_problem

HEADER = Path("native/include/eliza-inference-ffi.h")


@dataclass(frozen=True, kw_only=True)
class ReleaseOptions:
    version: str
    cells: tuple[str, ...] = ()
    evidence: tuple[Path, ...] = ()
    artifacts: Path | None = None
    out: Path | None = None
    compare: Path | None = None
    fail_on_regression: bool = False
    policy_only: bool = False
    dry_run: bool = False
    test_package: bool = True


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> ReleaseOptions:
    project = current()
    parser = Parser("nox -s release --", "package, archive, describe and sign the cells the report verified")
    parser.add_argument("--version", required=True, help="MAJOR.MINOR.PATCH (MAJOR: the ABI version)")
    parser.add_argument(
        "--cell",
        action="append",
        default=[],
        metavar="ID",
        help="only these cells (repeatable)",
    )
    parser.add_argument(
        "--evidence",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help=f"evidence directories (repeatable; default: {project.evidence_dir}, and "
        f"{project.imported_evidence_dir} if present)",
    )
    parser.add_argument(
        "--artifacts", type=Path, help="unpack the CI build jobs' cells-*.tar.gz from DIR first (CI)"
    )
    parser.add_argument(
        "--out", type=Path, help=f"the release folder (default: {project.build_root}/release/V)"
    )
    parser.add_argument(
        "--compare", type=Path, metavar="OLD/report.json", help="the previous release's report, for the notes"
    )
    parser.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="with --compare: refuse on any regression",
    )
    parser.add_argument(
        "--policy-only",
        action="store_true",
        help=f"trust only the keys of {matrix.source}'s trust policy, not this machine's own key (CI)",
    )
    parser.add_argument("--dry-run", action="store_true", help="say what ships, what not and why")
    parser.add_argument(
        "--no-test-package",
        action="store_true",
        help="skip the test_package consumer run",
    )
    args = parser.parse_args(list(argv))
    abi = int(abi_version((project.repo / HEADER).read_text(), str(HEADER)))
    problem = policy.version_problem(args.version, abi)
    if problem:
        parser.error(f"--version {problem}")
    if args.fail_on_regression and args.compare is None:
        parser.error("--fail-on-regression goes with --compare OLD/report.json")
    try:
        policy.candidates(matrix, args.cell)
    except ValueError as exc:
        parser.error(str(exc))
    for directory in args.evidence:
        if not directory.is_dir():
            parser.error(f"--evidence {directory}: no such directory")
    if args.compare is not None and not args.compare.is_file():
        parser.error(f"--compare {args.compare}: no such file")
    if args.artifacts is not None and not args.artifacts.is_dir():
        parser.error(f"--artifacts {args.artifacts}: no such directory")
    return ReleaseOptions(
        version=args.version,
        cells=tuple(args.cell),
        evidence=tuple(args.evidence),
        artifacts=args.artifacts,
        out=args.out,
        compare=args.compare,
        fail_on_regression=args.fail_on_regression,
        policy_only=args.policy_only,
        dry_run=args.dry_run,
        test_package=not args.no_test_package,
    )


def _trust_text(ctx: Context, policy_only: bool) -> str:
    keys = len(ctx.matrix.trust.keys)
    text = f"the {keys} key(s) of {ctx.matrix.source}'s trust policy"
    if policy_only:
        return text
    mine = signing_key(ctx.project).id
    if ctx.matrix.trust.key(mine) is not None:
        return text
    return f"{text}, and this machine's key {mine} (not in the policy)"


def run(options: ReleaseOptions, ctx: Context) -> Path | None:
    project, matrix, log = ctx.project, ctx.matrix, ctx.log
    out = options.out or project.build_root / "release" / options.version
    if out.exists() and not options.dry_run:
        raise UsageError(
            f"{out} exists: a release is never overwritten (remove it to release {options.version} again)"
        )
    old: tuple[str, Mapping[str, Any]] | None = None
    if options.compare is not None:
        try:
            old = (str(options.compare), read_report(options.compare))
        except ReportFormatError as exc:
            raise UsageError(f"--compare {exc}") from None
    started = time.monotonic()
    started_on = utc_timestamp(now())
    with exclusive("release", log):
        if options.artifacts is not None:
            unpack_cells(options.artifacts, project.repo, log)
        dirs = list(options.evidence) or project.default_evidence_dirs()
        with tempfile.TemporaryDirectory(prefix="eliza-release-report-") as scratch:
            report_dir = Path(scratch)
            paths, report = render(
                matrix, dirs, report_dir, ensure_tiny_bundle(), compare_with=old, release=options.policy_only
            )
            trust = _trust_text(ctx, options.policy_only)
            verdicts = cell_verdicts(report, matrix, project.repo, ctx.capabilities(), options.cells)
            for verdict in verdicts:
                if verdict.verdict is not policy.Verdict.NOT_HERE:
                    log(verdict.line())
            for line in policy.not_here_lines(verdicts, matrix):
                log(line)
            log(f"trust: {trust}")
            if report.since is not None:
                log(report.since.summary())
                for change in report.since.regressions:
                    log(f"  regressed: {change.describe()}")
            shipping = [v for v in verdicts if v.verdict is policy.Verdict.SHIP]
            refused = [v for v in verdicts if v.verdict is policy.Verdict.REFUSED]
            since = report.since
            if options.dry_run:
                log(
                    f"dry run: would write {out} with {len(shipping)} cell(s); "
                    f"{len(refused)} refused; nothing was written"
                )
                return None
            if options.fail_on_regression and since is not None and since.regressed:
                raise ChecksFailed(f"refused: {len(since.regressions)} regression(s) since {options.compare}")
            if not shipping:
                raise ChecksFailed(f"nothing to ship: {len(refused)} cell(s) refused, none verified")
            packages: dict[str, ExportedPackage] = {}
            shipped: list[policy.ShippedCell] = []

            def fill(tmp: Path) -> None:
                for name in (paths.html, paths.markdown, paths.json):
                    shutil.copyfile(name, tmp / name.name)
                cells = [matrix.cell(v.cell) for v in shipping]
                packages.update(_package_cells(cells, shipping, options, ctx))
                for cell, verdict in zip(cells, shipping, strict=True):
                    shipped.append(
                        _write_cell_files(
                            cell,
                            verdict,
                            packages[cell.id],
                            report,
                            options.version,
                            tmp,
                            started_on,
                            trust,
                            ctx,
                        )
                    )
                notes = policy.release_notes(
                    version=options.version,
                    commit=report.header.commit,
                    trust=trust,
                    shipped=shipped,
                    refused=refused,
                    since=report.since,
                )
                (tmp / policy.NOTES_FILE).write_text(notes)
                facts = policy.manifest(
                    version=options.version,
                    commit=report.header.commit,
                    trust=trust,
                    shipped=shipped,
                    refused=refused,
                )
                (tmp / policy.MANIFEST_FILE).write_text(json.dumps(facts, indent=2) + "\n")
                hashed = {s.archive: s.archive_sha256 for s in shipped}  # the archives: hashed once
                sums = {
                    p.name: hashed.get(p.name) or sha256_file(p)
                    for p in sorted(tmp.iterdir())
                    if p.name != policy.SUMS_FILE
                }
                (tmp / policy.SUMS_FILE).write_text(policy.sha256sums(sums))

            try:
                atomic_write_directory(out, fill)
            except BUILD_ERRORS as exc:
                raise BuildFailed(str(exc)) from exc
    size = sum(p.stat().st_size for p in out.iterdir())
    log(
        f"release {options.version}: {len(shipped)} cell(s) in {out} ({size / 1e6:.1f} MB, "
        f"{len(list(out.iterdir()))} files) in {time.monotonic() - started:.0f} s"
    )
    remote = binary_remote()
    if remote is not None:
        with conan_home_lock(conan_home(project.cache), "release upload", log):
            for package in packages.values():
                log(upload_package(package, project.cache, remote))
    if refused:
        raise ChecksFailed(f"{len(refused)} cell(s) refused: {', '.join(v.cell for v in refused)}")
    return out


def _package_cells(
    cells: list[Cell], verdicts: list[policy.CellVerdict], options: ReleaseOptions, ctx: Context
) -> dict[str, ExportedPackage]:
    """Each cell's Conan package from its verified build tree, its library checked against
    the verdict's bytes once more (the package is what ships). The Conan home is prepared,
    llama.cpp's source resolved and the home's lock taken once for all of them."""
    project = ctx.project
    bundle = ensure_tiny_bundle() if options.test_package else None
    packages: dict[str, ExportedPackage] = {}
    with conan_home_lock(conan_home(project.cache), "release", ctx.log):
        prepare_conan_home(project.cache, project.repo, conan_profiles_for(c.platform for c in cells))
        source = resolve_llama_source(project.cache, project.env)
        envs: dict[str, dict[str, str]] = {}
        defaults = package_option_defaults(ctx.matrix)
        for cell, verdict in zip(cells, verdicts, strict=True):
            env = envs.setdefault(cell.platform.id, platform_env(cell.platform))
            plan = plan_for(cell, ctx.matrix, source.version, env)
            package = export_package(
                plan,
                options.version,
                project.cache,
                {**source.env, **plan.env},
                plan.output_dir / "conan-export-pkg.log",
                test_bundle=bundle,
                option_defaults=defaults,
            )
            packaged = package.folder / "lib" / library_file(cell.platform)
            got = sha256_file(packaged) if packaged.is_file() else None
            if got != verdict.library_sha256:
                raise ChecksFailed(
                    f"{cell.id}: the package's library {packaged} has sha256 {got}, the verified one "
                    f"{verdict.library_sha256}: nothing was released"
                )
            ctx.log(f"{cell.id}: packaged {package.full_ref}")
            packages[cell.id] = package
    return packages


def _write_cell_files(
    cell: Cell,
    verdict: policy.CellVerdict,
    package: ExportedPackage,
    report: Report,
    version: str,
    tmp: Path,
    started_on: str,
    trust: str,
    ctx: Context,
) -> policy.ShippedCell:
    project = ctx.project
    archive_name = policy.archive_name(version, cell.id)
    archive = tmp / archive_name
    epoch = _source_epoch(project.env)
    write_archive(package.folder, archive, archive_name.removesuffix(".tar.gz"), epoch)
    sbom = tmp / policy.sbom_name(archive_name)
    written = package.metadata_folder / SBOM_IN_METADATA
    problem = sbom_problem(written.read_text()) if written.is_file() else "the package has none"
    if problem:
        raise ChecksFailed(f"{cell.id}: the SBOM {written}: {problem}; nothing was released")
    shutil.copyfile(written, sbom)
    licenses = sbom_licenses(written.read_text())
    archive_sha = sha256_file(archive)
    library_sha = verdict.library_sha256
    statement = provenance_statement(
        subjects=[(archive_name, archive_sha)],
        external_parameters={"version": version, "cell": cell.id, "matrix": project.matrix_path.name},
        internal_parameters={
            "conan_package": package.full_ref,
            "library": {"path": verdict.library.path if verdict.library else "", "sha256": library_sha},
            "verified_checks": list(verdict.verified_checks),
            "not_verified_here": list(verdict.not_verified),
            "trust": trust,
            "dirty_tree": report.header.dirty,
        },
        resolved_dependencies=_dependencies(cell, report, project.repo, tmp),
        builder_id=_builder_id(project.env),
        invocation_id=_invocation_id(project.env),
        started_on=started_on,
        finished_on=utc_timestamp(now()),
        byproducts=[
            ResourceDescriptor(name=policy.sbom_name(archive_name), digest={"sha256": sha256_file(sbom)}),
            ResourceDescriptor(name=f"lib/{library_file(cell.platform)}", digest={"sha256": library_sha}),
        ],
    )
    provenance = tmp / policy.provenance_name(archive_name)
    provenance.write_text(sign_provenance(statement, signing_key(project)))
    return policy.ShippedCell(
        cell=cell.id,
        archive=archive_name,
        archive_sha256=archive_sha,
        archive_bytes=archive.stat().st_size,
        library_sha256=library_sha,
        package_ref=package.full_ref,
        not_verified=verdict.not_verified,
        install_arguments=package.install_arguments,
        settings=package.settings,
        licenses=licenses,
    )


def _dependencies(cell: Cell, report: Report, repo: Path, tmp: Path) -> list[ResourceDescriptor]:
    """What the archive was made from: the source commit, llama.cpp's pinned source, the
    report and every record the verdict rests on."""
    found = []
    if len(report.header.commit) == 40:  # "unknown" outside git
        commit = report.header.commit
        found.append(
            ResourceDescriptor(name="source", uri=f"git+file://{repo}", digest={"gitCommit": commit})
        )
    facts_file = library_path(cell.id, repo, "build-info.json")
    if facts_file.is_file():
        llama = (json.loads(facts_file.read_text()).get("llama_cpp") or {}).get("source", {})
        digest = {
            k: v
            for k, v in (("sha256", llama.get("sha256")), ("gitCommit", llama.get("upstream_commit")))
            if v
        }
        if digest:
            found.append(
                ResourceDescriptor(
                    name="llama.cpp", uri=_pypi_purl(str(llama.get("requirement", ""))), digest=digest
                )
            )
    row = next(r for r in report.rows if r.cell == cell.id)
    for entry in row.entries:
        if entry.evidence is None:
            continue
        record = Path(entry.evidence.path)
        record = record if record.is_absolute() else repo / record
        if record.is_file():
            shown = str(record.relative_to(repo)) if record.is_relative_to(repo) else record.name
            found.append(ResourceDescriptor(name=shown, digest={"sha256": sha256_file(record)}))
    found.append(ResourceDescriptor(name="report.json", digest={"sha256": sha256_file(tmp / "report.json")}))
    return found


def _pypi_purl(requirement: str) -> str:
    """A pip requirement "name==version" as pkg:pypi/name@version ("" for none)."""
    name, _, version = requirement.partition("==")
    if not name.strip():
        return ""
    return f"pkg:pypi/{name.strip().lower()}" + (f"@{version.strip()}" if version else "")


def _source_epoch(env: Mapping[str, str]) -> int:
    """SOURCE_DATE_EPOCH, else 0: the archive's file times, the same on every run."""
    value = env.get("SOURCE_DATE_EPOCH", "")
    return int(value) if value.isdigit() else 0


def _builder_id(env: Mapping[str, str]) -> str:
    if env.get("GITHUB_ACTIONS") == "true":
        server, repository = env.get("GITHUB_SERVER_URL", ""), env.get("GITHUB_REPOSITORY", "")
        return f"{server}/{repository}/.github/workflows/matrix.yml@{env.get('GITHUB_REF', '')}"
    return "https://libelizainference.github.io/release/local"


def _invocation_id(env: Mapping[str, str]) -> str:
    if env.get("GITHUB_ACTIONS") == "true":
        server, repository = env.get("GITHUB_SERVER_URL", ""), env.get("GITHUB_REPOSITORY", "")
        return f"{server}/{repository}/actions/runs/{env.get('GITHUB_RUN_ID', '')}"
    return f"urn:uuid:{uuid.uuid4()}"
