"""Turning check outcomes into evidence records: the commit, the host and the input
fingerprint are added, the artifacts hashed, the record written atomically."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from eliza.adapters.git import GitState
from eliza.app.services import artifact_store
from eliza.core.evidence import (
    Artifact,
    Counts,
    EvidenceRecord,
    HostInfo,
    InputFingerprint,
    Subject,
    SubjectRole,
    utc_timestamp,
)
from eliza.core.host import HostFacts
from eliza.core.matrix import Matrix
from eliza.core.outcome import CheckOutcome
from eliza.core.target import test_kit_file
from eliza.formats.attestation import SigningKey
from eliza.formats.evidence_json import write_record
from eliza.formats.files import IdentityHashes, sha256_file

# The case runner the target suites start, next to the library (eliza.app.checks.target_cases).
CASE_RUNNER = "case_runner"


def host_info(host: HostFacts) -> HostInfo:
    tools = {
        t.name: t.version or "unknown"
        for t in (host.compiler, host.cmake, host.conan, host.ninja, host.nvcc)
        if t
    }
    return HostInfo(
        os=f"{host.os} {host.os_release}".strip(),
        cpu=f"{host.cpu_model or host.arch} ({host.cpu_count} threads, x86-64-v{host.x86_64_level})"
        if host.arch == "x86_64"
        else (host.cpu_model or host.arch),
        gpu=host.nvidia_gpu or "",
        compiler=host.compiler.describe() if host.compiler else "",
        cuda=host.cuda_version or "",
        tools=tools,
    )


def artifact(path: Path, repo: Path) -> Artifact:
    """A file as evidence names it: a check's output by the store's copy of its bytes
    (eliza.app.services.artifact_store), any other file where it is; relative to the
    repository when inside it."""
    kept, sha256 = artifact_store.keep(path.resolve(), repo)
    rel = kept.relative_to(repo) if kept.is_relative_to(repo) else kept
    return Artifact(path=rel.as_posix(), sha256=sha256)


def _shown(path: Path, repo: Path) -> str:
    shown = path.resolve()
    return (shown.relative_to(repo) if shown.is_relative_to(repo) else shown).as_posix()


@dataclass(frozen=True, kw_only=True)
class Judged:
    """What a step ran against, for its record's subjects: the libraries it was handed
    (its own cell's and any reference's), and for a check that runs the library the
    bundle and the prompts."""

    libraries: Mapping[str, Path] = field(default_factory=dict)  # cell id -> library
    bundle: Path | None = None
    prompts: Path | None = None


def subjects(
    cell: str, judged: Judged, matrix: Matrix, repo: Path, hashes: ArtifactHashes
) -> tuple[Subject, ...]:
    """The artifacts a record of `cell` names by path and sha256: every library it was
    handed, the test kit and case runner beside its own cell's library, the bundle's files
    and the prompts. Files that are not there are left out (a record says what it judged)."""
    found: list[Subject] = []

    def add(path: Path, role: SubjectRole, of_cell: str = "") -> None:
        if path.is_file():
            found.append(
                Subject(name=_shown(path, repo), sha256=hashes.sha256(path), role=role, cell=of_cell)
            )

    for cell_id, library in sorted(judged.libraries.items()):
        add(library, SubjectRole.LIBRARY, cell_id)
    own = judged.libraries.get(cell)
    if own is not None:
        add(own.parent / test_kit_file(matrix.cell(cell).platform), SubjectRole.TEST_KIT, cell)
        add(own.parent / CASE_RUNNER, SubjectRole.TOOL, cell)
    if judged.bundle is not None and judged.bundle.is_dir():
        for path in sorted(p for p in judged.bundle.rglob("*") if p.is_file()):
            add(path, SubjectRole.BUNDLE)
    if judged.prompts is not None:
        add(judged.prompts, SubjectRole.PROMPTS)
    return tuple(found)


def to_record(
    outcome: CheckOutcome,
    fingerprint: InputFingerprint,
    git: GitState,
    host: HostInfo,
    repo: Path,
    subjects: tuple[Subject, ...] = (),
) -> EvidenceRecord:
    duration = max(0.0, (outcome.finished_at - outcome.started_at).total_seconds())
    return EvidenceRecord(
        cell=outcome.cell,
        check=outcome.check,
        status=outcome.status,
        reason=outcome.reason,
        counts=Counts(ran=outcome.ran, passed=outcome.passed, failed=outcome.failed),
        fingerprint=fingerprint,
        commit=git.commit,
        dirty=git.dirty,
        host=host,
        artifacts=tuple(artifact(p, repo) for p in outcome.artifacts if p.is_file()),
        started_at=utc_timestamp(outcome.started_at),
        finished_at=utc_timestamp(outcome.finished_at),
        duration_s=round(duration, 3),
        metrics=dict(outcome.metrics),
        details=dict(outcome.details),
        log_tail=outcome.log_tail[-4000:],
        subjects=subjects,
    )


def save(record: EvidenceRecord, directory: Path, key: SigningKey) -> Path:
    """The record as a signed in-toto Statement in `directory`."""
    return write_record(directory, record, key)


@dataclass(kw_only=True)
class ArtifactHashes:
    """Artifact checks within one invocation: each file is hashed once, however many
    records (and the report) name it; a file that changes on disk is hashed again."""

    repo: Path = Path()
    # across invocations too: the file's sha256 remembered by its identity (size, mtime,
    # inode), so a verify with nothing to do does not read every library again
    memo: Path | None = None
    _seen: dict[tuple[str, int, int], str] = field(default_factory=dict)
    _remembered: IdentityHashes | None = None

    def sha256(self, path: Path) -> str:
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        if key not in self._seen:
            if self.memo is not None and self._remembered is None:
                self._remembered = IdentityHashes(self.memo)
            self._seen[key] = self._remembered.sha256(path) if self._remembered else sha256_file(path)
        return self._seen[key]

    def resolve(self, artifact: Artifact) -> bool | None:
        """True/False when the file is here, None when it is not (the report's artifact check)."""
        path = Path(artifact.path)
        path = path if path.is_absolute() else self.repo / path
        if not path.is_file():
            return None
        return self.sha256(path) == artifact.sha256

    def matches(self, artifact: Artifact) -> bool:
        return self.resolve(artifact) is True
