"""What this machine can build and run, decided from facts gathered once.

Pure: HostFacts is filled in by eliza.adapters.host_probe (the only code that looks at the
machine) or by a test; decide() turns facts and a platform into a yes/no with the words
a release engineer needs (what is missing, what was found and where).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from eliza.core.lab import DeviceState
from eliza.core.matrix import SIMULATOR, Bundle, Check, Platform, Requirement

__all__ = [
    "Capability",
    "HostFacts",
    "Tool",
    "bundle_blockers",
    "check_blockers",
    "decide",
    "emulator_found",
    "simulated_cpu",
    "x86_64_level",
]

# /proc/cpuinfo flag names per x86-64 micro-architecture level (psABI). "abm" is how
# the kernel spells LZCNT; "pni" is SSE3.
_X86_64_LEVELS: tuple[tuple[int, frozenset[str]], ...] = (
    (2, frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"})),
    (3, frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"})),
    (4, frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"})),
)

# Which host OS can build for which target OS; a linux target of another arch also needs
# a cross compiler (toolchain.cross_prefix in the matrix).
_BUILD_HOSTS = {
    "linux": ("linux",),
    "android": ("linux", "macos"),
    "macos": ("macos",),
    "ios": ("macos",),
}

_XCODE_ELSEWHERE = "Xcode (macOS host)"


def x86_64_level(flags: Iterable[str]) -> int:
    """Highest x86-64 level (1-4) the CPU flags satisfy; each level includes the ones below."""
    have = set(flags)
    level = 1
    for candidate, needed in _X86_64_LEVELS:
        if not needed <= have:
            break
        level = candidate
    return level


@dataclass(frozen=True, kw_only=True)
class Tool:
    """A program found on this host."""

    name: str  # "g++", "cmake"
    path: str
    version: str | None = None  # as the tool reports it; None when it would not say

    def describe(self) -> str:
        return f"{self.name} {self.version}" if self.version else self.name


# Vulkan's VkPhysicalDeviceType, as vulkaninfo names it, in the words records use.
VULKAN_DEVICE_TYPES = {
    "PHYSICAL_DEVICE_TYPE_DISCRETE_GPU": "discrete-gpu",
    "PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU": "integrated-gpu",
    "PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU": "virtual-gpu",
    "PHYSICAL_DEVICE_TYPE_CPU": "cpu",
    "PHYSICAL_DEVICE_TYPE_OTHER": "other",
}


@dataclass(frozen=True, kw_only=True)
class VulkanDevice:
    """A Vulkan physical device, as the loader enumerates it."""

    index: int  # its place in the loader's enumeration: what GGML_VK_VISIBLE_DEVICES names
    name: str  # "llvmpipe (LLVM 15.0.6, 256 bits)"
    driver: str  # "llvmpipe"
    driver_info: str = ""  # "Mesa 22.3.6 (LLVM 15.0.6)"
    device_type: str = "other"  # a value of VULKAN_DEVICE_TYPES
    api_version: str = ""  # "1.3.230"

    @property
    def software(self) -> bool:
        """A device whose "GPU" is the CPU (Mesa's lavapipe, SwiftShader): it runs the
        shaders, and says nothing of a GPU's speed."""
        return self.device_type == "cpu"

    def describe(self) -> str:
        info = f" {self.driver_info}" if self.driver_info else ""
        api = f", Vulkan {self.api_version}" if self.api_version else ""
        kind = "a software device" if self.software else self.device_type
        return f"{self.name}, driver {self.driver}{info}{api}, {kind}"

    def as_dict(self) -> dict[str, object]:
        return {
            "index": self.index,
            "name": self.name,
            "driver": self.driver,
            "driver_info": self.driver_info,
            "device_type": self.device_type,
            "api_version": self.api_version,
            "software": self.software,
        }


def chosen_vulkan_device(devices: Iterable[VulkanDevice]) -> VulkanDevice | None:
    """The device the Vulkan cells run on: the first GPU, else the first software device."""
    found = list(devices)
    return next((d for d in found if not d.software), found[0] if found else None)


def vulkan_environment(device: VulkanDevice | None, threads: int | None = None) -> dict[str, str]:
    """What ggml's Vulkan backend is told to run on `device` (none: nothing); only a Vulkan
    build reads it. ggml hides CPU-type devices unless GGML_VK_VISIBLE_DEVICES names them,
    and it is pinned to one device either way. On a software device, as llama.cpp's own CI
    runs Mesa's: no fp16 arithmetic and no cooperative matrices (lavapipe's are emulated);
    and Mesa's threads are the process's share of the cores (`threads`), as its decode
    threads are, so that checks side by side do not oversubscribe them."""
    if device is None:
        return {}
    env = {"GGML_VK_VISIBLE_DEVICES": str(device.index)}
    if device.software:
        env |= {"GGML_VK_DISABLE_F16": "1", "GGML_VK_DISABLE_COOPMAT": "1"}
        if threads is not None:
            env["LP_NUM_THREADS"] = str(max(1, threads))
    return env


@dataclass(frozen=True, kw_only=True)
class HostFacts:
    """Everything decide() and evidence records need to know about a machine."""

    os: str  # "linux" | "macos" | "windows" | ...
    arch: str  # "x86_64" | "arm64"
    os_release: str = ""  # kernel / OS version, for evidence
    cpu_model: str | None = None
    cpu_count: int = 0
    cpu_flags: frozenset[str] = frozenset()  # /proc/cpuinfo flags (x86); empty where unknown
    compiler: Tool | None = None  # the C++ compiler CMake would pick (CXX, c++, g++, clang++)
    conan: Tool | None = None
    cmake: Tool | None = None
    ninja: Tool | None = None
    nvcc: Tool | None = None
    cuda_version: str | None = None  # toolkit release nvcc reports, e.g. "12.4"
    cublas_path: str | None = None  # a libcublas found on disk
    cublas_origin: str | None = None  # "cuda-toolkit" | "python-wheel": where cublas_path lies
    cublas_installable: bool = False  # NVIDIA's cuBLAS wheels can be installed with pip here
    android_ndk: str | None = None  # NDK root (has build/cmake/android.toolchain.cmake)
    android_ndk_clang: str | None = None  # the NDK's clang version, e.g. "17.0.2"
    xcode: Tool | None = None
    nvidia_gpu: str | None = None  # "NVIDIA H200, driver 550.54.15"
    nvidia_gpu_reason: str = ""  # why nvidia_gpu is None
    android_device: str | None = None  # serial of an attached device
    android_device_reason: str = ""
    ios_device: str | None = None  # UDID of an attached device
    ios_device_reason: str = ""
    vulkan_headers: str | None = None  # "1.3.239 at /usr/include/vulkan": headers and a loader to link
    vulkan_headers_reason: str = ""  # what is missing of them
    glslc: Tool | None = None
    vulkan_devices: tuple[VulkanDevice, ...] = ()
    vulkan_device_reason: str = ""  # why vulkan_devices is empty
    notes: tuple[str, ...] = field(default=())  # probe findings that are neither facts nor errors
    # Programs the matrix names (cross compilers, emulators), by name, where found on PATH.
    programs: Mapping[str, Tool] = field(default_factory=dict)
    # Directories the matrix names (an emulator's sysroot) that exist here.
    existing_dirs: frozenset[str] = frozenset()

    @property
    def x86_64_level(self) -> int:
        return x86_64_level(self.cpu_flags) if self.arch == "x86_64" else 0

    def describe(self) -> str:
        """ "linux/x86_64", the words reasons end with."""
        return f"{self.os}/{self.arch}"

    def as_dict(self) -> dict[str, object]:
        """JSON-ready facts for evidence records (flags sorted so records diff cleanly)."""

        def tool(t: Tool | None) -> dict[str, str | None] | None:
            return None if t is None else {"name": t.name, "path": t.path, "version": t.version}

        return {
            "os": self.os,
            "arch": self.arch,
            "os_release": self.os_release,
            "cpu_model": self.cpu_model,
            "cpu_count": self.cpu_count,
            "x86_64_level": self.x86_64_level,
            "cpu_flags": sorted(self.cpu_flags),
            "compiler": tool(self.compiler),
            "conan": tool(self.conan),
            "cmake": tool(self.cmake),
            "ninja": tool(self.ninja),
            "nvcc": tool(self.nvcc),
            "cuda_version": self.cuda_version,
            "cublas_path": self.cublas_path,
            "cublas_origin": self.cublas_origin,
            "cublas_installable": self.cublas_installable,
            "android_ndk": self.android_ndk,
            "android_ndk_clang": self.android_ndk_clang,
            "xcode": tool(self.xcode),
            "nvidia_gpu": self.nvidia_gpu,
            "nvidia_gpu_reason": self.nvidia_gpu_reason,
            "android_device": self.android_device,
            "android_device_reason": self.android_device_reason,
            "ios_device": self.ios_device,
            "ios_device_reason": self.ios_device_reason,
            "vulkan_headers": self.vulkan_headers,
            "glslc": tool(self.glslc),
            "vulkan_devices": [d.as_dict() for d in self.vulkan_devices],
            "vulkan_device_reason": self.vulkan_device_reason,
            "notes": list(self.notes),
            "programs": {name: tool(t) for name, t in sorted(self.programs.items())},
        }


@dataclass(frozen=True, kw_only=True)
class Capability:
    """Whether a platform can be built and run here, and why."""

    can_build: bool
    build_reason: str  # what was found, or what is missing and what the host is
    can_run: bool  # the hardware is here; the artefact may come from elsewhere
    run_reason: str
    missing_build: tuple[Requirement, ...] = ()
    missing_run: tuple[Requirement, ...] = ()
    # The platform's CPU fallback (fallback_run_requires): device_free checks run when this
    # holds even where can_run does not. Equal to can_run for a platform without a fallback.
    can_run_fallback: bool = False
    fallback_reason: str = ""
    # How target binaries run here when the host's CPU cannot run them: the emulator's
    # command prefix (e.g. qemu-aarch64 -L <sysroot>) and its words; () natively.
    runner: tuple[str, ...] = ()
    runner_words: str = ""
    # A lab device runs the platform's run-time checks ("device NAME via ssh DEST"), or the
    # declared one is unreachable (device_error: why; its checks are NOT RUNNABLE HERE).
    device: str = ""
    device_error: str = ""
    # The simulated-CPU instrument of the perf check (valgrind running the cell's binaries
    # natively): the tool and its version ("valgrind 3.19.0"), or "" with why not.
    simulator: str = ""
    simulator_reason: str = ""
    # The accelerator the platform's llama.cpp runs on here, in words ("Vulkan device 0:
    # llvmpipe ..., a software device ..."): its run-time evidence names it.
    accelerator: str = ""
    # That accelerator runs its shaders on the CPU (Mesa's lavapipe): its results are
    # checked, its timings mean nothing for a GPU and its runs are slow.
    software_device: bool = False

    @property
    def as_target(self) -> bool:
        """Whether the platform's binaries run as target binaries (under an emulator or on a
        device), never loaded into a program of this host."""
        return bool(self.runner) or bool(self.device)

    @property
    def loads_in_process(self) -> bool:
        """Whether a program of this host may load the platform's library into its own
        process (the sample text, the Python suite, the consumers): the platform's binaries
        run here natively, neither under an emulator nor only on a lab device."""
        return self.can_run and not self.as_target

    def in_process_reason(self) -> str:
        """Why loads_in_process does not hold, in words ("" when it does)."""
        if self.loads_in_process:
            return ""
        if self.device:
            return f"its binaries run on {self.device}, not in this host's processes"
        if self.emulated:
            return f"its binaries run only {self.runner_words.replace('emulated: ', 'under ', 1)}"
        return self.device_error or self.run_reason

    def can_run_check(self, device_free: bool) -> bool:
        """Whether a check that runs the library can run here."""
        return self.can_run or (device_free and self.can_run_fallback)

    @property
    def emulated(self) -> bool:
        return bool(self.runner)

    def how_it_runs(self, device_free: bool) -> str:
        """ "native" when the whole platform runs here, the emulator in words, else the fallback."""
        if self.can_run and self.device:
            return self.device
        if self.can_run and self.emulated:
            return self.runner_words
        if self.can_run and self.accelerator:
            return f"native, on {self.accelerator}"
        if self.can_run or not (device_free and self.can_run_fallback):
            return "native"
        return f"CPU fallback, without {', '.join(r.value for r in self.missing_run)}"


def _tool(t: Tool | None, missing: str) -> tuple[bool, str]:
    return (True, t.describe()) if t is not None else (False, missing)


def _install(package: str | None) -> str:
    return f" (install the Debian package {package})" if package else ""


def _cross_compiler(host: HostFacts, platform: Platform) -> tuple[bool, str]:
    chain = platform.toolchain
    if not chain.cross_prefix:
        return False, "a cross compiler (the platform's toolchain names none)"
    name = f"{chain.cross_prefix}g++"
    found = host.programs.get(name)
    if found is None:
        return False, f"{name}, the cross compiler (not on PATH){_install(chain.package)}"
    return True, f"{found.describe()} at {found.path}"


def emulator_found(host: HostFacts, platform: Platform) -> tuple[bool, str]:
    """(usable, words): the platform's emulator and its sysroot on this host."""
    emulator = platform.emulator
    if emulator is None:
        return False, "no emulator declared for the platform"
    found = host.programs.get(emulator.program)
    if found is None:
        return False, f"{emulator.program}, the emulator (not on PATH){_install(emulator.package)}"
    if emulator.sysroot and emulator.sysroot not in host.existing_dirs:
        return (
            False,
            f"the {platform.arch} sysroot {emulator.sysroot} (install the platform's cross compiler package)",
        )
    return True, f"{found.describe()} emulating {platform.arch}{f' ({emulator.cpu})' if emulator.cpu else ''}"


def _arm64_cpu(host: HostFacts, platform: Platform) -> tuple[bool, str]:
    if host.arch == "arm64":
        return True, f"{host.cpu_model or 'an arm64 CPU'} (native)"
    if platform.emulator is None:
        return False, "an arm64 CPU (no emulator declared for the platform)"
    ok, words = emulator_found(host, platform)
    if ok:
        return True, words
    return False, f"an arm64 CPU, or {words}"


def _requirement(host: HostFacts, req: Requirement, platform: Platform) -> tuple[bool, str]:
    """(met, words): what satisfies `req`, or what is missing."""
    if req is Requirement.CXX_COMPILER:
        return _tool(host.compiler, "a C++ compiler (CXX unset; no c++, g++ or clang++ on PATH)")
    if req is Requirement.CONAN:
        return _tool(host.conan, "conan (not on PATH)")
    if req is Requirement.CMAKE:
        return _tool(host.cmake, "cmake (not on PATH)")
    if req is Requirement.NINJA:
        return _tool(host.ninja, "ninja (not on PATH)")
    if req is Requirement.NVCC:
        if host.nvcc is None:
            return False, "nvcc, the CUDA compiler (not on PATH, none under CUDA_HOME or /usr/local/cuda)"
        cuda = f", CUDA {host.cuda_version}" if host.cuda_version else ""
        return True, f"nvcc at {host.nvcc.path}{cuda}"
    if req is Requirement.CUBLAS:
        if host.cublas_path is not None:
            origin = {"cuda-toolkit": "the CUDA toolkit", "python-wheel": "an installed NVIDIA wheel"}.get(
                host.cublas_origin or "", "disk"
            )
            return True, f"cuBLAS from {origin} at {host.cublas_path}"
        if host.cublas_installable:
            return True, "cuBLAS not in the toolkit but installable from NVIDIA's PyPI wheels (nvidia-cublas)"
        return False, "cuBLAS (not in the CUDA toolkit, and NVIDIA's PyPI wheels cannot be installed here)"
    if req is Requirement.ANDROID_NDK:
        if host.android_ndk is None:
            # A directory named as an NDK that is not one: say what it lacks.
            found = "; ".join(n for n in host.notes if "NDK" in n)
            return False, "the Android NDK (set ANDROID_NDK_HOME or install one under ANDROID_HOME/ndk)" + (
                f": {found}" if found else ""
            )
        return True, f"Android NDK at {host.android_ndk}"
    if req is Requirement.XCODE:
        if host.xcode is not None:
            return True, host.xcode.describe()
        return False, _XCODE_ELSEWHERE if host.os != "macos" else "Xcode (xcodebuild not found)"
    if req is Requirement.X86_64_V3_CPU:
        if host.arch != "x86_64":
            return False, "an x86-64-v3 CPU (AVX2, FMA, BMI2)"
        level = host.x86_64_level
        cpu = host.cpu_model or "this CPU"
        if level >= 3:
            return True, f"{cpu} (x86-64-v{level})"
        return False, f"an x86-64-v3 CPU (AVX2, FMA, BMI2); {cpu} is x86-64-v{level}"
    if req is Requirement.NVIDIA_GPU:
        if host.nvidia_gpu is not None:
            return True, host.nvidia_gpu
        return False, f"an NVIDIA GPU: {host.nvidia_gpu_reason or 'none found'}"
    if req is Requirement.ANDROID_DEVICE:
        if host.android_device is not None:
            return True, f"Android device {host.android_device}"
        return False, f"an Android device: {host.android_device_reason or 'none attached'}"
    if req is Requirement.APPLE_SILICON:
        if host.os == "macos" and host.arch == "arm64":
            return True, f"Apple Silicon ({host.cpu_model or 'arm64'})"
        return False, "Apple Silicon (a macOS arm64 host)"
    if req is Requirement.CROSS_COMPILER:
        return _cross_compiler(host, platform)
    if req is Requirement.ARM64_CPU:
        return _arm64_cpu(host, platform)
    if req is Requirement.NODE:
        node = host.programs.get("node")
        if node is None:
            return (
                False,
                "node, Node.js (not on PATH; Debian/Ubuntu: nodejs, which bash ci/setup.sh installs)",
            )
        return True, f"{node.describe()} at {node.path}"
    if req is Requirement.JDK:
        missing = [p for p in ("javac", "java") if p not in host.programs]
        if missing:
            return False, (
                f"a JDK: {' and '.join(missing)} not on PATH (Debian/Ubuntu: default-jdk-headless, which "
                "bash ci/setup.sh installs)"
            )
        return True, f"{host.programs['javac'].describe()} at {host.programs['javac'].path}"
    if req is Requirement.VULKAN_HEADERS:
        if host.vulkan_headers is not None:
            return True, f"the Vulkan headers {host.vulkan_headers}"
        return False, (
            f"the Vulkan headers and loader ({host.vulkan_headers_reason or 'not found'}; Debian/Ubuntu: "
            "libvulkan-dev, which bash ci/setup.sh installs)"
        )
    if req is Requirement.GLSLC:
        return _tool(
            host.glslc,
            "glslc, the shader compiler (not on PATH; Debian/Ubuntu: glslc, which bash ci/setup.sh installs)",
        )
    if req is Requirement.VULKAN_DEVICE:
        device = chosen_vulkan_device(host.vulkan_devices)
        if device is not None:
            return True, f"Vulkan device {device.index}: {device.describe()}"
        return False, f"a Vulkan device: {host.vulkan_device_reason or 'none found'}"
    if req is Requirement.IOS_DEVICE:
        if host.ios_device is not None:
            return True, f"iOS device {host.ios_device}"
        return False, f"an iOS device: {host.ios_device_reason or 'none attached'}"
    raise AssertionError(f"unhandled requirement {req!r}")  # a new Requirement needs a branch here


def check_blockers(host: HostFacts, checks: Iterable[Check], platform: Platform) -> dict[str, str]:
    """check id -> what this host lacks to run it (its own run_requires), for the checks
    that lack something."""
    out: dict[str, str] = {}
    for check in checks:
        missing = [w for ok, w in (_requirement(host, r, platform) for r in check.run_requires) if not ok]
        if missing:
            out[check.id] = f"needs {'; '.join(missing)}; this host is {host.describe()}"
    return out


def bundle_blockers(checks: Iterable[Check], bundles: Iterable[Bundle], can: Capability) -> dict[str, str]:
    """check id -> why it does not run on this platform here because of its bundle: a
    bundle declared `emulated: false` (a real model) on a platform whose checks would run
    under an emulator."""
    if not can.emulated:
        return {}
    slow = {b.id for b in bundles if not b.emulated}
    emulator = can.runner_words.removeprefix("emulated: ")
    return {
        c.id: (
            f"the {c.bundle} bundle is not run under an emulator ({emulator}): a real model decodes too "
            "slowly there to check in a verify (matrix.yaml bundles: emulated: false); it runs natively "
            "or on a lab device"
        )
        for c in checks
        if c.bundle in slow
    }


def _host_rule(host: HostFacts, platform: Platform) -> str | None:
    """What the host itself lacks for building `platform`, or None."""
    hosts = _BUILD_HOSTS.get(platform.os)
    if hosts is not None and host.os not in hosts:
        if hosts == ("macos",):
            return _XCODE_ELSEWHERE  # Apple targets build only with Xcode, so say it the same way
        return f"a {' or '.join(hosts)} host to build for {platform.os}"
    if platform.os == "linux" and host.arch != platform.arch and not platform.toolchain.cross_prefix:
        return f"a linux/{platform.arch} host (the platform declares no cross toolchain)"
    return None


def _verdict(found: list[str], missing: list[str], host: HostFacts, nothing: str) -> tuple[bool, str]:
    if missing:
        return False, f"needs {'; '.join(missing)}; this host is {host.describe()}"
    return True, f"has {', '.join(found)}" if found else nothing


def on_device(can: Capability, platform: Platform, state: DeviceState) -> Capability:
    """A lab device declared for the platform: reachable, it meets the run_requires it
    provides and runs the checks; unreachable, the checks cannot run (not here either)."""
    words = state.device.words()
    if not state.reachable:
        return replace(
            can,
            can_run=False,
            run_reason=f"needs {words}, which is unreachable: {state.error}",
            missing_run=platform.run_requires,
            can_run_fallback=False,
            fallback_reason=f"{words} is unreachable",
            runner=(),
            runner_words="",
            device_error=state.error,
        )
    lacking = [r for r in platform.run_requires if r not in state.device.provides]
    if lacking:
        said = ", ".join(r.value for r in lacking)
        return replace(
            can,
            can_run=False,
            run_reason=f"{words} does not provide {said} (its lab entry's provides)",
            missing_run=tuple(lacking),
            can_run_fallback=False,
            runner=(),
            runner_words="",
        )
    uname = state.identity.get("uname", "")
    return replace(
        can,
        simulator="",
        simulator_reason=f"its binaries run on {words}, where no valgrind runs: wall time alone judges",
        can_run=True,
        run_reason=f"{words}" + (f" ({uname})" if uname else ""),
        missing_run=(),
        can_run_fallback=True,
        fallback_reason=words,
        runner=(),
        runner_words=words,
        device=words,
    )


# The host architectures valgrind's callgrind runs natively here (its amd64 and arm64 ports).
_SIMULATOR_ARCHES = ("x86_64", "arm64")


def simulated_cpu(host: HostFacts, platform: Platform) -> tuple[str, str]:
    """(tool, words) of the perf check's simulated instrument for the platform's cells on
    this host: the tool and its version when valgrind runs their binaries natively, else ""
    and why not (then wall time alone judges)."""
    if platform.llama_backend != "cpu":
        return "", (
            f"decode runs on the {platform.llama_backend} device: instructions counted on the CPU "
            "do not see it, so wall time alone judges"
        )
    if host.os != "linux" or host.arch not in _SIMULATOR_ARCHES:
        return "", f"valgrind runs Linux x86-64 and aarch64 binaries; this host is {host.describe()}"
    if (platform.os, platform.arch) != (host.os, host.arch):
        return "", f"its binaries ({platform.os}/{platform.arch}) do not run natively on {host.describe()}"
    if str(platform.llama_options.get("cpu_isa", "")) == "x86-64-v4":
        return "", "valgrind does not run AVX-512 code (the build's cpu_isa is x86-64-v4)"
    tool = host.programs.get(SIMULATOR)
    if tool is None:
        return "", "valgrind is not on PATH (Debian/Ubuntu: valgrind, which bash ci/setup.sh installs)"
    return tool.describe(), f"{tool.describe()} at {tool.path}"


def decide(host: HostFacts, platform: Platform, device: DeviceState | None = None) -> Capability:
    """Can `platform` be built and run on `host` (its run-time checks on `device`, when a lab
    declares one)? Every no comes with what is missing."""
    found: list[str] = []
    missing: list[str] = []
    missing_build: list[Requirement] = []
    rule = _host_rule(host, platform)
    if rule is not None:
        missing.append(rule)
    for req in platform.build_requires:
        ok, words = _requirement(host, req, platform)
        if ok:
            found.append(words)
            continue
        missing_build.append(req)
        if words not in missing:  # Xcode's "macOS host" may already be said by the host rule
            missing.append(words)
    can_build, build_reason = _verdict(found, missing, host, "needs no tools")

    run_found: list[str] = []
    run_missing: list[str] = []
    missing_run: list[Requirement] = []
    for req in platform.run_requires:
        ok, words = _requirement(host, req, platform)
        if ok:
            run_found.append(words)
        else:
            run_missing.append(words)
            missing_run.append(req)
    can_run, run_reason = _verdict(run_found, run_missing, host, "needs no special hardware")
    can_fallback, fallback_reason = can_run, run_reason
    if not can_run and platform.fallback_run_requires is not None:
        results = [_requirement(host, r, platform) for r in platform.fallback_run_requires]
        can_fallback, fallback_reason = _verdict(
            [w for ok, w in results if ok],
            [w for ok, w in results if not ok],
            host,
            "needs no special hardware",
        )
    emulated = can_run and platform.emulator is not None and host.arch != platform.arch
    can = Capability(
        runner=platform.emulator.argv() if emulated and platform.emulator else (),
        runner_words=f"emulated: {emulator_found(host, platform)[1]}" if emulated else "",
        can_build=can_build,
        build_reason=build_reason,
        can_run=can_run,
        run_reason=run_reason,
        missing_build=tuple(missing_build),
        missing_run=tuple(missing_run),
        can_run_fallback=can_fallback,
        fallback_reason=fallback_reason,
    )
    simulator, simulator_reason = simulated_cpu(host, platform)
    if emulated:
        simulator, simulator_reason = "", "timings and counts under an emulator say nothing of the target"
    can = replace(can, simulator=simulator, simulator_reason=simulator_reason)
    if can_run and platform.llama_backend == "vulkan":
        chosen = chosen_vulkan_device(host.vulkan_devices)
        if chosen is not None:
            can = replace(
                can,
                accelerator=f"Vulkan device {chosen.index}: {chosen.describe()}",
                software_device=chosen.software,
            )
    return can if device is None else on_device(can, platform, device)
