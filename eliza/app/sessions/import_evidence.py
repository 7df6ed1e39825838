"""`nox -s import-evidence -- DIR...`: evidence made elsewhere (a device run, a CI job of
another host) brought into build/imported-evidence, where the report reads it. Nothing is
trusted for being imported: every envelope's signature is verified, and a record that no
key of the trust policy (or this machine's) vouches for, for its cell and check, is not
imported; the report then judges each record like its own (signature, fingerprint against
the current inputs, artifacts where they are present, the metrics a device-gated item
names). Records that cannot be read, or that name a cell or check the matrix does not
declare, are not imported either, and each is named with the reason. Imported files are
copied byte for byte: their signatures stay the producer's."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.app.context import Context
from eliza.app.errors import UsageError
from eliza.app.options import Parser
from eliza.app.services.signing import report_trust
from eliza.core.evidence import record_filename
from eliza.core.matrix import Matrix
from eliza.core.trust import SignatureCheck, TrustPolicy, judge_signature
from eliza.formats.evidence_json import read_records
from eliza.formats.files import atomic_write_bytes

Log = Callable[[str], None]


def runs_here(ctx: Context, cell_id: str, check_id: str) -> bool:
    """Whether this host builds the cell and can run the check on it."""
    cell, check = ctx.matrix.cell(cell_id), ctx.matrix.check(check_id)
    can = ctx.capability(cell.platform)
    return can.can_build and (not check.needs_run or can.can_run_check(check.device_free))


def _distrust(
    ctx: Context, signature: SignatureCheck | None, cell_id: str, check_id: str, trust: TrustPolicy
) -> str | None:
    platform = ctx.matrix.cell(cell_id).platform.id
    signer, why = judge_signature(signature, trust, platform, check_id)
    return None if signer is not None else why


@dataclass(frozen=True, kw_only=True)
class ImportOptions:
    evidence: tuple[Path, ...]


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> ImportOptions:
    parser = Parser("nox -s import-evidence --")
    parser.add_argument("evidence", nargs="+", type=Path, help="evidence directories made elsewhere")
    args = parser.parse_args(list(argv))
    return ImportOptions(evidence=tuple(args.evidence))


def run(options: ImportOptions, ctx: Context) -> int:
    matrix, log, project = ctx.matrix, ctx.log, ctx.project
    for directory in options.evidence:
        if not directory.is_dir():
            raise UsageError(f"evidence directory {directory} does not exist; nothing was imported")
    cells = {c.id for c in matrix.cells}
    checks = {c.id for c in matrix.checks}
    trust = report_trust(matrix, project, release=False)
    accepted = []
    for item in read_records(options.evidence, trust.public_keys()):
        record = item.record
        if record is None:
            log(f"not imported: {item.path}: {item.problem}")
        elif record.cell not in cells or record.check not in checks:
            unknown = f"cell {record.cell!r}" if record.cell not in cells else f"check {record.check!r}"
            log(f"not imported: {item.path}: {matrix.source} declares no {unknown}")
        elif runs_here(ctx, record.cell, record.check):
            # Only what this host cannot produce comes in: its own evidence of a check it
            # runs is never replaced by another machine's.
            log(f"not imported: {item.path}: this host runs {record.cell} · {record.check} itself")
        elif (why := _distrust(ctx, item.signature, record.cell, record.check, trust)) is not None:
            log(f"not imported: {item.path}: not trusted: {why}")
        else:
            accepted.append(item)
    if not accepted:
        raise UsageError(
            f"no usable evidence record in {', '.join(map(str, options.evidence))}; nothing was imported"
        )
    # One subdirectory per source directory (its name and a hash of its path), so a later
    # import of another device's run keeps this one; the report resolves duplicates (fresh
    # first, then latest). Records of one (cell, check) in one source: the last read wins.
    for item in accepted:
        assert item.record is not None
        source = next(d for d in options.evidence if item.path.is_relative_to(d))
        where = source.resolve()
        digest = hashlib.sha256(str(where).encode()).hexdigest()[:8]
        label = f"{re.sub(r'[^A-Za-z0-9._-]', '_', where.name) or 'evidence'}-{digest}"
        target = project.imported_evidence_dir / label / record_filename(item.record.cell, item.record.check)
        atomic_write_bytes(target, item.raw)
    log(
        f"imported {len(accepted)} record(s) into {project.imported_evidence_dir}; "
        "`nox -s report` judges them"
    )
    return len(accepted)
