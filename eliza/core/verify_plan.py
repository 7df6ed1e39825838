"""What `verify` will do, decided before anything is built: one pure function from the
matrix, this host's capabilities, the user's selection and the evidence already on disk to
a plan of frozen steps.

- `Build(cell, role)`: a library some check needs, as its subject, as a reference another
  check compares with, as the declared baseline, or as the CPU build a CUDA cell's
  fallback run must equal.
- `Run(cell, check)`: the check runs, and why (no evidence, inputs changed, ...).
- `Keep(cell, check, evidence)`: fresh passing evidence of these very artifacts stands
  (or a perf check's inconclusive one, of the same inputs and rounds).
- `Skip(cell, check, state, reason)`: it cannot or will not run here; some skips write
  skipped evidence, so the report can say why.

The executor (eliza.app.executor) carries a plan out and decides nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TypeVar

from eliza.core.cell_id import CellId
from eliza.core.evidence import EvidenceRecord, Status
from eliza.core.fingerprint import InputHashes, fingerprint_for, is_fresh_pass
from eliza.core.host import Capability, bundle_blockers
from eliza.core.matrix import Cell, Check, CheckKind, Matrix, Platform
from eliza.core.report.judge import BuildStanding, bind_to_build, judge_record, unavailable_state
from eliza.core.report.model import ArtifactResult, PlatformCapability
from eliza.core.report.states import GridState

__all__ = [
    "IDENTITY_KINDS",
    "PLATFORM_GROUPS",
    "Build",
    "BuildRole",
    "Keep",
    "KnownRecord",
    "PlanFacts",
    "Run",
    "Selection",
    "Skip",
    "Step",
    "VerifyPlan",
    "perf_identity",
    "plan",
    "simulated_identity",
]

# The byte-identity checks share one bench run of the platform's cells.
IDENTITY_KINDS: frozenset[CheckKind] = frozenset(
    {
        CheckKind.BYTE_IDENTITY_REFERENCE,
        CheckKind.BYTE_IDENTITY_GATES,
        CheckKind.BYTE_IDENTITY_BASELINE,
        CheckKind.BYTE_IDENTITY_DRAFTER,
        CheckKind.CROSS_ARCH_AGREEMENT,
    }
)
# Check kinds that load the library into a program of this host (the Python suite, the
# consumers' node and java): a platform whose binaries only run under an emulator cannot.
LOADED_BY_THE_HOST: frozenset[CheckKind] = frozenset({CheckKind.NATIVE_SUITE, CheckKind.CONSUMER})
# Check kinds whose runner serves every cell of a platform at once: they run for all the
# platform's cells or for none, and the group is kept only when every member would be.
PLATFORM_GROUPS: Mapping[CheckKind, str] = {
    **{kind: "bench" for kind in IDENTITY_KINDS},
    CheckKind.GATE_FALLTHROUGH: "gate-fallthrough",
}


class BuildRole(StrEnum):
    SUBJECT = "subject"  # its own checks run on it
    REFERENCE = "reference"  # another cell's check compares with it
    BASELINE = "baseline"  # the pre-M3 commit's library, for byte-identity-baseline
    CPU_FALLBACK_REFERENCE = "cpu-fallback reference"  # a CUDA cell's CPU run must equal it


@dataclass(frozen=True, kw_only=True)
class Build:
    cell: CellId
    role: BuildRole
    reason: str
    commit: str = ""  # BASELINE: the commit whose library is built

    def describe(self) -> str:
        what = f"baseline {self.commit[:12]} of {self.cell.platform}" if self.commit else str(self.cell)
        return f"build  {what} as {self.role.value}: {self.reason}"


@dataclass(frozen=True, kw_only=True)
class Run:
    cell: CellId
    check: str
    kind: CheckKind
    reason: str  # why it runs
    how: str = "native"  # "native", "emulated: ...", "CPU fallback, without nvidia-gpu"
    needs: tuple[CellId, ...] = ()  # other cells' libraries it reads (references)
    baseline_commit: str = ""  # byte-identity-baseline: the commit compared with
    # perf with a simulated instrument: the simulator that runs it here ("valgrind 3.19.0"),
    # or "" and why it does not (wall time alone judges)
    simulator: str = ""
    simulator_reason: str = ""
    # It measures wall time on this host (perf's rounds, the bench's seam overhead and
    # drafter speedup): it runs with nothing beside it.
    alone: bool = False

    def describe(self) -> str:
        where = "" if self.how == "native" else f" [{self.how}]"
        if self.simulator:
            where += f" [simulated CPU: {self.simulator}]"
        elif self.simulator_reason:
            where += f" [wall time alone: {self.simulator_reason}]"
        if self.alone:
            where += " [runs alone: it measures wall time]"
        return f"run    {self.check}{where}: {self.reason}"


@dataclass(frozen=True, kw_only=True)
class Keep:
    cell: CellId
    check: str
    evidence: str  # the record's path
    reason: str

    def describe(self) -> str:
        return f"keep   {self.check}: {self.reason} ({self.evidence})"


@dataclass(frozen=True, kw_only=True)
class Skip:
    cell: CellId
    check: str
    state: GridState
    reason: str
    records: bool = False  # written as skipped evidence carrying the reason

    def describe(self) -> str:
        return f"skip   {self.check}: {self.state.label}: {self.reason}"


Step = Build | Run | Keep | Skip
S = TypeVar("S", Build, Run, Keep, Skip)


@dataclass(frozen=True, kw_only=True)
class KnownRecord:
    """A record on disk as the planner sees it: the record, where it is, whether every
    artifact it names is here and hashes as recorded (the app hashes them), and each
    artifact's state as the report's judge sees it (absent here is not a mismatch there)."""

    record: EvidenceRecord
    path: str
    artifacts_intact: bool
    artifacts: tuple[ArtifactResult, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Selection:
    """What the user asked for."""

    cells: frozenset[CellId] | None = None  # --cell; None: every cell
    rerun: bool = False
    bench: bool = True  # False: --no-bench
    baseline_commit: str | None = None  # what byte-identity-baseline compares with; None: not run
    no_baseline_reason: str = ""  # why there is none (a shallow clone)
    kinds: frozenset[CheckKind] | None = None  # build sessions: build and abi only
    # perf: the reference library, a commit (built like the baseline) or the sha256 of a
    # library in a directory (--perf-reference DIR); None: the baseline commit
    perf_reference_commit: str | None = None
    perf_reference_library: str = ""  # sha256 of --perf-reference DIR's library
    perf_rounds: int | None = None  # --rounds N; None: the check's declared rounds
    build_all: bool = False  # build sessions build every selected cell even when nothing runs
    # the checks of these bundles only (a bench session: its --bundle stands for the first
    # bundle); None: every bundle
    bundles: frozenset[str] | None = None


@dataclass(frozen=True, kw_only=True)
class PlanFacts:
    """What the planner knows of this host and tree, gathered by the app beforehand."""

    capabilities: Mapping[str, Capability]  # platform id -> what this host can do with it
    hashes: InputHashes
    cached_llama: frozenset[tuple[str, str]] = frozenset()  # (platform, sanitize option) in the cache
    evidence: Mapping[tuple[str, str], KnownRecord] = field(default_factory=dict)
    # check id -> what this host lacks to run it (a consumer's runtime); see host.check_blockers
    check_blockers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class VerifyPlan:
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()  # per-platform decisions in words ("linux-cuda: not buildable here — ...")

    def of(self, kind: type[S]) -> list[S]:
        return [s for s in self.steps if isinstance(s, kind)]

    @property
    def builds(self) -> list[Build]:
        return self.of(Build)

    @property
    def runs(self) -> list[Run]:
        return self.of(Run)

    @property
    def kept(self) -> list[Keep]:
        return self.of(Keep)

    @property
    def skips(self) -> list[Skip]:
        return self.of(Skip)

    def counts(self) -> dict[str, int]:
        return {
            "build": len(self.builds),
            "run": len(self.runs),
            "keep": len(self.kept),
            "skip": len(self.skips),
        }

    def lines(self) -> list[str]:
        """One line per step, grouped by cell, in matrix order; then the counts."""
        out = list(self.notes)
        order: list[str] = []
        groups: dict[str, list[Step]] = {}
        for step in self.steps:
            name = (
                str(step.cell)
                if not (isinstance(step, Build) and step.commit)
                else f"baseline {step.commit[:12]}"
            )
            if name not in groups:
                order.append(name)
            groups.setdefault(name, []).append(step)
        for name in order:
            out.append(f"{name}:")
            out.extend(f"  {s.describe()}" for s in groups[name])
        c = self.counts()
        out.append(
            f"plan: {c['build']} build(s), {c['run']} check(s) to run, {c['keep']} kept, {c['skip']} skipped"
        )
        return out

    def as_dict(self) -> dict[str, object]:
        def step(s: Step) -> dict[str, object]:
            base: dict[str, object] = {"step": type(s).__name__.lower(), "cell": str(s.cell)}
            if isinstance(s, Build):
                base |= {"role": s.role.value, "reason": s.reason, "commit": s.commit}
            elif isinstance(s, Run):
                base |= {
                    "check": s.check,
                    "reason": s.reason,
                    "how": s.how,
                    "needs": [str(n) for n in s.needs],
                    "baseline_commit": s.baseline_commit,
                }
            elif isinstance(s, Keep):
                base |= {"check": s.check, "reason": s.reason, "evidence": s.evidence}
            else:
                base |= {"check": s.check, "state": s.state.value, "reason": s.reason, "records": s.records}
            return base

        return {"notes": list(self.notes), "counts": self.counts(), "steps": [step(s) for s in self.steps]}


# --------------------------------------------------------------------------- planning


def cpu_fallback_reference(matrix: Matrix, platform: Platform, facts: PlanFacts) -> Cell | None:
    """The CPU reference cell a CUDA platform's fallback run is compared with: the reference
    cell of a CPU platform of the same OS and architecture that this host can build."""
    if platform.llama_backend != "cuda":
        return None
    for other in matrix.platforms:
        if other.llama_backend == "cpu" and (other.os, other.arch) == (platform.os, platform.arch):
            can = facts.capabilities.get(other.id)
            cell = matrix.reference_cell(other.id)
            if cell is not None and can is not None and can.can_build:
                return cell
    return None


def measures_wall_time(check: Check, can: Capability) -> bool:
    """Whether a check's figures include wall time measured on this host, so that nothing
    may run beside it: perf's rounds (both subjects), and the bench group's seam overhead and
    drafter speedup where the platform runs natively (under an emulator or on a device the
    time is not this host's to protect, and the bench there judges identity only)."""
    if check.kind is CheckKind.PERF:
        return True
    return check.kind in IDENTITY_KINDS and not can.as_target


def perf_identity(reference: str, rounds: int, simulated: str = "") -> str:
    """What a perf record was measured against, as its fingerprint's `reference` part:
    the reference (a commit, "library:<sha256>", or BACKEND_PERF_REFERENCE), the rounds and,
    for a check with a simulated instrument, that instrument's identity here
    (simulated_identity)."""
    return f"{reference};rounds={rounds}" + (f";simulated={simulated}" if simulated else "")


def simulated_identity(check: Check, simulator: str) -> str:
    """The simulated instrument's part of a perf identity: "" for a check without one, "none"
    where it cannot run (so that a host gaining valgrind runs the check again), else what its
    counts depend on (the simulator's version, the cache geometry, the weights, the tokens)."""
    if check.simulated is None:
        return ""
    return check.simulated.identity(simulator) if simulator else "none"


# A backend perf check's reference: the llama.cpp path of the cell's own library.
BACKEND_PERF_REFERENCE = "llama.cpp-path"


def compares_with_baseline(cell: Cell, check: Check) -> bool:
    """Whether the check compares the cell with the declared baseline's library: the
    byte-identity-baseline bench, and the abi check of an x86-64 release cell whose
    platform verify builds here (M3: "no consumer changes", the exported surface against
    the pre-M3 library's)."""
    if check.kind in (CheckKind.BYTE_IDENTITY_BASELINE, CheckKind.PERF):
        return True
    platform = cell.platform
    return (
        check.kind is CheckKind.ABI
        and cell.variant is None
        and platform.arch == "x86_64"
        and platform.os == "linux"
        and not platform.slow_build
    )


class _Planner:
    def __init__(self, matrix: Matrix, facts: PlanFacts, selection: Selection) -> None:
        self.matrix = matrix
        self.facts = facts
        self.selection = selection
        self.steps: list[Step] = []
        self.notes: list[str] = []

    # -- evidence

    def _wanted(self, check: Check) -> bool:
        selection = self.selection
        return (selection.kinds is None or check.kind in selection.kinds) and (
            selection.bundles is None or check.bundle in selection.bundles
        )

    def verdict(
        self,
        cell: Cell,
        check: Check,
        baseline_commit: str = "",
        *,
        artifacts: bool,
        rerun: bool | None = None,
    ) -> Keep | str:
        """Keep when fresh passing evidence stands (and, when `artifacts`, every artifact
        it names hashes as recorded); otherwise why the check must run. `rerun` defaults to
        the user's --rerun."""
        if self.selection.rerun if rerun is None else rerun:
            return "--rerun"
        known = self.facts.evidence.get((cell.id, check.id))
        if known is None:
            return "no evidence yet"
        current = fingerprint_for(cell, check, self.facts.hashes, baseline_commit)
        record = known.record
        if record.fingerprint.key != current.key:
            changed = ", ".join(record.fingerprint.differing_parts(current))
            return f"inputs changed since {record.finished_at}: {changed}"
        # An inconclusive perf record stands like a pass: the same rounds on the same inputs
        # are one more draw of the same noise; more rounds (another identity, so it runs) or
        # --rerun decide. The report stays INCONCLUSIVE, and verify with nothing changed
        # runs nothing.
        undecided = self.undecided_perf(check, record)
        if not (undecided or is_fresh_pass(record, current)):
            return f"last run {record.status.value} ({record.counts.passed}/{record.counts.ran} passed)"
        # The report's own judge of the record (eliza.core.report.judge): what it would not
        # count is never kept, so a verify never ends with evidence it counted fresh and the
        # report counts INVALID (a shared file a later run wrote again, say).
        state, why = judge_record(record, current, known.artifacts)
        if state not in (GridState.VERIFIED, GridState.INCONCLUSIVE):
            return f"the report would count it {state.value.upper()}: {why}"
        if artifacts and not known.artifacts_intact:
            return "an artifact it names is missing or its bytes changed"
        other = self.other_library(cell, check, record)
        if other:
            return other
        reason = f"fresh passing evidence from {record.finished_at}"
        if undecided:
            reason = (
                f"inconclusive evidence of these inputs and rounds from {record.finished_at} stands: "
                "more rounds decide (`--rounds N`), or `--rerun`"
            )
        return Keep(cell=cell.ref, check=check.id, evidence=known.path, reason=reason)

    @staticmethod
    def undecided_perf(check: Check, record: EvidenceRecord) -> bool:
        """A perf record whose rounds ran and could not decide (its fingerprint is current)."""
        return check.kind is CheckKind.PERF and record.status is Status.INCONCLUSIVE and record.counts.ran > 0

    def other_library(self, cell: Cell, check: Check, record: EvidenceRecord) -> str:
        """Why a run check's record does not stand for the cell's current build, by the
        report's own rule (`bind_to_build`): it ran against another library than the one
        the cell's build record names, or names none; "" when it stands or the build record
        names no library to compare with."""
        if not check.needs_run:
            return ""
        build_check = next((c for c in cell.checks if c.kind is CheckKind.BUILD), None)
        build = self.facts.evidence.get((cell.id, build_check.id)) if build_check is not None else None
        built = build.record.library(cell.id) if build is not None else None
        if built is None:
            return ""
        standing = BuildStanding(state=GridState.VERIFIED, library_sha256=built.sha256, library=built.name)
        bound = bind_to_build(record, cell, standing)
        return "" if bound is None else bound[1]

    # -- steps

    def skip_unavailable(self, cell: Cell, check: Check, can: Capability) -> None:
        """A check this host will not run, in the state the report gives it without evidence."""
        state, why = unavailable_state(cell, check, PlatformCapability.of(can), self.matrix.device_gated)
        self.steps.append(Skip(cell=cell.ref, check=check.id, state=state, reason=why))

    def skip_all(
        self,
        cells: Iterable[Cell],
        can: Capability,
        *,
        records_kind: CheckKind | None = None,
        reason: str | None = None,
    ) -> None:
        for cell in cells:
            for check in cell.checks:
                if not self._wanted(check):
                    continue
                if reason is not None and (records_kind is None or check.kind is records_kind):
                    self.steps.append(self.not_started(cell, check, reason))
                    continue
                self.skip_unavailable(cell, check, can)

    def not_started(self, cell: Cell, check: Check, reason: str) -> Keep | Skip:
        """A check this verify does not start (a slow build nobody named): that is no word
        on its evidence. Fresh passing evidence, from the session that did build it, is
        kept; a failure of the current inputs stands, not written over; only without
        either is a skip recorded, so the report says why nothing ran."""
        commit = self.baseline_for(cell, check)
        if check.needs_run:
            verdict = self.verdict(cell, check, commit, artifacts=check.kind in IDENTITY_KINDS, rerun=False)
        else:
            verdict, _ = self.inspection_verdict(cell, check, commit, rerun=False)
        if isinstance(verdict, Keep):
            return replace(verdict, reason=f"{verdict.reason}; {reason}")
        known = self.facts.evidence.get((cell.id, check.id))
        current = fingerprint_for(cell, check, self.facts.hashes, commit)
        record = known.record if known is not None else None
        verdicts = (Status.FAILED, Status.ERROR, Status.INCONCLUSIVE)
        if record is not None and record.fingerprint.key == current.key and record.status in verdicts:
            return Skip(
                cell=cell.ref,
                check=check.id,
                state=GridState.NOT_RUN,
                reason=f"{reason}; its last run's evidence ({record.status.value}) stands",
            )
        # The same skip of the same inputs is on record already: writing it again would
        # change nothing but the files (and make a no-change verify render the report again).
        same = (
            record is not None
            and record.fingerprint.key == current.key
            and record.status is Status.SKIPPED
            and record.reason == reason
        )
        return Skip(cell=cell.ref, check=check.id, state=GridState.NOT_RUN, reason=reason, records=not same)

    def baseline_for(self, cell: Cell, check: Check) -> str:
        """What the check's fingerprint compares with: the perf identity, the baseline
        commit, or nothing."""
        if check.kind is CheckKind.PERF:
            return self.perf_identity_of(check, self.facts.capabilities[cell.platform.id])
        return (self.selection.baseline_commit or "") if compares_with_baseline(cell, check) else ""

    def plan_platform(self, platform: Platform) -> None:
        matrix, selection = self.matrix, self.selection
        can = self.facts.capabilities[platform.id]
        subjects = [
            c for c in matrix.cells_of(platform.id) if selection.cells is None or c.ref in selection.cells
        ]
        if not can.can_build:
            self.notes.append(f"{platform.id}: not buildable here — {can.build_reason}")
            self.skip_all(subjects, can)
            return
        if platform.slow_build and selection.cells is None and platform.named_only:
            reason = (
                f"a slow platform verified only when named: `nox -s verify -- --platform {platform.id}` "
                "builds it (once) and runs its checks"
            )
            self.notes.append(f"{platform.id}: {reason}")
            self.skip_all(subjects, can, records_kind=CheckKind.BUILD, reason=reason)
            return
        if (
            platform.slow_build
            and selection.cells is None
            and (platform.id, "none") not in self.facts.cached_llama
        ):
            reason = (
                f"slow build not started by verify: run `nox -s build-{platform.id}` once, then verify again"
            )
            self.notes.append(f"{platform.id}: {reason}")
            # Its build checks say so in evidence; the rest are judged as the host allows.
            self.skip_all(subjects, can, records_kind=CheckKind.BUILD, reason=reason)
            return
        active: list[Cell] = []
        for cell in subjects:
            variant = cell.variant
            # A slow-build variant (ASan llama.cpp) runs only when named, cached or not: what
            # a plain verify does, and costs, never depends on what the cache happens to hold.
            if variant is not None and variant.slow_build and selection.cells is None:
                reason = (
                    f"a slow build variant (llama.cpp with {variant.sanitize_option}): verify runs it "
                    f"when named, `nox -s verify -- --cell {cell.id}` (the slow test tier does)"
                )
                self.notes.append(f"{cell.id}: {reason}")
                self.skip_all([cell], can, reason=reason)
                continue
            active.append(cell)
        reference = matrix.reference_cell(platform.id)
        for cell in active:
            self.plan_inspections(cell, reference)
        runtime = [(c, k) for c in active for k in c.checks if k.needs_run and self._wanted(k)]
        if not runtime:
            return
        if can.device_error:
            self.notes.append(f"{platform.id}: run-time checks not run: {can.run_reason}")
        elif not (can.can_run or can.can_run_fallback):
            self.notes.append(f"{platform.id}: run-time checks not run here ({can.run_reason})")
        elif can.device:
            self.notes.append(f"{platform.id}: checks run as target binaries on {can.run_reason}")
        elif can.emulated:
            self.notes.append(f"{platform.id}: checks run as target binaries, {can.runner_words}")
        elif not can.can_run:
            how = can.how_it_runs(device_free=True)
            self.notes.append(
                f"{platform.id}: {can.run_reason}; device-free checks run on the {how} "
                f"({can.fallback_reason})"
            )
        # a platform's group on one bundle: another bundle's checks neither keep nor rerun it
        groups: dict[tuple[str, str], list[tuple[Cell, Check]]] = {}
        for cell, check in runtime:
            if can.device_error:
                # The declared device is unreachable: fresh evidence from it stands (its
                # reachability is no input of the fingerprint); the rest cannot run now.
                verdict = self.verdict(cell, check, artifacts=check.kind in IDENTITY_KINDS)
                self.steps.append(
                    verdict
                    if isinstance(verdict, Keep)
                    else Skip(
                        cell=cell.ref,
                        check=check.id,
                        state=GridState.NOT_RUNNABLE_HERE,
                        reason=can.run_reason,
                    )
                )
                continue
            if not can.can_run_check(check.device_free):
                self.skip_unavailable(cell, check, can)
                continue
            blocked = {**self.facts.check_blockers, **bundle_blockers([check], self.matrix.bundles, can)}
            if check.id in blocked:
                why = blocked[check.id]
                self.steps.append(
                    Skip(cell=cell.ref, check=check.id, state=GridState.NOT_RUNNABLE_HERE, reason=why)
                )
                continue
            if can.as_target and check.kind in LOADED_BY_THE_HOST:
                if can.device:
                    why = (
                        f"{check.id} loads the library into a program of this host; the platform's "
                        f"checks run on {can.device}"
                    )
                else:
                    emulator = can.runner_words.removeprefix("emulated: ")
                    why = (
                        f"{check.id} loads the library into a program of this host, which cannot run "
                        f"{platform.arch} code (its binaries run only under {emulator})"
                    )
                self.steps.append(
                    Skip(cell=cell.ref, check=check.id, state=GridState.NOT_RUNNABLE_HERE, reason=why)
                )
                continue
            if check.kind in IDENTITY_KINDS and not selection.bench:
                self.steps.append(
                    Skip(cell=cell.ref, check=check.id, state=GridState.NOT_RUN, reason="--no-bench")
                )
                continue
            if check.kind is CheckKind.PERF:
                blocker = self.perf_blocker(can, check)
                if blocker is not None:
                    state, reason, records = blocker
                    self.steps.append(
                        Skip(cell=cell.ref, check=check.id, state=state, reason=reason, records=records)
                    )
                    continue
            if check.kind is CheckKind.BYTE_IDENTITY_BASELINE and selection.baseline_commit is None:
                why = (
                    selection.no_baseline_reason or "no baseline declared (baseline: in matrix.yaml) or given"
                )
                self.steps.append(
                    Skip(cell=cell.ref, check=check.id, state=GridState.NOT_RUN, reason=why, records=True)
                )
                continue
            group = PLATFORM_GROUPS.get(check.kind)
            if group is None:
                self.plan_runtime([(cell, check)], can, reference, artifacts=False)
            else:
                groups.setdefault((group, check.bundle), []).append((cell, check))
        for (group, _), members in groups.items():
            self.plan_runtime(members, can, reference, artifacts=group == "bench", group=group)

    # -- perf

    def perf_reference(self) -> str:
        """The perf check's reference: a commit, "library:<sha256>", or "" when there is none."""
        selection = self.selection
        if selection.perf_reference_library:
            return f"library:{selection.perf_reference_library}"
        return selection.perf_reference_commit or selection.baseline_commit or ""

    def perf_identity_of(self, check: Check, can: Capability) -> str:
        rounds = self.selection.perf_rounds or check.rounds
        if check.subject == "backend":
            return perf_identity(BACKEND_PERF_REFERENCE, rounds)
        return perf_identity(self.perf_reference(), rounds, simulated_identity(check, can.simulator))

    def perf_blocker(self, can: Capability, check: Check) -> tuple[GridState, str, bool] | None:
        """Why the perf check does not run here: timed under an emulator, --no-bench, or no
        reference to compare with (recorded, so the report says which)."""
        if can.emulated:
            return (
                GridState.NOT_RUNNABLE_HERE,
                (
                    f"timings under an emulator ({can.runner_words.removeprefix('emulated: ')}) say nothing "
                    "of the target: perf runs natively only"
                ),
                False,
            )
        if not self.selection.bench:
            return GridState.NOT_RUN, "--no-bench", False
        if check.subject == "backend":  # its reference is the same library's llama.cpp path
            return None
        if not self.perf_reference():
            why = (
                self.selection.no_baseline_reason
                or "no baseline declared (baseline: in matrix.yaml) or given"
            )
            return GridState.NOT_RUN, f"no reference library: {why} (or --perf-reference REF|DIR)", True
        return None

    def inspection_verdict(
        self,
        cell: Cell,
        check: Check,
        commit: str,
        *,
        reference: Cell | None = None,
        rerun: bool | None = None,
    ) -> tuple[Keep | str, tuple[CellId, ...]]:
        """A build or abi check's verdict, and the other cells it compares with: its
        evidence stands only if it made the comparisons a run now would make."""
        if reference is None:
            reference = self.matrix.reference_cell(cell.platform.id)
        fallback = cpu_fallback_reference(self.matrix, cell.platform, self.facts)
        verdict = self.verdict(cell, check, commit, artifacts=True, rerun=rerun)
        needs: tuple[CellId, ...] = ()
        known = self.facts.evidence.get((cell.id, check.id))
        details = known.record.details if known is not None else {}
        if check.kind is CheckKind.ABI and cell.gates and reference is not None:
            needs = (reference.ref,)
            if isinstance(verdict, Keep) and not details.get("compared_with_no_gate"):
                verdict = "made by a narrower build, without the no-gate cell to compare with"
        if check.kind is CheckKind.BUILD and fallback is not None:
            needs = (fallback.ref,)
            names = [str(s.get("name", "")) for s in details.get("subchecks", []) if isinstance(s, dict)]
            if isinstance(verdict, Keep) and not any(n.startswith("without a GPU") for n in names):
                verdict = "made without the CPU-fallback comparison"
        return verdict, needs

    def plan_inspections(self, cell: Cell, reference: Cell | None) -> None:
        """build and abi: they inspect what was built and stand while its bytes do."""
        for check in cell.checks:
            if check.needs_run or not self._wanted(check):
                continue
            commit = self.baseline_for(cell, check)
            verdict, needs = self.inspection_verdict(cell, check, commit, reference=reference)
            if isinstance(verdict, Keep):
                self.steps.append(verdict)
            else:
                self.steps.append(
                    Run(
                        cell=cell.ref,
                        check=check.id,
                        kind=check.kind,
                        reason=verdict,
                        needs=needs,
                        baseline_commit=commit,
                    )
                )

    def plan_runtime(
        self,
        members: Sequence[tuple[Cell, Check]],
        can: Capability,
        reference: Cell | None,
        *,
        artifacts: bool,
        group: str = "",
    ) -> None:
        commit = self.selection.baseline_commit or ""

        def builds_commit(cell: Cell, check: Check) -> str:
            if check.kind is CheckKind.PERF:
                reference = self.perf_reference()
                no_build = check.subject == "backend" or reference.startswith("library:")
                return "" if no_build else reference
            return commit if compares_with_baseline(cell, check) else ""

        verdicts = [self.verdict(c, k, self.baseline_for(c, k), artifacts=artifacts) for c, k in members]
        stale = [v for v in verdicts if not isinstance(v, Keep)]
        for (cell, check), verdict in zip(members, verdicts, strict=True):
            if not stale and isinstance(verdict, Keep):
                self.steps.append(verdict)
                continue
            reason = verdict if isinstance(verdict, str) else f"its platform's {group} runs again: {stale[0]}"
            self.steps.append(
                Run(
                    cell=cell.ref,
                    check=check.id,
                    kind=check.kind,
                    reason=reason,
                    how=can.how_it_runs(check.device_free),
                    needs=self._runtime_needs(cell, check, reference, group),
                    baseline_commit=builds_commit(cell, check),
                    simulator=can.simulator if check.simulated is not None else "",
                    simulator_reason=can.simulator_reason if check.simulated is not None else "",
                    alone=measures_wall_time(check, can),
                )
            )

    def _runtime_needs(
        self, cell: Cell, check: Check, reference: Cell | None, group: str
    ) -> tuple[CellId, ...]:
        needs: list[CellId] = []
        if reference is not None and reference.ref != cell.ref and group:
            needs.append(reference.ref)  # the gates' comparisons, the overhead run
        if check.kind is CheckKind.CROSS_ARCH_AGREEMENT and cell.platform.agreement is not None:
            other = self.matrix.reference_cell(cell.platform.agreement.reference)
            if other is not None:
                needs.append(other.ref)
        return tuple(needs)

    # -- builds

    def builds(self) -> list[Build]:
        """The libraries the Run steps need, each once, subjects first; a library whose
        build evidence is kept is already here and needs no build (build_all aside)."""

        def library_stands(ref: CellId) -> bool:
            cell = self.matrix.cell(ref)
            check = cell.check_of(CheckKind.BUILD)
            return check is not None and isinstance(self.verdict(cell, check, artifacts=True), Keep)

        roles: dict[CellId, tuple[BuildRole, str]] = {}
        baselines: dict[str, tuple[CellId, str]] = {}
        if self.selection.build_all:
            for cell in self.matrix.cells:
                if self.selection.cells is None or cell.ref in self.selection.cells:
                    roles[cell.ref] = (BuildRole.SUBJECT, "asked for")
        for run in (s for s in self.steps if isinstance(s, Run)):
            roles.setdefault(run.cell, (BuildRole.SUBJECT, f"{run.check} runs on it"))
        for run in (s for s in self.steps if isinstance(s, Run)):
            for other in run.needs:
                role = (
                    BuildRole.CPU_FALLBACK_REFERENCE if run.kind is CheckKind.BUILD else BuildRole.REFERENCE
                )
                roles.setdefault(other, (role, f"{run.cell} {run.check} compares with it"))
            if run.baseline_commit:
                ref = self.matrix.reference_cell(run.cell.platform)
                if ref is not None:
                    baselines.setdefault(
                        run.baseline_commit, (ref.ref, f"{run.cell} {run.check} compares with it")
                    )
        order = {c.ref: i for i, c in enumerate(self.matrix.cells)}
        out = [
            Build(cell=cell, role=role, reason=why)
            for cell, (role, why) in sorted(roles.items(), key=lambda kv: order.get(kv[0], 0))
            if self.selection.build_all or not library_stands(cell)
        ]
        out += [
            Build(cell=cell, role=BuildRole.BASELINE, reason=why, commit=commit)
            for commit, (cell, why) in baselines.items()
        ]
        return out


def plan(matrix: Matrix, facts: PlanFacts, selection: Selection) -> VerifyPlan:
    """Every decision of a verify, made from facts passed in."""
    planner = _Planner(matrix, facts, selection)
    benched = selection.bench and (
        selection.kinds is None or CheckKind.BYTE_IDENTITY_BASELINE in selection.kinds
    )
    if selection.baseline_commit is None and selection.no_baseline_reason and benched:
        planner.notes.append(f"byte-identity-baseline not run: {selection.no_baseline_reason}")
    wanted = {c.platform for c in selection.cells} if selection.cells is not None else None
    for platform in matrix.platforms:
        if wanted is not None and platform.id not in wanted:
            continue
        planner.plan_platform(platform)
    builds = planner.builds()
    return VerifyPlan(steps=(*builds, *planner.steps), notes=tuple(planner.notes))
