"""The executor with fake runners and a fake builder: it builds each planned cell once,
hands runners the libraries their steps need, turns a failed build or a broken runner into
error evidence for exactly the steps it prevented, and counts from the plan. No compiler."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from eliza.adapters.errors import ToolError
from eliza.adapters.git import GitState
from eliza.app.checks.job import Job
from eliza.app.executor import execute
from eliza.app.project import Project
from eliza.app.services.built import BuiltCell
from eliza.app.services.run import Run
from eliza.core.cell_id import CellId
from eliza.core.evidence import HostInfo, Status
from eliza.core.host import decide
from eliza.core.matrix import Cell, CheckKind, Matrix
from eliza.core.outcome import CheckOutcome, Span, outcome
from eliza.core.verify_plan import PlanFacts, Selection, VerifyPlan, plan
from eliza.formats.evidence_json import read_records
from eliza.formats.files import sha256_file
from tests.signing import TEST_KEY
from tests.unit.test_verify_plan import BASELINE, HASHES, HOST, LINUX_CPU, evidence_for

CPU = frozenset(CellId.parse(c) for c in LINUX_CPU)


class FakeBuilder:
    def __init__(self, root: Path, broken: frozenset[str] = frozenset()) -> None:
        self.root = root
        self.broken = broken
        self.built: Counter[str] = Counter()
        self.located: Counter[str] = Counter()

    def library(self, cell: Cell) -> Path:
        path = self.root / cell.platform.id / cell.key / "libelizainference.so"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(cell.id.encode())
        return path

    def build(self, cell: Cell) -> BuiltCell:
        self.built[cell.id] += 1
        if cell.id in self.broken:
            raise ToolError(f"{cell.id}: conan build failed (log: conan-build.log)")
        return BuiltCell(
            cell_id=cell.id,
            library=self.library(cell),
            llama_built_now=False,
            llama_package=self.root,
            llama_package_id="0" * 40,
            seconds=0.1,
            log=self.root / "conan-build.log",
        )

    def locate(self, cell: Cell) -> Path:
        self.located[cell.id] += 1
        return self.library(cell)

    def baseline(self, commit: str, cell: Cell) -> Path:
        return self.library(cell)


class FakeRunners:
    """Every kind passes, and remembers what it was handed; `broken` kinds raise."""

    def __init__(self, broken: frozenset[CheckKind] = frozenset()) -> None:
        self.jobs: list[Job] = []
        self.broken = broken

    def __call__(self, job: Job, evidence: Run) -> list[CheckOutcome]:
        self.jobs.append(job)
        if job.steps[0].kind in self.broken:
            raise ToolError(f"{job.steps[0].check}: the tool crashed")
        span = Span(started=evidence_time(), finished=evidence_time())
        return [outcome(str(s.cell), s.check, ran=2, passed=2, span=span) for s in job.steps]

    def table(self) -> dict[CheckKind, FakeRunners]:
        return dict.fromkeys(CheckKind, self)


def evidence_time() -> object:
    from datetime import UTC, datetime

    return datetime(2026, 12, 1, tzinfo=UTC)


def evidence_run(matrix: Matrix, tmp_path: Path) -> Run:
    return Run(
        project=Project.from_environment({}, repo=tmp_path),
        matrix=matrix,
        log=lambda line: None,
        bundle=tmp_path / "bundle",
        hashes=HASHES,
        git=GitState(commit="c0ffee", dirty=False),
        host=HostInfo(os="linux", cpu="x86_64"),
        evidence_dir=tmp_path / "evidence",
        key=TEST_KEY,
    )


def cpu_plan(matrix: Matrix, **selection: object) -> VerifyPlan:
    caps = {p.id: decide(HOST, p) for p in matrix.platforms}
    facts = PlanFacts(capabilities=caps, hashes=HASHES, cached_llama=frozenset({("linux-cpu", "none")}))
    return plan(matrix, facts, Selection(cells=CPU, **selection))  # type: ignore[arg-type]


def run_plan(
    matrix: Matrix, tmp_path: Path, p: VerifyPlan, builder: FakeBuilder, runners: FakeRunners
) -> tuple[Run, object]:
    run = evidence_run(matrix, tmp_path)
    caps = {pl.id: decide(HOST, pl) for pl in matrix.platforms}
    done = execute(p, run, builder, caps, runners=runners.table())
    return run, done


def test_each_cell_is_built_once_and_runners_get_their_references(matrix: Matrix, tmp_path: Path) -> None:
    p = cpu_plan(matrix, baseline_commit=None)
    builder, runners = FakeBuilder(tmp_path / "b"), FakeRunners()
    _, done = run_plan(matrix, tmp_path, p, builder, runners)
    assert builder.built == Counter(dict.fromkeys(LINUX_CPU, 1))
    bench = [j for j in runners.jobs if any(s.kind is CheckKind.BYTE_IDENTITY_GATES for s in j.steps)]
    assert len(bench) == 1  # one call serves the platform's whole bench group
    assert CellId.parse("linux-cpu.none") in bench[0].libraries
    written = {
        (r.record.cell, r.record.check)
        for r in read_records([tmp_path / "evidence"], {TEST_KEY.id: TEST_KEY.public_raw})
        if r.record
    }
    planned = {(str(s.cell), s.check) for s in p.runs} | {
        (str(s.cell), s.check) for s in p.skips if s.records
    }
    assert written == planned
    assert done.summary().startswith(f"{len(p.runs)} check(s) ran, 0 kept")  # type: ignore[attr-defined]
    # Every record of a step that ran names, as a subject, the library its cell was built as.
    records = [r.record for r in read_records([tmp_path / "evidence"], {TEST_KEY.id: TEST_KEY.public_raw})]
    ran = {(str(s.cell), s.check) for s in p.runs}
    for record in records:
        assert record is not None
        if (record.cell, record.check) in ran:
            library = record.library(record.cell)
            expected = builder.library(matrix.cell(record.cell))
            assert library is not None and library.sha256 == sha256_file(expected), record.check


def test_a_failed_build_errors_its_checks_and_those_that_need_it(matrix: Matrix, tmp_path: Path) -> None:
    p = cpu_plan(matrix, baseline_commit=None)
    builder, runners = FakeBuilder(tmp_path / "b", broken=frozenset({"linux-cpu.none"})), FakeRunners()
    run, _ = run_plan(matrix, tmp_path, p, builder, runners)
    by_key = {(o.cell, o.check): o for o in run.written}
    own = by_key[("linux-cpu.none", "build")]
    assert own.status is Status.ERROR and own.reason.startswith(
        "build failed: linux-cpu.none: conan build failed"
    )
    needs = by_key[("linux-cpu.mlx", "abi")]  # compares with the no-gate cell
    assert needs.status is Status.ERROR and "linux-cpu.none failed to build" in needs.reason
    alone = by_key[("linux-cpu.mlx", "selector")]  # needs only its own library
    assert alone.status is Status.PASSED


def test_a_broken_runner_becomes_error_evidence_for_its_steps_only(matrix: Matrix, tmp_path: Path) -> None:
    p = cpu_plan(matrix, baseline_commit=None)
    runners = FakeRunners(broken=frozenset({CheckKind.SELECTOR}))
    run, _ = run_plan(matrix, tmp_path, p, FakeBuilder(tmp_path / "b"), runners)
    states = {(o.cell, o.check): o.status for o in run.written}
    assert {k for k, v in states.items() if v is Status.ERROR} == {(c, "selector") for c in LINUX_CPU}
    errored = next(o for o in run.written if o.check == "selector")
    assert "the tool crashed" in errored.reason


def test_kept_steps_run_nothing_and_a_kept_library_is_located(matrix: Matrix, tmp_path: Path) -> None:
    known = evidence_for(matrix, LINUX_CPU)
    del known[("linux-cpu.mlx", "selector")]
    caps = {pl.id: decide(HOST, pl) for pl in matrix.platforms}
    facts = PlanFacts(capabilities=caps, hashes=HASHES, evidence=known)
    p = plan(matrix, facts, Selection(cells=CPU, baseline_commit=BASELINE))
    builder, runners = FakeBuilder(tmp_path / "b"), FakeRunners()
    run, done = run_plan(matrix, tmp_path, p, builder, runners)
    assert [(o.cell, o.check) for o in run.written] == [("linux-cpu.mlx", "selector")]
    assert builder.built == Counter() and builder.located == Counter({"linux-cpu.mlx": 1})
    assert f"{len(p.kept)} kept" in done.summary()  # type: ignore[attr-defined]


@pytest.mark.parametrize("broken", [CheckKind.BUILD, CheckKind.ABI])
def test_outcomes_for_steps_not_asked_for_are_not_recorded(
    matrix: Matrix,
    tmp_path: Path,
    broken: CheckKind,
) -> None:
    class Chatty(FakeRunners):
        def __call__(self, job: Job, evidence: Run) -> list[CheckOutcome]:
            span = Span(started=evidence_time(), finished=evidence_time())
            extra = outcome("linux-cpu.none", "selector", ran=1, passed=0, span=span)
            return [*super().__call__(job, evidence), extra]

    p = cpu_plan(matrix, baseline_commit=None, kinds=frozenset({broken}))
    run, _ = run_plan(matrix, tmp_path, p, FakeBuilder(tmp_path / "b"), Chatty())
    assert {o.check for o in run.written} == {broken.value}


class OverlapRunners(FakeRunners):
    """Passes every step after a short wait, counting how many runner calls overlap; a step
    the plan marks `alone` measures inside Job.alone(), which records what ran beside it."""

    def __init__(self) -> None:
        super().__init__()
        import threading

        self.lock = threading.Lock()
        self.running: set[str] = set()
        self.measuring = False
        self.most = 0
        self.beside_alone: list[tuple[str, set[str]]] = []

    def __call__(self, job: Job, evidence: Run) -> list[CheckOutcome]:
        import time

        name = f"{job.steps[0].cell} {job.steps[0].check}"
        with self.lock:
            assert not self.measuring, f"{name} started while a measurement ran"
            self.running.add(name)
            self.most = max(self.most, len(self.running))
        time.sleep(0.01)
        if any(s.alone for s in job.steps):
            with self.lock:
                self.running.discard(name)  # from here it waits: it runs nothing
            with job.alone():
                with self.lock:
                    self.running.add(name)
                with self.lock:
                    self.measuring = True
                    self.beside_alone.append((name, self.running - {name}))
                time.sleep(0.02)
                with self.lock:
                    self.beside_alone.append((name, self.running - {name}))
                    self.measuring = False
                    self.running.discard(name)  # leaving: it may wait to share again
            with self.lock:
                self.running.add(name)
        with self.lock:
            self.running.discard(name)
        return super().__call__(job, evidence)


def test_jobs_run_side_by_side_with_the_same_evidence_and_lines_and_alone_steps_alone(
    matrix: Matrix, tmp_path: Path
) -> None:
    p = cpu_plan(matrix, baseline_commit=BASELINE)
    assert any(r.alone for r in p.runs) and any(not r.alone for r in p.runs)
    results = {}
    for jobs in (1, 4):
        runners = OverlapRunners()
        lines: list[str] = []
        run = evidence_run(matrix, tmp_path / f"jobs-{jobs}")
        run.log = lines.append
        caps = {pl.id: decide(HOST, pl) for pl in matrix.platforms}
        done = execute(
            p, run, FakeBuilder(tmp_path / f"lib-{jobs}"), caps, runners=runners.table(), jobs=jobs
        )
        records = read_records([run.evidence_dir], {})
        states = sorted((r.record.cell, r.record.check, r.record.status.value) for r in records if r.record)
        fingerprints = sorted(
            (r.record.cell, r.record.check, r.record.fingerprint.key) for r in records if r.record
        )
        results[jobs] = (states, fingerprints, [line for line in lines if line.startswith("  ")])
        assert runners.beside_alone and all(not beside for _, beside in runners.beside_alone)
        assert runners.most == 1 if jobs == 1 else runners.most > 1
        assert "checks" in done.timings.walls
        # every alone window is in the table, named by its check and cell, as long as it measured
        measured = {str(s.cell) for s in p.runs if s.alone}
        windows = done.timings.alone_windows
        assert len(windows) == len(runners.beside_alone) // 2
        assert {label.rsplit(" ", 1)[1] for label, _ in windows} <= measured
        assert all(seconds >= 0.02 for _, seconds in windows)
    assert results[1] == results[4]


class OrderRunners(OverlapRunners):
    """OverlapRunners that also remember the order the calls started in."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[str] = []

    def __call__(self, job: Job, evidence: Run) -> list[CheckOutcome]:
        with self.lock:
            self.started.append(f"{job.steps[0].cell} {job.steps[0].check}")
        return super().__call__(job, evidence)


def test_the_call_that_took_longest_last_time_starts_first_and_the_output_keeps_the_plans_order(
    matrix: Matrix, tmp_path: Path
) -> None:
    p = cpu_plan(matrix, baseline_commit=BASELINE)
    caps = {pl.id: decide(HOST, pl) for pl in matrix.platforms}
    seen = {}
    for attempt, last in (("first", None), ("again", "longest")):
        runners = OrderRunners()
        lines: list[str] = []
        run = evidence_run(matrix, tmp_path / attempt)
        run.log = lines.append
        last_seconds = None
        if last is not None:
            # the plan's last call took longest last time; every other call a second
            last_seconds = {name: 1.0 for name in seen["first"][2]} | {seen["first"][2][-1]: 100.0}
        done = execute(
            p,
            run,
            FakeBuilder(tmp_path / f"lib-{attempt}"),
            caps,
            runners=runners.table(),
            jobs=1,
            last_seconds=last_seconds,
        )
        said = [line for line in lines if line.startswith("  ")]
        seen[attempt] = (runners.started, said, list(done.call_seconds))
        # what a call measured alone is not what it holds a core for
        windows = done.timings.alone_windows
        held = sum(sum(v) for (phase, _), v in done.timings.spans.items() if phase == "checks")
        assert windows and all(s >= 0 for s in done.call_seconds.values())
        assert sum(done.call_seconds.values()) <= held - sum(s for _, s in windows) + 1e-6
    first, again = seen["first"], seen["again"]
    assert again[0][0] == first[0][-1] and again[0][1:] == first[0][:-1]  # the longest first, then as planned
    assert again[1] == first[1]  # the lines (and the records) in the plan's order either way


def test_a_measurement_waits_until_nothing_runs_and_nothing_starts_beside_it() -> None:
    import threading
    import time

    from eliza.app.executor import Quiet

    quiet = Quiet(2)
    events: list[str] = []
    started = threading.Event()

    def shared(name: str, ticket: int, hold: float) -> None:
        with quiet.call(ticket):
            events.append(f"{name} start")
            started.set()
            time.sleep(hold)
            events.append(f"{name} end")

    def measuring(ticket: int) -> None:
        with quiet.call(ticket):
            events.append("m start")
            with quiet.alone():
                events.append("m alone")
                time.sleep(0.05)
                events.append("m shares again")
            events.append("m end")

    tickets = [quiet.ticket() for _ in range(4)]
    first = threading.Thread(target=shared, args=("a", tickets[0], 0.1))
    first.start()
    started.wait()
    lone = threading.Thread(target=measuring, args=(tickets[1],))
    lone.start()
    time.sleep(0.02)
    # The measurement waits for a; b takes the core the measurement left, and c waits for
    # a place (two at once).
    later = [
        threading.Thread(target=shared, args=(n, t, 0.1)) for n, t in (("b", tickets[2]), ("c", tickets[3]))
    ]
    for t in later:
        t.start()
    for t in (first, lone, *later):
        t.join()
    alone_at, back_at = events.index("m alone"), events.index("m shares again")
    for name in ("a", "b", "c"):  # nothing ran while m measured
        start, end = events.index(f"{name} start"), events.index(f"{name} end")
        assert end < alone_at or start > back_at, events
    assert events.index("a start") < events.index("m start") < events.index("b start"), events  # plan order


def test_zero_jobs_is_refused(matrix: Matrix, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        execute(VerifyPlan(steps=()), evidence_run(matrix, tmp_path), FakeBuilder(tmp_path), {}, jobs=0)


def test_each_measurement_holds_the_idle_cpus_awake_only_while_it_measures() -> None:
    """Quiet enters `awake` around each alone() block, and nowhere else; what it held is
    kept for the timing table."""
    from contextlib import contextmanager

    from eliza.app.executor import Quiet

    held: list[str] = []

    @contextmanager
    def awake():  # type: ignore[no-untyped-def]
        held.append("held")
        yield "kept awake"
        held.append("released")

    quiet = Quiet(2, awake=awake)
    assert quiet.cpus == ""
    with quiet.call(quiet.ticket()):
        assert held == []
        with quiet.alone():
            assert held == ["held"]
        assert held == ["held", "released"]
    assert quiet.cpus == "kept awake" and len(quiet.windows) == 1


def test_a_repeat_apart_gives_its_place_to_the_waiting_calls_for_its_gap() -> None:
    """apart() gives up the call's place for its gap: a call waiting for a place (two at
    once) starts meanwhile, and after the gap the repeat takes the first place free, without
    waiting for every other call to end (one may hold a lab device's turn)."""
    import threading

    from eliza.app.executor import Quiet

    slept: list[float] = []
    took_place = threading.Event()
    release = threading.Event()

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        took_place.wait(5)  # the gap: long enough for the waiting call to take the place

    quiet = Quiet(2, sleep=sleep)
    events: list[str] = []

    def shared(name: str, ticket: int) -> None:
        with quiet.call(ticket):
            events.append(f"{name} start")
            if name == "c":
                took_place.set()
            # b leaves once c has its place; c stays until r is done
            (took_place if name == "b" else release).wait(5)
            events.append(f"{name} end")

    def repeating(ticket: int) -> None:
        with quiet.call(ticket):
            events.append("r start")
            with quiet.apart(120.0):
                events.append("r again")
            events.append("r end")
            release.set()

    tickets = [quiet.ticket() for _ in range(3)]
    threads = [
        threading.Thread(target=repeating, args=(tickets[0],)),
        threading.Thread(target=shared, args=("b", tickets[1])),
        threading.Thread(target=shared, args=("c", tickets[2])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert slept == [120.0]
    # c had no place until r gave its up; r took b's when b ended, while c still ran
    assert events.index("c start") < events.index("r again") < events.index("c end"), events
    assert events.index("b end") < events.index("r again"), events
