"""Host decisions from facts written in code, and one smoke test of the real probe."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace

import pytest

from eliza.adapters.host_probe import parse_vulkaninfo_summary, probe_host
from eliza.core.host import (
    Capability,
    HostFacts,
    Tool,
    VulkanDevice,
    chosen_vulkan_device,
    decide,
    vulkan_environment,
    x86_64_level,
)
from eliza.core.matrix import Platform, Requirement

R = Requirement
BASE_TOOLS = (R.CXX_COMPILER, R.CONAN, R.CMAKE, R.NINJA)

LINUX_CPU = Platform(
    id="linux-cpu", description="cpu", os="linux", arch="x86_64", llama_backend="cpu",
    build_requires=BASE_TOOLS, run_requires=(R.X86_64_V3_CPU,),
)  # fmt: skip
LINUX_CUDA = Platform(
    id="linux-cuda", description="cuda", os="linux", arch="x86_64", llama_backend="cuda",
    build_requires=(*BASE_TOOLS, R.NVCC, R.CUBLAS), run_requires=(R.X86_64_V3_CPU, R.NVIDIA_GPU),
)  # fmt: skip
ANDROID = Platform(
    id="android-arm64", description="android", os="android", arch="arm64", llama_backend="cpu",
    build_requires=(*BASE_TOOLS, R.ANDROID_NDK), run_requires=(R.ANDROID_DEVICE,),
)  # fmt: skip
MACOS = Platform(
    id="macos-arm64", description="mac", os="macos", arch="arm64", llama_backend="metal",
    build_requires=(*BASE_TOOLS, R.XCODE), run_requires=(R.APPLE_SILICON,),
)  # fmt: skip
IOS = Platform(
    id="ios-arm64", description="ios", os="ios", arch="arm64", llama_backend="metal",
    build_requires=(*BASE_TOOLS, R.XCODE), run_requires=(R.IOS_DEVICE,),
)  # fmt: skip

V2_FLAGS = frozenset({"fpu", "cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"})
V3_FLAGS = V2_FLAGS | {"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}


def tool(name: str, version: str) -> Tool:
    return Tool(name=name, path=f"/usr/bin/{name}", version=version)


# A Linux x86-64 build machine with the base tools and a CUDA 12.4 compiler, no GPU.
LINUX = HostFacts(
    os="linux",
    arch="x86_64",
    cpu_model="AMD EPYC",
    cpu_flags=V3_FLAGS,
    compiler=tool("g++", "13.2.0"),
    conan=tool("conan", "2.20.1"),
    cmake=tool("cmake", "3.30.2"),
    ninja=tool("ninja", "1.12.1"),
    nvcc=Tool(name="nvcc", path="/usr/local/cuda/bin/nvcc", version="12.4"),
    cuda_version="12.4",
    nvidia_gpu_reason="no NVIDIA driver (nvidia-smi not found)",
    android_device_reason="adb not found",
    ios_device_reason="iOS devices are detected on a macOS host only",
)


def toolkit_cublas(host: HostFacts) -> HostFacts:
    return replace(host, cublas_path="/usr/local/cuda/lib64/libcublas.so.12", cublas_origin="cuda-toolkit")


def with_gpu(host: HostFacts) -> HostFacts:
    return replace(host, nvidia_gpu="NVIDIA H200, driver 570.86.15", nvidia_gpu_reason="")


MAC = replace(
    LINUX,
    os="macos",
    arch="arm64",
    cpu_flags=frozenset(),
    cpu_model="Apple M2",
    nvcc=None,
    cuda_version=None,
    xcode=Tool(name="Xcode", path="/usr/bin/xcodebuild", version="15.4"),
)


@dataclass(frozen=True)
class Case:
    host: HostFacts
    platform: Platform
    can_build: bool
    can_run: bool
    build_words: tuple[str, ...] = ()  # each must appear in build_reason
    run_words: tuple[str, ...] = ()  # each must appear in run_reason


CASES = {
    "cpu on linux": Case(
        LINUX, LINUX_CPU, True, True,
        ("g++ 13.2.0", "conan 2.20.1", "cmake 3.30.2", "ninja 1.12.1"), ("AMD EPYC (x86-64-v3)",),
    ),
    "cuda, cuBLAS in toolkit, GPU": Case(
        with_gpu(toolkit_cublas(LINUX)), LINUX_CUDA, True, True,
        ("nvcc at /usr/local/cuda/bin/nvcc, CUDA 12.4",
         "cuBLAS from the CUDA toolkit at /usr/local/cuda/lib64/libcublas.so.12"),
        ("NVIDIA H200, driver 570.86.15",),
    ),
    "cuda, cuBLAS from wheels only": Case(
        replace(LINUX, cublas_installable=True), LINUX_CUDA, True, False,
        ("cuBLAS not in the toolkit but installable from NVIDIA's PyPI wheels",),
    ),
    "cuda, cuBLAS wheel installed": Case(
        replace(LINUX, cublas_path="/venv/nvidia/cu13/lib/libcublas.so.13", cublas_origin="python-wheel"),
        LINUX_CUDA, True, False,
        ("cuBLAS from an installed NVIDIA wheel at /venv/nvidia/cu13/lib/libcublas.so.13",),
    ),
    "cuda, no cuBLAS at all": Case(
        LINUX, LINUX_CUDA, False, False,
        ("needs cuBLAS (not in the CUDA toolkit, and NVIDIA's PyPI wheels cannot be installed here)",
         "this host is linux/x86_64"),
    ),
    "cuda, no nvcc": Case(
        replace(LINUX, nvcc=None, cuda_version=None, cublas_installable=True), LINUX_CUDA, False, False,
        ("needs nvcc, the CUDA compiler", "this host is linux/x86_64"),
    ),
    "cpu, no nvcc is fine": Case(replace(LINUX, nvcc=None), LINUX_CPU, True, True),
    "gpu absent": Case(
        toolkit_cublas(LINUX), LINUX_CUDA, True, False,
        (), ("needs an NVIDIA GPU: no NVIDIA driver (nvidia-smi not found); this host is linux/x86_64",),
    ),
    "cpu below v3": Case(
        replace(LINUX, cpu_flags=V2_FLAGS), LINUX_CPU, True, False,
        (), ("needs an x86-64-v3 CPU (AVX2, FMA, BMI2); AMD EPYC is x86-64-v2",),
    ),
    "macOS on linux": Case(
        LINUX, MACOS, False, False,
        ("needs Xcode (macOS host); this host is linux/x86_64",),
        ("needs Apple Silicon (a macOS arm64 host); this host is linux/x86_64",),
    ),
    "iOS on linux": Case(
        LINUX, IOS, False, False,
        ("needs Xcode (macOS host); this host is linux/x86_64",),
        ("needs an iOS device: iOS devices are detected on a macOS host only",),
    ),
    "android without NDK": Case(
        LINUX, ANDROID, False, False,
        ("needs the Android NDK", "this host is linux/x86_64"), ("needs an Android device: adb not found",),
    ),
    "android with NDK and a device": Case(
        replace(LINUX, android_ndk="/opt/ndk/27.0", android_device="emulator-5554"), ANDROID, True, True,
        ("Android NDK at /opt/ndk/27.0",), ("Android device emulator-5554",),
    ),
    "macOS on a Mac": Case(MAC, MACOS, True, True, ("Xcode 15.4",), ("Apple Silicon (Apple M2)",)),
    "linux x86-64 target on an arm64 linux host": Case(
        replace(LINUX, arch="arm64", cpu_flags=frozenset()), LINUX_CPU, False, False,
        ("needs a linux/x86_64 host (the platform declares no cross toolchain)",),
        ("needs an x86-64-v3 CPU",),
    ),
    "android on a Mac": Case(replace(MAC, android_ndk="/opt/ndk"), ANDROID, True, False),
    "linux target on a Mac": Case(MAC, LINUX_CPU, False, False, ("needs a linux host to build for linux",)),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_decide(case: Case) -> None:
    cap = decide(case.host, case.platform)
    assert (cap.can_build, cap.can_run) == (case.can_build, case.can_run), cap
    for words in case.build_words:
        assert words in cap.build_reason
    for words in case.run_words:
        assert words in cap.run_reason
    assert cap.build_reason and cap.run_reason


def test_missing_tools_are_all_named_in_declared_order() -> None:
    host = replace(LINUX, conan=None, ninja=None)
    cap = decide(host, LINUX_CPU)
    assert cap.build_reason == "needs conan (not on PATH); ninja (not on PATH); this host is linux/x86_64"
    assert cap.missing_build == (R.CONAN, R.NINJA)


def test_missing_requirements_are_listed_for_callers() -> None:
    cap = decide(replace(LINUX, nvcc=None), LINUX_CUDA)
    assert cap == Capability(
        can_build=False,
        build_reason=cap.build_reason,
        can_run=False,
        run_reason=cap.run_reason,
        missing_build=(R.NVCC, R.CUBLAS),
        missing_run=(R.NVIDIA_GPU,),
        # No fallback declared: device-free checks need what every run needs.
        can_run_fallback=False,
        fallback_reason=cap.run_reason,
        # decode runs on the GPU: no simulated CPU, and the reason says so
        simulator="",
        simulator_reason=cap.simulator_reason,
    )
    assert "do not see it" in cap.simulator_reason


CUDA_WITH_FALLBACK = replace(LINUX_CUDA, fallback_run_requires=(R.X86_64_V3_CPU,))


def test_a_gpu_less_host_runs_the_cpu_fallback_of_a_cuda_platform() -> None:
    cap = decide(LINUX, CUDA_WITH_FALLBACK)
    assert not cap.can_run and "NVIDIA GPU" in cap.run_reason
    assert cap.can_run_fallback and "x86-64-v3" in cap.fallback_reason
    assert cap.can_run_check(device_free=True) and not cap.can_run_check(device_free=False)
    assert cap.how_it_runs(device_free=True) == "CPU fallback, without nvidia-gpu"
    assert cap.how_it_runs(device_free=False) == "native"


def test_the_fallback_has_requirements_of_its_own() -> None:
    old_cpu = replace(LINUX, cpu_flags=frozenset({"sse4_2"}), cpu_model="an old Xeon")
    cap = decide(old_cpu, CUDA_WITH_FALLBACK)
    assert not cap.can_run_fallback
    assert "an old Xeon is x86-64-v1" in cap.fallback_reason
    assert not cap.can_run_check(device_free=True)


def test_a_gpu_host_runs_everything_natively() -> None:
    cap = decide(replace(LINUX, nvidia_gpu="NVIDIA H200, driver 550"), CUDA_WITH_FALLBACK)
    assert cap.can_run and cap.can_run_check(device_free=False)
    assert cap.how_it_runs(device_free=True) == "native"


def test_xcode_on_linux_is_said_once() -> None:
    assert decide(LINUX, MACOS).build_reason == "needs Xcode (macOS host); this host is linux/x86_64"
    assert decide(LINUX, MACOS).missing_build == (R.XCODE,)


def test_every_requirement_is_decidable() -> None:
    bare = HostFacts(os="linux", arch="x86_64")
    everything = Platform(
        id="all", description="all", os="linux", arch="x86_64", llama_backend="cpu",
        build_requires=tuple(r for r in R if r not in (R.X86_64_V3_CPU, R.NVIDIA_GPU, R.ANDROID_DEVICE,
                                                       R.APPLE_SILICON, R.IOS_DEVICE, R.VULKAN_DEVICE)),
        run_requires=(R.X86_64_V3_CPU, R.NVIDIA_GPU, R.ANDROID_DEVICE, R.APPLE_SILICON, R.IOS_DEVICE,
                      R.VULKAN_DEVICE),
    )  # fmt: skip
    cap = decide(bare, everything)
    assert not cap.can_build and not cap.can_run
    assert set(cap.missing_build) | set(cap.missing_run) == set(R)


def test_no_requirements() -> None:
    empty = Platform(id="x", description="x", os="linux", arch="x86_64", llama_backend="cpu")
    cap = decide(LINUX, empty)
    assert (cap.can_build, cap.build_reason) == (True, "needs no tools")
    assert (cap.can_run, cap.run_reason) == (True, "needs no special hardware")


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        (frozenset(), 1),
        (V2_FLAGS, 2),
        (V3_FLAGS, 3),
        (V3_FLAGS - {"fma"}, 2),
        (V3_FLAGS | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}, 4),
        (V2_FLAGS | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}, 2),
    ],
)
def test_x86_64_level(flags: frozenset[str], level: int) -> None:
    assert x86_64_level(flags) == level


def test_facts_serialise_to_json() -> None:
    data = toolkit_cublas(LINUX).as_dict()
    text = json.dumps(data, sort_keys=True)
    assert json.loads(text)["compiler"] == {"name": "g++", "path": "/usr/bin/g++", "version": "13.2.0"}
    assert data["x86_64_level"] == 3
    assert data["cpu_flags"] == sorted(V3_FLAGS)
    assert HostFacts(os="linux", arch="arm64", cpu_flags=V3_FLAGS).x86_64_level == 0


def test_probe_this_machine() -> None:
    facts = probe_host(os.environ)
    assert isinstance(facts, HostFacts)
    assert facts.os == "linux"
    assert facts.arch in ("x86_64", "arm64")
    assert facts.cpu_count >= 1
    assert (facts.nvidia_gpu is None) == bool(facts.nvidia_gpu_reason)
    json.dumps(facts.as_dict())


LINUX_VULKAN = Platform(
    id="linux-vulkan", description="vulkan", os="linux", arch="x86_64", llama_backend="vulkan",
    build_requires=(*BASE_TOOLS, R.VULKAN_HEADERS, R.GLSLC), run_requires=(R.X86_64_V3_CPU, R.VULKAN_DEVICE),
)  # fmt: skip
LAVAPIPE = VulkanDevice(
    index=1, name="llvmpipe (LLVM 15.0.6, 256 bits)", driver="llvmpipe",
    driver_info="Mesa 22.3.6 (LLVM 15.0.6)", device_type="cpu", api_version="1.3.230",
)  # fmt: skip
RADV = VulkanDevice(
    index=0, name="AMD Radeon 780M (RADV GFX1103_R1)", driver="radv", device_type="integrated-gpu"
)
VULKAN_HOST = replace(
    LINUX, vulkan_headers="1.3.239 at /usr/include/vulkan", glslc=Tool(name="glslc", path="/usr/bin/glslc")
)

# What `vulkaninfo --summary` (vulkan-tools 1.3.239) prints, trimmed: two devices.
SUMMARY = """\
Devices:
========
GPU0:
\tapiVersion         = 1.3.246
\tdeviceType         = PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU
\tdeviceName         = AMD Radeon 780M (RADV GFX1103_R1)
\tdriverName         = radv
\tdriverInfo         = Mesa 23.1.2
GPU1:
\tapiVersion         = 1.3.230
\tdriverVersion      = 0.0.1
\tdeviceType         = PHYSICAL_DEVICE_TYPE_CPU
\tdeviceName         = llvmpipe (LLVM 15.0.6, 256 bits)
\tdriverID           = DRIVER_ID_MESA_LLVMPIPE
\tdriverName         = llvmpipe
\tdriverInfo         = Mesa 22.3.6 (LLVM 15.0.6)
"""


def test_vulkaninfo_summary_lists_each_device_with_its_driver_and_kind() -> None:
    gpu, cpu = parse_vulkaninfo_summary(SUMMARY)
    assert (gpu.index, gpu.driver, gpu.device_type, gpu.software) == (0, "radv", "integrated-gpu", False)
    assert (cpu.index, cpu.name, cpu.driver_info, cpu.api_version) == (
        1, "llvmpipe (LLVM 15.0.6, 256 bits)", "Mesa 22.3.6 (LLVM 15.0.6)", "1.3.230",
    )  # fmt: skip
    assert cpu.software and cpu.describe().endswith("Vulkan 1.3.230, a software device")
    assert parse_vulkaninfo_summary("Cannot create Vulkan instance.\n") == ()


def test_the_vulkan_cells_run_on_a_gpu_before_a_software_device() -> None:
    assert chosen_vulkan_device((LAVAPIPE, RADV)) == RADV
    assert chosen_vulkan_device((LAVAPIPE,)) == LAVAPIPE
    assert chosen_vulkan_device(()) is None


def test_ggml_is_pinned_to_the_device_and_told_what_a_software_device_lacks() -> None:
    assert vulkan_environment(RADV) == {"GGML_VK_VISIBLE_DEVICES": "0"}
    assert vulkan_environment(LAVAPIPE, threads=1) == {
        "GGML_VK_VISIBLE_DEVICES": "1",
        "GGML_VK_DISABLE_F16": "1",
        "GGML_VK_DISABLE_COOPMAT": "1",
        "LP_NUM_THREADS": "1",
    }
    assert vulkan_environment(None) == {}


def test_a_vulkan_platform_runs_on_the_chosen_device_and_says_which() -> None:
    cap = decide(replace(VULKAN_HOST, vulkan_devices=(LAVAPIPE,)), LINUX_VULKAN)
    assert cap.can_build and cap.can_run
    assert cap.how_it_runs(device_free=False) == f"native, on Vulkan device 1: {LAVAPIPE.describe()}"
    assert "glslc" in cap.build_reason and "1.3.239" in cap.build_reason
    # the CPU platform on the same host runs natively: the device is the Vulkan build's
    assert decide(replace(VULKAN_HOST, vulkan_devices=(LAVAPIPE,)), LINUX_CPU).how_it_runs(False) == "native"


def test_a_host_without_vulkan_names_what_it_lacks() -> None:
    bare = replace(LINUX, vulkan_headers_reason="no vulkan/vulkan_core.h under /usr/include",
                   vulkan_device_reason="vulkaninfo not found")  # fmt: skip
    cap = decide(bare, LINUX_VULKAN)
    assert cap.missing_build == (R.VULKAN_HEADERS, R.GLSLC) and cap.missing_run == (R.VULKAN_DEVICE,)
    assert "no vulkan/vulkan_core.h under /usr/include; Debian/Ubuntu: libvulkan-dev" in cap.build_reason
    assert "glslc, the shader compiler (not on PATH" in cap.build_reason
    assert "a Vulkan device: vulkaninfo not found" in cap.run_reason
    assert not cap.accelerator
