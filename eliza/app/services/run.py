"""One verify or bench run: the inputs it fingerprints evidence against (read once, at its
start), where evidence goes, and the record of what it wrote."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from eliza.adapters import git
from eliza.adapters.abi_tools import abidiff_version
from eliza.adapters.conan import llama_source_version
from eliza.adapters.errors import ToolError
from eliza.app.project import Project
from eliza.app.services import artifact_store, recording
from eliza.app.services.bench_options import bundle_inputs, bundle_prompts, default_settings_description
from eliza.app.services.inputs import input_hashes
from eliza.app.services.signing import signing_key
from eliza.core.cell_id import CellId
from eliza.core.evidence import Artifact, EvidenceRecord, HostInfo, LoadedRecord, Status, Subject
from eliza.core.fingerprint import InputHashes, fingerprint_for
from eliza.core.host import HostFacts
from eliza.core.layout import default_prompts
from eliza.core.matrix import Check, Matrix
from eliza.core.outcome import CheckOutcome
from eliza.core.report.judge import check_artifacts
from eliza.core.report.model import ArtifactState
from eliza.core.simulated_cpu import SimulatedRun
from eliza.core.trust import TrustPolicy, judge_signature
from eliza.core.verify_plan import KnownRecord
from eliza.formats.attestation import SigningKey
from eliza.formats.evidence_json import read_records
from eliza.formats.files import HASH_MEMO

Log = Callable[[str], None]

# Failures of the machinery (a build that breaks, a tool that crashes) become error
# evidence for the checks they prevented, never a traceback that loses the other cells.
RUN_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, ToolError)


@dataclass(kw_only=True)
class Run:
    """Where evidence goes and what it is fingerprinted against; build with `start_run`."""

    project: Project
    matrix: Matrix
    log: Log
    bundle: Path
    hashes: InputHashes
    git: git.GitState
    host: HostInfo
    evidence_dir: Path
    verbose: bool = False  # tool output shown as it runs (else: in each cell's log, with progress)
    # the runners' own figures as they go (the rounds, the bench files, the seam overhead):
    # a bench session's point; in verify each record's line says what counts (-v: all of it)
    details_shown: bool = True
    notes_said: tuple[str, ...] = ()  # the plan's notes, printed before its steps
    ran_on: dict[str, str] = field(default_factory=dict)  # platform id -> how its checks ran, if not natively
    # platform id -> the identity of the lab device its checks ran on (uname -a, ...)
    device_facts: dict[str, dict[str, str]] = field(default_factory=dict)
    written: list[CheckOutcome] = field(default_factory=list)
    # Added to the environment of the processes the checks start (a CI check job's
    # ELIZA_PREBUILT_CELLS=1, so the suites take their cells from its artifact).
    child_env: dict[str, str] = field(default_factory=dict)
    key: SigningKey  # signs every record (this machine's, or ELIZA_SIGNING_KEY)
    prompts: Path | None = None  # the prompt file the checks that run the library read
    file_hashes: recording.ArtifactHashes = field(default_factory=recording.ArtifactHashes)
    # The other bundles (matrix.yaml `bundles` after the first), by id: (folder, prompt file)
    other_bundles: dict[str, tuple[Path, Path]] = field(default_factory=dict)
    # The perf check's simulated-CPU counts measured in this run, by everything they depend
    # on (eliza.app.checks.simulated.simulated_key): a reference library that several cells
    # compare with is run under the simulator once.
    simulated_counts: dict[str, SimulatedRun] = field(default_factory=dict)

    def detail(self, line: str) -> None:
        """A runner's line of detail: shown when details are (a bench session), or -v."""
        if self.details_shown or self.verbose:
            self.log(line)

    def bundle_of(self, check: Check) -> tuple[Path, Path | None]:
        """The bundle folder and the prompt file a check runs on."""
        return self.other_bundles.get(check.bundle, (self.bundle, self.prompts))

    def on_bundle(self, bundle_id: str) -> Run:
        """This run as the checks of one bundle see it: `bundle` and `prompts` are that
        bundle's; what it records and writes is shared with this run."""
        if bundle_id not in self.other_bundles:
            return self
        bundle, prompts = self.other_bundles[bundle_id]
        return replace(self, bundle=bundle, prompts=prompts)

    def collect_artifacts(self) -> list[Path]:
        """Removes the artifact store's copies that no record of this checkout's evidence
        names any more (a record written again names its own); returns them."""
        named = [
            a.path
            for item in read_records([self.evidence_dir], {})
            if item.record is not None
            for a in item.record.artifacts
        ]
        return artifact_store.collect(self.project.repo, named)

    def record(
        self,
        outcomes: Sequence[CheckOutcome],
        libraries: Mapping[tuple[str, str], Mapping[CellId, Path]] | None = None,
    ) -> list[CheckOutcome]:
        """Writes each outcome as a signed evidence record naming what it judged (the
        libraries it was handed and, for a check that runs them, the bundle and prompts);
        returns what was written."""
        written: list[CheckOutcome] = []
        for o in outcomes:
            cell = self.matrix.cell(o.cell)
            check = self.matrix.check(o.check)
            baseline = str(o.details.get("baseline_commit", "")) if o.details else ""
            perf = o.details.get("perf") if o.details else None
            if isinstance(perf, dict) and perf.get("reference_identity"):
                baseline = str(perf["reference_identity"])  # the perf check's reference and rounds
            bundle, prompts = self.bundle_of(check)
            if check.needs_run and o.status is not Status.SKIPPED:
                # How the library ran: evidence of a fallback run must say so; and which
                # bundle every figure of it comes from.
                o = replace(
                    o,
                    details={
                        **o.details,
                        "ran_on": self.ran_on.get(cell.platform.id, "native"),
                        "bundle": check.bundle,
                    },
                )
                device = self.device_facts.get(cell.platform.id)
                if device is not None and o.details["ran_on"].startswith("device "):
                    o = replace(o, details={**o.details, "device": dict(device)})
            judged = recording.Judged(
                libraries={str(c): p for c, p in (libraries or {}).get((o.cell, o.check), {}).items()},
                bundle=bundle if check.needs_run else None,
                prompts=prompts if check.needs_run else None,
            )
            ran = () if o.status is Status.SKIPPED else judged_subjects(self, o.cell, judged)
            record = recording.to_record(
                o,
                fingerprint_for(cell, check, self.hashes, baseline),
                self.git,
                self.host,
                self.project.repo,
                ran,
            )
            recording.save(record, self.evidence_dir, self.key)
            self.written.append(o)
            written.append(o)
            mark = {Status.PASSED: "ok", Status.SKIPPED: "skipped"}.get(o.status, o.status.value.upper())
            said = o.reason or str(o.details.get("summary", "")) if o.details or o.reason else ""
            line = f"  {o.cell:<24} {o.check:<24} {mark}" + (f" ({said[:200]})" if said else "")
            # a skip whose reason a note of the plan said already (a platform's, a variant's)
            noted = o.status is Status.SKIPPED and any(o.reason and o.reason in n for n in self.notes_said)
            (self.detail if noted else self.log)(line)
        return written


def start_run(
    project: Project,
    matrix: Matrix,
    host: HostFacts,
    log: Log,
    *,
    bundle: Path,
    prompts: Path | None = None,
    bench_settings: str | None = None,
    other_bundles: Mapping[str, Path] | None = None,
) -> Run:
    """Reads what evidence is keyed by: the input hashes of the tree, the commit, the host.
    bench_settings describes non-default bench settings (see eliza.app.services.bench_options).
    other_bundles: the folders of the matrix's other bundles that this run may use."""
    others = {
        bid: (path, bundle_prompts(project.repo, matrix.bundle(bid)))
        for bid, path in (other_bundles or {}).items()
        if bid != matrix.default_bundle.id
    }
    hashes = input_hashes(
        project.repo,
        bundle,
        prompts or default_prompts(project.repo),
        host,
        abidiff_version(),
        llama_source=llama_source_version(project.env),
        bench_settings=bench_settings or default_settings_description(project.env),
        other_bundles=bundle_inputs(project.repo, matrix),
    )
    return Run(
        project=project,
        matrix=matrix,
        log=log,
        bundle=bundle,
        hashes=hashes,
        git=git.git_state(project.repo),
        host=recording.host_info(host),
        evidence_dir=project.evidence_dir,
        key=signing_key(project),
        prompts=prompts or default_prompts(project.repo),
        file_hashes=recording.ArtifactHashes(repo=project.repo, memo=project.cache / HASH_MEMO),
        other_bundles=others,
    )


def judged_subjects(run: Run, cell: str, judged: recording.Judged) -> tuple[Subject, ...]:
    return recording.subjects(cell, judged, run.matrix, run.project.repo, run.file_hashes)


def existing_records(
    directory: Path, trust: TrustPolicy, matrix: Matrix
) -> dict[tuple[str, str], LoadedRecord]:
    """The records of `directory` that a key of `trust` signed: a record no trusted key
    vouches for is not evidence to keep, so its check runs again."""
    found = {}
    cells = {c.id: c for c in matrix.cells}
    # Which files already passed the schema: a record rewritten since is checked again.
    memo = directory.with_name(directory.name + "-schema-valid.json")
    for r in read_records([directory], trust.public_keys(), memo=memo):
        if r.record is None or r.record.cell not in cells:
            continue
        platform = cells[r.record.cell].platform.id
        signer, _ = judge_signature(r.signature, trust, platform, r.record.check)
        if signer is not None:
            found[(r.record.cell, r.record.check)] = r
    return found


def evidence_index(run: Run, hashes: recording.ArtifactHashes) -> dict[tuple[str, str], KnownRecord]:
    """The records of this checkout's evidence, each with whether its artifacts are intact."""
    return {
        key: _known(item.record, item.path, run.project.repo, hashes)
        for key, item in existing_records(
            run.evidence_dir, run.matrix.trust.with_local(run.key.public_raw), run.matrix
        ).items()
        if item.record is not None
    }


def _known(record: EvidenceRecord, path: Path, repo: Path, hashes: recording.ArtifactHashes) -> KnownRecord:
    # Its artifacts as the report checks them, so the plan keeps nothing the report would
    # not count; intact when every one is here as recorded, and the files it judged too: a
    # record of a library that was rebuilt differently would not count against the new
    # build, so its check runs again.
    artifacts = check_artifacts(record, hashes.resolve)
    return KnownRecord(
        record=record,
        path=str(path.relative_to(repo) if path.is_relative_to(repo) else path),
        artifacts_intact=all(a.state is ArtifactState.MATCH for a in artifacts)
        and all(hashes.resolve(Artifact(path=s.name, sha256=s.sha256)) is not False for s in record.subjects),
        artifacts=artifacts,
    )
