"""Carries out a VerifyPlan: builds each planned cell once, hands every check runner the
libraries its steps need, and records each outcome. It decides nothing the plan has not
decided; the loop that turns a runner's failure into error evidence is written once here,
for every check kind.

Runner calls go side by side, up to `jobs` at once (most checks are one process on one
core), started longest first by what each took the last time (eliza.core.call_order; plan
order for calls never timed). A step the plan marks `alone` measures wall time: its runner
measures inside `Job.alone()`, which gives up its place to the next call, waits until no
call is running, and lets none start or resume until the measurement is over; the rest of
its work (identity runs, the simulated CPU) shares the machine. A measurement repeated apart
from its first (a perf failure's second window) waits in `Job.apart(gap)`, its place given
to the calls waiting for one meanwhile. Outcomes are recorded, and
their lines printed, by this thread in plan order whatever finishes first, so the output
and the evidence do not depend on the number of jobs."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from eliza.adapters.cpu_wake import cpus_kept_awake
from eliza.adapters.targets import LocalTarget, Target, with_sysroot_overlay
from eliza.app.checks import RUNNERS
from eliza.app.checks.job import Job, at_once
from eliza.app.errors import NotHere
from eliza.app.services.bench_options import BenchOptions, on_bundle, on_software_device
from eliza.app.services.built import BuiltCell
from eliza.app.services.clock import Stopwatch, now
from eliza.app.services.run import RUN_ERRORS, Run
from eliza.core.call_order import start_order
from eliza.core.cell_id import CellId
from eliza.core.evidence import Status
from eliza.core.host import Capability
from eliza.core.matrix import Cell, CheckKind, Matrix
from eliza.core.outcome import CheckOutcome, outcome, skipped
from eliza.core.target import TargetRunner
from eliza.core.timings import Timings
from eliza.core.verify_plan import PLATFORM_GROUPS, BuildRole, VerifyPlan
from eliza.core.verify_plan import Run as RunStep


class Builder(Protocol):
    """Where libraries come from: a Conan build here, or a CI build job's artifact."""

    def build(self, cell: Cell) -> BuiltCell: ...

    def locate(self, cell: Cell) -> Path:
        """The library of a cell whose build evidence stands (nothing is built)."""
        ...

    def baseline(self, commit: str, cell: Cell) -> Path: ...


@dataclass(kw_only=True)
class Execution:
    """What a plan's execution did, counted from the plan and the outcomes (never from log
    text)."""

    plan: VerifyPlan
    written: list[CheckOutcome] = field(default_factory=list)
    built: dict[CellId, BuiltCell] = field(default_factory=dict)
    libraries: dict[CellId, Path] = field(default_factory=dict)
    build_failures: dict[CellId, str] = field(default_factory=dict)
    timings: Timings = field(default_factory=Timings)  # builds and checks, for the table
    # each runner call's shareable seconds (its work less its windows alone), by call_key
    call_seconds: dict[str, float] = field(default_factory=dict)
    # held while a runner call's libraries and target are prepared (they fill shared maps)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def failed(self) -> list[CheckOutcome]:
        return [o for o in self.written if o.status in (Status.FAILED, Status.ERROR)]

    def summary(self) -> str:
        states = Counter(o.status.value for o in self.written)
        ran = len(self.plan.runs)
        parts = [f"{n} {s}" for s, n in sorted(states.items())]
        return (
            f"{ran} check(s) ran, {len(self.plan.kept)} kept (fresh), {len(self.plan.skips)} skipped; "
            f"{len(self.written)} record(s) written" + (f" ({', '.join(parts)})" if parts else "")
        )


# BUILD_ERRORS are tool errors too (RUN_ERRORS); NotHere: a reference of a platform this
# host cannot build, which becomes error evidence of the steps that needed it.
BUILD_FAILURES: tuple[type[BaseException], ...] = (*RUN_ERRORS, NotHere)


def _errors(steps: Sequence[RunStep], reason: str) -> list[CheckOutcome]:
    span = Stopwatch().span()
    return [
        outcome(str(s.cell), s.check, ran=0, passed=0, span=span, reason=reason, error=True) for s in steps
    ]


class Quiet:
    """Lets up to `jobs` runner calls share the machine, in the order they were submitted,
    except while one of them measures wall time: `alone()`, entered from within a call,
    gives up the call's place, waits until no call is running, and no call starts or resumes
    until it is over. A measurement does not hold new calls back: they keep the cores busy,
    and it runs when the running ones leave it the host (at the latest, when the rest is
    done)."""

    def __init__(
        self,
        jobs: int,
        awake: Callable[[], AbstractContextManager[str]] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """`awake`: held through each window (the idle CPUs kept awake: eliza.adapters.cpu_wake),
        yielding what held in words; `sleep`: how apart() waits out its gap."""
        self._awake = awake or (lambda: nullcontext("not asked"))
        self._sleep = sleep
        self.cpus = ""  # what the windows held of the CPUs' idle states, in words
        self._changed = threading.Condition()
        self._jobs = jobs
        self._running = 0  # calls sharing the machine now, at most jobs
        self._alone = False
        self._tickets = 0  # calls submitted
        self._serving = 0  # the next ticket allowed to start
        self._waited = threading.local()  # this thread's call: seconds spent waiting
        self.windows: list[tuple[str, float]] = []  # each alone() window: its call's label, seconds

    def ticket(self) -> int:
        """A call's place in line, taken when it is submitted."""
        with self._changed:
            self._tickets += 1
            return self._tickets - 1

    def waited(self) -> float:
        """Seconds the current thread's call has waited on others (not its own work)."""
        return float(getattr(self._waited, "seconds", 0.0))

    def alone_here(self) -> float:
        """Seconds the current thread's call has measured alone."""
        return float(getattr(self._waited, "alone", 0.0))

    def _wait(self, ready: Callable[[], bool]) -> None:
        watch = Stopwatch()
        self._changed.wait_for(ready)
        self._waited.seconds = self.waited() + watch.seconds()

    def _free(self) -> bool:
        return not self._alone and self._running < self._jobs

    @contextmanager
    def call(self, ticket: int, label: str = "") -> Iterator[None]:
        """A runner call: it shares the machine with up to jobs - 1 others."""
        self._waited.label = label
        with self._changed:
            self._changed.wait_for(lambda: self._serving == ticket and self._free())
            self._serving += 1
            self._running += 1
            self._changed.notify_all()
        self._waited.seconds = 0.0  # from its start: what it waits on inside it
        self._waited.alone = 0.0
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    @contextmanager
    def alone(self) -> Iterator[None]:
        """Within a call: nothing else runs until the block ends."""
        with self._changed:
            self._running -= 1
            self._changed.notify_all()
            self._wait(lambda: not self._alone and self._running == 0)
            self._alone = True
        watch = Stopwatch()
        try:
            with self._awake() as held:
                self.cpus = self.cpus or held
                yield
        finally:
            with self._changed:
                self.windows.append((str(getattr(self._waited, "label", "")), watch.seconds()))
                self._waited.alone = self.alone_here() + watch.seconds()
                self._alone = False
                self._changed.notify_all()
                self._wait(self._free)
                self._running += 1

    @contextmanager
    def apart(self, gap: float) -> Iterator[None]:
        """Within a call: give up its place for `gap` seconds, then take one again. A
        measurement repeated apart from its first window (a spell of the host's can last a
        minute) waits here, and the calls waiting for a place run meanwhile, so the machine
        is idle only if nothing else is left to run. It waits on no other call to end: a
        call that holds a lab device's turn may wait here."""
        with self._changed:
            self._running -= 1
            self._changed.notify_all()
        self._sleep(gap)
        with self._changed:
            self._wait(self._free)
            self._running += 1
        self._waited.seconds = self.waited() + gap
        yield


def call_key(key: tuple[str, str, str]) -> str:
    """A runner call's name from one verify to the next (its group key in words)."""
    return "/".join(key)


def _group_key(step: RunStep, matrix: Matrix) -> tuple[str, str, str]:
    """Steps one runner call serves: a platform's group on one bundle, or one cell's check."""
    group = PLATFORM_GROUPS.get(step.kind)
    bundle = matrix.check(step.check).bundle
    return (step.cell.platform, group, bundle) if group else (str(step.cell), step.check, bundle)


def execute(
    plan: VerifyPlan,
    run: Run,
    builder: Builder,
    capabilities: Mapping[str, Capability],
    *,
    bench: BenchOptions | None = None,
    runners: Mapping[CheckKind, Callable[[Job, Run], list[CheckOutcome]]] = RUNNERS,
    describe_build: Callable[[BuiltCell], str] | None = None,
    devices: Mapping[str, Callable[[], Target]] | None = None,
    jobs: int = 1,
    last_seconds: Mapping[str, float] | None = None,
) -> Execution:
    """`devices`: platform id -> how to open the lab device its checks run on; `jobs`: runner
    calls at once (1: one after another); `last_seconds`: each call's shareable seconds the
    last time (Execution.call_seconds, by call_key), which start the longest first
    (eliza.core.call_order)."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    matrix: Matrix = run.matrix
    done = Execution(plan=plan)
    at = now()
    written = run.record([skipped(str(s.cell), s.check, s.reason, at) for s in plan.skips if s.records])
    done.written += written

    baselines: dict[tuple[str, str], Path] = {}
    for step in plan.builds:
        cell = matrix.cell(step.cell)
        watch = Stopwatch()
        try:
            if step.role is BuildRole.BASELINE:
                baselines[(cell.platform.id, step.commit)] = builder.baseline(step.commit, cell)
                done.timings.add("builds", "the baseline's library", watch.seconds())
                continue
            built = builder.build(cell)
        # BUILD_ERRORS are tool errors too; NotHere: a reference of a platform this host
        # cannot build, which becomes error evidence of the steps that needed it.
        except BUILD_FAILURES as exc:
            if step.role is BuildRole.BASELINE:
                # The baseline check says so itself (the runner finds no library for it).
                run.log(f"baseline {step.commit[:12]}: build failed: {str(exc)[-2000:]}")
                continue
            run.log(f"{step.cell}: build failed: {str(exc)[-2000:]}")
            done.build_failures[step.cell] = str(exc)[-1500:]
            continue
        done.built[step.cell] = built
        done.libraries[step.cell] = built.library
        if built.llama_seconds:
            done.timings.add("builds", f"llama.cpp {cell.platform.id}", built.llama_seconds)
        done.timings.add("builds", "the library", watch.seconds() - built.llama_seconds)
        if describe_build is not None:
            run.log(describe_build(built))

    groups: dict[tuple[str, str, str], list[RunStep]] = {}
    for run_step in plan.runs:
        groups.setdefault(_group_key(run_step, matrix), []).append(run_step)
    quiet = Quiet(jobs, awake=cpus_kept_awake)
    # A lab device runs one call at a time: its run directory is one per checkout.
    on_device = {p for p, can in capabilities.items() if can.device and p in (devices or {})}
    device_turns = {p: threading.Lock() for p in on_device}

    def call(
        steps: list[RunStep], ticket: int
    ) -> tuple[list[CheckOutcome], Mapping[CellId, Path], float, float]:
        """A runner call's outcomes, libraries, working seconds (its waits on others' wall
        time measurements left out) and the seconds of them it measured alone."""
        platform = steps[0].cell.platform
        turn = device_turns.get(platform, nullcontext())
        label = f"{_timing_label(steps[0], _group_key(steps[0], matrix)[2], matrix)} {steps[0].cell}"
        with turn, quiet.call(ticket, label):
            watch = Stopwatch()
            outcomes, libraries = _run_group(
                steps, run, builder, capabilities, done, baselines, bench, runners, devices or {}, quiet
            )
            return outcomes, libraries, watch.seconds() - quiet.waited(), quiet.alone_here()

    checks = Stopwatch()
    keys = {call_key(key): key for key in groups}
    # A thread per call (most of them wait): Quiet, not the pool, decides what runs, in
    # the order they are submitted: the longest first. Recorded in the plan's order.
    with ThreadPoolExecutor(max_workers=max(1, len(groups)), thread_name_prefix="check") as pool:
        started = {
            keys[name]: pool.submit(call, groups[keys[name]], quiet.ticket())
            for name in start_order(list(keys), last_seconds or {})
        }
        calls = [(key, steps, started[key]) for key, steps in groups.items()]
        for key, steps, pending in calls:
            outcomes, libraries, seconds, alone = pending.result()
            done.call_seconds[call_key(key)] = max(0.0, seconds - alone)
            done.timings.add("checks", _timing_label(steps[0], key[2], matrix), seconds)
            # Each record names the libraries its step read (its cell's and its references'):
            # the report counts it only while they are the ones its cell's build evidence names.
            judged = {
                (str(s.cell), s.check): {c: libraries[c] for c in (s.cell, *s.needs) if c in libraries}
                for s in steps
            }
            done.written += run.record(outcomes, judged)
    if calls:
        done.timings.wall("checks", checks.seconds(), jobs, checks.cpu_seconds())
        for label, seconds in quiet.windows:
            done.timings.alone(label, seconds)
        if quiet.windows:
            done.timings.alone_cpus = quiet.cpus
    if done.written:
        run.collect_artifacts()
    return done


def _timing_label(step: RunStep, bundle: str, matrix: Matrix) -> str:
    """A check kind (a platform group by its name), and the bundle when not the first."""
    label = "byte-identity" if PLATFORM_GROUPS.get(step.kind) == "bench" else step.kind.value
    return label if bundle == matrix.default_bundle.id else f"{label} ({bundle})"


def _library(cell_id: CellId, matrix: Matrix, builder: Builder, done: Execution) -> Path:
    if cell_id not in done.libraries:
        done.libraries[cell_id] = builder.locate(matrix.cell(cell_id))
    return done.libraries[cell_id]


def _run_group(
    steps: list[RunStep],
    run: Run,
    builder: Builder,
    capabilities: Mapping[str, Capability],
    done: Execution,
    baselines: Mapping[tuple[str, str], Path],
    bench: BenchOptions | None,
    runners: Mapping[CheckKind, Callable[[Job, Run], list[CheckOutcome]]],
    devices: Mapping[str, Callable[[], Target]],
    quiet: Quiet | None = None,
) -> tuple[list[CheckOutcome], Mapping[CellId, Path]]:
    """One runner call: the steps' libraries, then the runner; a library that failed to
    build, or a runner that broke, becomes error evidence for exactly these steps.
    Returns the outcomes and the libraries the runner was handed."""
    matrix = run.matrix
    platform = matrix.platform(steps[0].cell.platform)
    needed = list(dict.fromkeys([*(s.cell for s in steps), *(n for s in steps for n in s.needs)]))
    broken = [c for c in needed if c in done.build_failures]
    if broken:
        first = broken[0]
        if all(s.kind is CheckKind.BUILD for s in steps) and first == steps[0].cell:
            return _errors(steps, f"build failed: {done.build_failures[first]}"), {}
        return _errors(steps, f"not run: {first} failed to build: {done.build_failures[first][-600:]}"), {}
    try:
        with done.lock:
            libraries = {c: _library(c, matrix, builder, done) for c in needed}
    except RUN_ERRORS as exc:
        return _errors(steps, f"not run: a library it needs is not here: {str(exc)[-1500:]}"), {}
    can = capabilities[platform.id]
    bundle_id = matrix.check(steps[0].check).bundle
    if bundle_id != matrix.default_bundle.id:
        # The steps of one bundle: the runner sees that bundle, its prompts and its sizing.
        run = run.on_bundle(bundle_id)
        if bench is not None and run.prompts is not None:
            bench = on_bundle(bench, matrix.bundle(bundle_id), run.bundle, run.prompts)
    if bench is not None and can.software_device:
        bench = on_software_device(bench)
    if bench is not None and platform.llama_backend == "cpu" and not can.as_target:
        bench = replace(bench, side_by_side_cores=len(os.sched_getaffinity(0)))
    how = steps[0].how
    if how != "native":
        run.ran_on[platform.id] = how
    target: Target | None = None
    with done.lock:  # a device's connection, an emulator's sysroot overlay: made one at a time
        if can.device and platform.id in devices:
            target = devices[platform.id]()
        elif can.emulated:
            emulated_by = TargetRunner(prefix=can.runner, words=can.runner_words)
            overlays = run.project.build_root / "emulator-sysroots"
            target = LocalTarget(with_sysroot_overlay(emulated_by, overlays))
    job = Job(
        matrix=matrix,
        platform=platform,
        steps=tuple(steps),
        libraries=libraries,
        built={c: b for c, b in done.built.items() if c in libraries},
        baselines={commit: path for (pid, commit), path in baselines.items() if pid == platform.id},
        target=target,
        bench=bench,
        alone=quiet.alone if quiet is not None else nullcontext,
        apart=quiet.apart if quiet is not None else at_once,
    )
    runner = runners[steps[0].kind]
    try:
        outcomes = runner(job, run)
    except RUN_ERRORS as exc:
        run.log(f"{platform.id}: {steps[0].check} could not run: {exc}")
        return _errors(steps, f"{steps[0].check} could not run: {str(exc)[-1500:]}"), libraries
    finally:
        if target is not None:
            target.close()
    wanted = {(str(s.cell), s.check) for s in steps}
    return [o for o in outcomes if (o.cell, o.check) in wanted], libraries
