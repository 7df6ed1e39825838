"""The CI pipeline as data (pure, from the matrix and the declared runners).

Build once, check many: per platform one build job on a runner that can build it and is
not a device runner (it builds llama.cpp once and every cell, and hands the cells on as
an artifact); per cell one check job on the platform's own runner (its ci_runner), which
compiles nothing; one report job that merges every check job's evidence; on a push of a
version tag, one release job after the report that packages the cells. Whether a
runner can build or run a platform is decided by the same rules as on a real host
(eliza.core.host.decide), from what the runner is declared to offer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from eliza.core.host import _X86_64_LEVELS, HostFacts, Tool, VulkanDevice, decide
from eliza.core.matrix import Matrix, Platform, Requirement

REPORT_JOB = "report"
# The slow test tier (cold builds, reproducibility, the rehearsal, the sanitizer cell,
# fuzzing): nightly and on a manual run with slow_tier; its evidence joins the report.
SLOW_TIER_JOB = "slow-tier"
SLOW_TIER_COMMAND = "nox -s tests -- --tier slow"
SLOW_TIER_SCHEDULE = "0 3 * * *"
# What the generated steps call; the rehearsal recognises them by these words.
SETUP_COMMAND = "bash ci/setup.sh"
ARTIFACTS_DIR = "build/ci"  # where build jobs leave, and check/report jobs receive, the cells
# A push of the tag v<V> releases version <V> (`nox -s release`) into RELEASE_DIR/<V>/,
# comparing it with the report.json of the previous version tag's GitHub release.
RELEASE_JOB = "release"
RELEASE_TAG_PREFIX = "v"
RELEASE_DIR = "build/release"
PREVIOUS_RELEASE_DIR = "build/previous-release"


@dataclass(frozen=True, kw_only=True)
class Runner:
    """A CI runner as declared in templates/ci/runners.yaml."""

    labels: tuple[str, ...]
    description: str
    os: str
    arch: str
    x86_64_level: int = 0
    provides: frozenset[Requirement] = frozenset()
    device: bool = False  # runs checks only; never compiles
    self_hosted: bool = False
    # A lab file on the runner (docs/devices.md): its check jobs run their cells' checks on
    # the lab's devices (ELIZA_DEVICES), e.g. a phone on adb or a Mac over ssh.
    lab: str = ""

    @property
    def name(self) -> str:
        return "+".join(self.labels)

    def facts(self, platform: Platform | None = None) -> HostFacts:
        """The runner as a host, as far as decide() asks: a declared tool or device stands
        for one the host probe would find there (cross-compiler: the platform's cross
        compilers; arm64-cpu on another arch: the platform's emulator and its sysroot)."""
        programs: dict[str, Tool] = {}
        dirs: set[str] = set()
        declared = f"(declared for runner {self.name})"
        prefix = platform.toolchain.cross_prefix if platform else None
        if prefix and Requirement.CROSS_COMPILER in self.provides:
            names = (f"{prefix}{tool}" for tool in ("gcc", "g++", "nm"))
            programs |= {name: Tool(name=name, path=declared) for name in names}
        emulator = platform.emulator if platform else None
        if emulator and Requirement.ARM64_CPU in self.provides and self.arch != "arm64":
            programs[emulator.program] = Tool(name=emulator.program, path=declared)
            dirs |= {emulator.sysroot} if emulator.sysroot else set()

        def tool(req: Requirement, name: str) -> Tool | None:
            return (
                Tool(name=name, path=f"(declared for runner {self.name})") if req in self.provides else None
            )

        def device(req: Requirement) -> str | None:
            return f"declared for runner {self.name}" if req in self.provides else None

        missing = f"not declared for runner {self.name} in templates/ci/runners.yaml"
        flags = frozenset(f for level, needed in _X86_64_LEVELS if level <= self.x86_64_level for f in needed)
        return HostFacts(
            os=self.os,
            arch=self.arch,
            cpu_flags=flags,
            cpu_model=f"runner {self.name}",
            compiler=tool(Requirement.CXX_COMPILER, "c++"),
            conan=tool(Requirement.CONAN, "conan"),
            cmake=tool(Requirement.CMAKE, "cmake"),
            ninja=tool(Requirement.NINJA, "ninja"),
            nvcc=tool(Requirement.NVCC, "nvcc"),
            cublas_path=device(Requirement.CUBLAS),
            android_ndk=device(Requirement.ANDROID_NDK),
            xcode=tool(Requirement.XCODE, "Xcode"),
            nvidia_gpu=device(Requirement.NVIDIA_GPU),
            nvidia_gpu_reason=missing,
            android_device=device(Requirement.ANDROID_DEVICE),
            android_device_reason=missing,
            ios_device=device(Requirement.IOS_DEVICE),
            ios_device_reason=missing,
            vulkan_headers=device(Requirement.VULKAN_HEADERS),
            vulkan_headers_reason=missing,
            glslc=tool(Requirement.GLSLC, "glslc"),
            vulkan_devices=(
                (VulkanDevice(index=0, name=f"declared for runner {self.name}", driver="declared"),)
                if Requirement.VULKAN_DEVICE in self.provides
                else ()
            ),
            vulkan_device_reason=missing,
            programs=programs,
            existing_dirs=frozenset(dirs),
        )


class PipelineError(ValueError):
    """The matrix and the declared runners do not fit together (one line, naming both)."""


@dataclass(frozen=True, kw_only=True)
class BuildJob:
    id: str  # build-<platform>
    platform: str
    runs_on: tuple[str, ...]
    slow: bool

    @property
    def artifact(self) -> str:
        return f"cells-{self.platform}"


@dataclass(frozen=True, kw_only=True)
class CheckJob:
    id: str
    cell: str
    platform: str
    runs_on: tuple[str, ...]
    slow: bool
    needs: tuple[str, ...]  # build jobs whose cells it checks (its platform's, a CPU reference's)
    artifacts: tuple[str, ...]  # their artifacts
    lab: str = ""  # the runner's lab file: the checks run on its devices (ELIZA_DEVICES)

    @property
    def evidence_artifact(self) -> str:
        return f"evidence-{self.id}"


@dataclass(frozen=True, kw_only=True)
class ReleaseJob:
    """After the report, on a push of a version tag only: `nox -s release` packages the
    cells whose check jobs run on such a push (no slow platform's: those run on request
    only), of the default build variant (what ships; a sanitizer build does not)."""

    runs_on: tuple[str, ...]  # the report job's runner
    cells: tuple[str, ...]
    id: str = RELEASE_JOB
    needs: tuple[str, ...] = (REPORT_JOB,)
    tag_prefix: str = RELEASE_TAG_PREFIX

    @property
    def tag_pattern(self) -> str:
        """The push trigger's tag filter."""
        return f"{self.tag_prefix}*"

    @property
    def condition(self) -> str:
        """The job's `if:`. A tag push skips the slow tier and the slow platforms' jobs, and
        GitHub skips a job when any job before it (not only those it needs) was skipped,
        unless a status function is in its `if:`: so not `success()` but the report's own
        result."""
        needed = " && ".join(f"needs.{n}.result == 'success'" for n in self.needs)
        return (
            f"!cancelled() && github.event_name == 'push' && {needed} && "
            f"startsWith(github.ref, 'refs/tags/{self.tag_prefix}')"
        )


@dataclass(frozen=True, kw_only=True)
class Omitted:
    """A platform, or its checks, left out of the pipeline, and why."""

    platform: str
    what: str  # "all jobs" | "check jobs"
    reason: str

    def describe(self) -> str:
        return f"{self.platform}: no {self.what} in CI: {self.reason}"


@dataclass(frozen=True, kw_only=True)
class Pipeline:
    builds: tuple[BuildJob, ...]
    checks: tuple[CheckJob, ...]
    omitted: tuple[Omitted, ...]
    report_runs_on: tuple[str, ...]
    release: ReleaseJob | None = None  # None: no cell is checked on a tag push

    @property
    def report_needs(self) -> tuple[str, ...]:
        return (*(j.id for j in self.builds), *(j.id for j in self.checks), SLOW_TIER_JOB)

    @property
    def lab_checks(self) -> tuple[CheckJob, ...]:
        """The check jobs whose cells' checks run on a lab's devices."""
        return tuple(j for j in self.checks if j.lab)

    @property
    def slow_platforms(self) -> tuple[str, ...]:
        return tuple(sorted({j.platform for j in self.builds if j.slow}))

    def job_order(self) -> tuple[str, ...]:
        """Every job id in an order that respects `needs`: builds, checks, the report, the
        release."""
        return (*self.report_needs, REPORT_JOB, *((self.release.id,) if self.release else ()))

    def needs_of(self, job: str) -> tuple[str, ...]:
        if job == REPORT_JOB:
            return self.report_needs
        if self.release is not None and job == self.release.id:
            return self.release.needs
        check = next((c for c in self.checks if c.id == job), None)
        return check.needs if check is not None else ()


def job_id(cell_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", cell_id.replace("+", "-"))


def build_job_id(platform_id: str) -> str:
    return f"build-{job_id(platform_id)}"


def runner_for_labels(runners: Sequence[Runner], labels: Sequence[str]) -> Runner | None:
    return next((r for r in runners if set(r.labels) == set(labels)), None)


def build_runner(platform: Platform, runners: Sequence[Runner]) -> tuple[Runner | None, str]:
    """The first non-device runner that can build the platform, or None and why not."""
    reasons = []
    for runner in runners:
        if runner.device:
            continue
        can = decide(runner.facts(platform), platform)
        if can.can_build:
            return runner, can.build_reason
        reasons.append(f"{runner.name} {can.build_reason.split('; this host is')[0]}")
    return None, "no declared runner can build it (" + "; ".join(reasons) + ")"


def cpu_reference(matrix: Matrix, platform: Platform) -> Platform | None:
    """The CPU platform of the same OS and arch whose no-gate cell a CUDA cell's fallback
    check compares with (see eliza.app.sessions.verify.cpu_reference_for)."""
    if platform.llama_backend != "cuda":
        return None
    return next(
        (
            p
            for p in matrix.platforms
            if p.llama_backend == "cpu" and (p.os, p.arch) == (platform.os, platform.arch)
        ),
        None,
    )


def plan_pipeline(matrix: Matrix, runners: Sequence[Runner]) -> Pipeline:
    """The jobs of the matrix on these runners; PipelineError when a platform names a
    ci_runner that is not declared."""
    builds: dict[str, BuildJob] = {}
    omitted: list[Omitted] = []
    for platform in matrix.platforms:
        if runner_for_labels(runners, platform.ci_runner) is None:
            raise PipelineError(
                f"{matrix.source}: platform {platform.id}: ci_runner {list(platform.ci_runner)} is not "
                "declared in templates/ci/runners.yaml (declare it there with what it offers)"
            )
        runner, reason = build_runner(platform, runners)
        if runner is None:
            omitted.append(Omitted(platform=platform.id, what="jobs", reason=reason))
            continue
        builds[platform.id] = BuildJob(
            id=build_job_id(platform.id),
            platform=platform.id,
            runs_on=runner.labels,
            slow=platform.slow_build,
        )
    checks: list[CheckJob] = []
    for platform in matrix.platforms:
        build = builds.get(platform.id)
        if build is None:
            continue
        runner = runner_for_labels(runners, platform.ci_runner)
        assert runner is not None  # checked above
        can = decide(runner.facts(platform), platform)
        if not can.can_run:
            reason = f"its runner {runner.name} cannot run it: {can.run_reason.split('; this host is')[0]}"
            omitted.append(Omitted(platform=platform.id, what="check jobs", reason=reason))
            continue
        needed = [build]
        reference = cpu_reference(matrix, platform)
        if reference is not None and reference.id in builds:
            needed.append(builds[reference.id])
        for cell in matrix.cells_of(platform.id):
            checks.append(
                CheckJob(
                    id=job_id(cell.id),
                    cell=cell.id,
                    platform=platform.id,
                    runs_on=tuple(platform.ci_runner),
                    slow=platform.slow_build or any(b.slow for b in needed),
                    needs=tuple(b.id for b in needed),
                    artifacts=tuple(b.artifact for b in needed),
                    lab=runner.lab,
                )
            )
    report = next((p for p in matrix.platforms if not p.slow_build and p.id in builds), None)
    report_runs_on = builds[report.id].runs_on if report is not None else runners[0].labels
    shipped = tuple(j.cell for j in checks if not j.slow and matrix.cell(j.cell).variant is None)
    return Pipeline(
        builds=tuple(builds.values()),
        checks=tuple(checks),
        omitted=tuple(omitted),
        report_runs_on=report_runs_on,
        release=ReleaseJob(runs_on=report_runs_on, cells=shipped) if shipped else None,
    )


def custom_labels(runners: Sequence[Runner]) -> tuple[str, ...]:
    """Labels only self-hosted runners carry: actionlint must be told about them."""
    hosted = {label for r in runners if not r.self_hosted for label in r.labels}
    return tuple(sorted({label for r in runners if r.self_hosted for label in r.labels} - hosted))


_UNKNOWN_LABEL = re.compile(r'^label "([^"]+)" is unknown')


def unknown_label(message: str) -> str | None:
    """The label an actionlint "unknown label" finding is about, or None for other findings."""
    found = _UNKNOWN_LABEL.match(message)
    return found.group(1) if found else None
