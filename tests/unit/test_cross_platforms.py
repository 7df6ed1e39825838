"""Every platform's build choices, derived from the shipped matrix with no compiler: Conan
profiles, library names, export control, symbol listers, abidiff, how binaries run, and
the host decisions for a cross-built, emulated platform."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from eliza.core.bench_diff import token_agreement
from eliza.core.build_plan import plan_cell_build
from eliza.core.conan_profiles import (
    BUILD_PROFILE,
    ProfileContext,
    ProfileError,
    build_profile,
    host_profile,
    host_profile_name,
)
from eliza.core.host import HostFacts, Tool, decide
from eliza.core.layout import REPO_ROOT
from eliza.core.matrix import Platform
from eliza.core.target import (
    BinaryFormat,
    ExportControl,
    abidiff_reads,
    binary_format,
    export_control,
    exported_names,
    library_file,
    linker_export_flags,
    probe_targets,
    runs_natively,
    symbol_lister,
)
from eliza.formats.matrix_yaml import load_matrix
from tests.unit.test_bench_diff import prompt, run

MATRIX = load_matrix(REPO_ROOT / "matrix.yaml")
ARM = MATRIX.platform("linux-arm64")
CONTEXT = ProfileContext(jobs=2, ccache="/usr/bin/ccache", ccache_dir="/cache/ccache")


def tool(name: str, version: str) -> Tool:
    return Tool(name=name, path=f"/usr/bin/{name}", version=version)


CROSS_TOOLS = {
    "aarch64-linux-gnu-g++": tool("aarch64-linux-gnu-g++", "12.2.0"),
    "aarch64-linux-gnu-gcc": tool("aarch64-linux-gnu-gcc", "12.2.0"),
    "qemu-aarch64": tool("qemu-aarch64", "7.2.22"),
}
BASE = {name: tool(name, "1.0") for name in ("g++", "conan", "cmake", "ninja")}
X86 = HostFacts(
    os="linux",
    arch="x86_64",
    cpu_count=2,
    compiler=BASE["g++"],
    conan=BASE["conan"],
    cmake=BASE["cmake"],
    ninja=BASE["ninja"],
    programs=CROSS_TOOLS,
    existing_dirs=frozenset({"/usr/aarch64-linux-gnu"}),
)
ARM_HOST = replace(X86, arch="arm64", programs={}, existing_dirs=frozenset())
MAC = replace(X86, os="macos", arch="arm64", compiler=tool("c++", "15.0.0"), programs={})
NDK_HOST = replace(X86, android_ndk="/opt/android-ndk-r26", android_ndk_clang="17.0.2")


def settings(profile: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in profile.splitlines() if "=" in line and not line.startswith("#")
    )


# --- Conan profiles ----------------------------------------------------------------------


def test_every_platform_has_its_own_host_profile_name() -> None:
    names = [host_profile_name(p) for p in MATRIX.platforms]
    assert len(set(names)) == len(names) and BUILD_PROFILE not in names


def test_native_linux_profiles_are_the_build_profile_so_package_ids_stay() -> None:
    for pid in ("linux-cpu", "linux-cuda"):
        text = host_profile(MATRIX.platform(pid), X86, CONTEXT)
        assert text == build_profile(CONTEXT)
    assert "include(default)" in build_profile(CONTEXT)
    assert "user.eliza:ccache=/usr/bin/ccache" in build_profile(CONTEXT)


def test_linux_arm64_profile_names_the_cross_gcc() -> None:
    values = settings(host_profile(ARM, X86, CONTEXT))
    assert values["os"] == "Linux" and values["arch"] == "armv8"
    assert values["compiler"] == "gcc" and values["compiler.version"] == "12"
    assert values["compiler.libcxx"] == "libstdc++11" and values["compiler.cppstd"] == "17"
    assert values["tools.build:compiler_executables"] == (
        '{"c": "aarch64-linux-gnu-gcc", "cpp": "aarch64-linux-gnu-g++"}'
    )


def test_linux_arm64_on_an_arm64_host_is_native() -> None:
    assert host_profile(ARM, ARM_HOST, CONTEXT) == build_profile(CONTEXT)


def test_cross_profile_without_the_compiler_names_the_package() -> None:
    with pytest.raises(
        ProfileError, match=re.escape("aarch64-linux-gnu-g++ not found on PATH (Debian package g++")
    ):
        host_profile(ARM, replace(X86, programs={}), CONTEXT)


def test_android_profile_wires_the_ndk() -> None:
    values = settings(host_profile(MATRIX.platform("android-arm64"), NDK_HOST, CONTEXT))
    assert values["os"] == "Android" and values["os.api_level"] == "28" and values["arch"] == "armv8"
    assert values["compiler"] == "clang" and values["compiler.version"] == "17"
    assert values["compiler.libcxx"] == "c++_static"
    assert values["tools.android:ndk_path"] == "/opt/android-ndk-r26"


def test_android_profile_without_an_ndk_says_so() -> None:
    with pytest.raises(ProfileError, match="no Android NDK"):
        host_profile(MATRIX.platform("android-arm64"), X86, CONTEXT)
    no_clang = replace(NDK_HOST, android_ndk_clang=None)
    with pytest.raises(ProfileError, match="toolchains/llvm/prebuilt"):
        host_profile(MATRIX.platform("android-arm64"), no_clang, CONTEXT)


@pytest.mark.parametrize(
    ("pid", "os", "version"), [("macos-arm64", "Macos", "14.0"), ("ios-arm64", "iOS", "17.0")]
)
def test_apple_profiles(pid: str, os: str, version: str) -> None:
    values = settings(host_profile(MATRIX.platform(pid), MAC, CONTEXT))
    assert values["os"] == os and values["os.version"] == version and values["arch"] == "armv8"
    assert values["compiler"] == "apple-clang" and values["compiler.version"] == "15"
    assert values["compiler.libcxx"] == "libc++"
    assert ("os.sdk" in values) == (pid == "ios-arm64")


def test_apple_profiles_need_a_mac() -> None:
    with pytest.raises(ProfileError, match="macOS host"):
        host_profile(MATRIX.platform("macos-arm64"), X86, CONTEXT)


# --- platform specifics ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pid", "fmt", "name", "control"),
    [
        ("linux-cpu", BinaryFormat.ELF, "libelizainference.so", ExportControl.GNU_VERSION_SCRIPT),
        ("linux-cuda", BinaryFormat.ELF, "libelizainference.so", ExportControl.GNU_VERSION_SCRIPT),
        ("linux-arm64", BinaryFormat.ELF, "libelizainference.so", ExportControl.GNU_VERSION_SCRIPT),
        ("android-arm64", BinaryFormat.ELF, "libelizainference.so", ExportControl.GNU_VERSION_SCRIPT),
        ("macos-arm64", BinaryFormat.MACH_O, "libelizainference.dylib", ExportControl.APPLE_EXPORTED_SYMBOLS),
        ("ios-arm64", BinaryFormat.MACH_O, "libelizainference.dylib", ExportControl.APPLE_EXPORTED_SYMBOLS),
    ],
)
def test_platform_binaries(pid: str, fmt: BinaryFormat, name: str, control: ExportControl) -> None:
    platform = MATRIX.platform(pid)
    assert binary_format(platform) is fmt
    assert library_file(platform) == name
    assert export_control(platform) is control
    assert abidiff_reads(platform) == (fmt is BinaryFormat.ELF)
    flags = linker_export_flags(platform, "exports.map")
    if fmt is BinaryFormat.ELF:
        assert flags == ("-Wl,--version-script=exports.map", "-Wl,--exclude-libs,ALL", "-Wl,--no-undefined")
        assert symbol_lister(platform, "x86_64")[1:] == ("-D", "--defined-only")
    else:
        assert flags == ("-Wl,-exported_symbols_list,exports.map",)
        assert symbol_lister(platform, "arm64") == ("nm", "-gU")


def test_cross_built_binaries_are_listed_by_the_cross_nm() -> None:
    assert symbol_lister(ARM, "x86_64")[0] == "aarch64-linux-gnu-nm"
    assert symbol_lister(ARM, "arm64")[0] == "nm"
    assert symbol_lister(MATRIX.platform("linux-cpu"), "x86_64")[0] == "nm"


def test_mach_o_names_lose_their_underscore() -> None:
    out = "0000000000003f50 T _eliza_inference_create\n0000000000003f80 T _eliza_inference_destroy\n"
    assert exported_names(MATRIX.platform("macos-arm64"), out) == [
        "eliza_inference_create",
        "eliza_inference_destroy",
    ]
    elf = "0000000000012340 T eliza_inference_create@@ELIZA_9\n"
    assert exported_names(ARM, elf) == ["eliza_inference_create"]


def test_build_plans_use_the_platform_profiles_and_names(tmp_path: Path) -> None:
    options = tuple(g.conan_option for g in MATRIX.gates)
    arm = plan_cell_build(
        MATRIX.cell("linux-arm64.none"), repo=tmp_path, all_gate_options=options, llama_version="v"
    )
    argv = list(arm.argv)
    assert argv[argv.index("--profile:host") + 1] == "eliza-linux-arm64"
    assert argv[argv.index("--profile:build") + 1] == BUILD_PROFILE
    assert "llama-cpp/*:arm_isa=armv8.2-a+dotprod" in argv and not any("cpu_isa" in a for a in argv)
    assert "user.eliza:export_control=gnu-version-script" in argv
    assert arm.library.name == "libelizainference.so"
    mac = plan_cell_build(
        MATRIX.cell("macos-arm64.mlx"), repo=tmp_path, all_gate_options=options, llama_version="v"
    )
    assert mac.library.name == "libelizainference.dylib"
    assert "user.eliza:export_control=apple-exported-symbols-list" in mac.argv


def test_probe_targets_lists_what_the_matrix_names() -> None:
    programs, dirs = probe_targets(MATRIX)
    assert {"aarch64-linux-gnu-g++", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-nm", "qemu-aarch64"} <= set(
        programs
    )
    assert "/usr/aarch64-linux-gnu" in dirs


def test_runs_natively() -> None:
    assert runs_natively(MATRIX.platform("linux-cpu"), "linux", "x86_64")
    assert not runs_natively(ARM, "linux", "x86_64")
    assert runs_natively(ARM, "linux", "arm64")
    assert not runs_natively(MATRIX.platform("android-arm64"), "linux", "arm64")


# --- host decisions for the cross-built, emulated platform ---------------------------------


def test_arm64_builds_with_the_cross_compiler_and_runs_under_qemu() -> None:
    cap = decide(X86, ARM)
    assert cap.can_build and cap.can_run and cap.emulated
    # a CPU of the platform's ISA, not qemu's default `max` (whose SVE and SME a runtime
    # that picks its kernels at run time would take)
    assert cap.runner == ("qemu-aarch64", "-cpu", "neoverse-n1", "-L", "/usr/aarch64-linux-gnu")
    assert cap.how_it_runs(device_free=False) == "emulated: qemu-aarch64 7.2.22 emulating arm64 (neoverse-n1)"
    assert "aarch64-linux-gnu-g++ 12.2.0" in cap.build_reason


def test_arm64_host_runs_arm64_natively() -> None:
    cap = decide(
        replace(ARM_HOST, programs={"aarch64-linux-gnu-g++": CROSS_TOOLS["aarch64-linux-gnu-g++"]}), ARM
    )
    assert cap.can_run and not cap.emulated and cap.how_it_runs(device_free=False) == "native"


def test_missing_cross_compiler_names_the_package() -> None:
    cap = decide(replace(X86, programs={"qemu-aarch64": CROSS_TOOLS["qemu-aarch64"]}), ARM)
    assert not cap.can_build
    assert (
        "aarch64-linux-gnu-g++, the cross compiler (not on PATH) (install the Debian package "
        in cap.build_reason
    )
    assert "g++-aarch64-linux-gnu" in cap.build_reason


def test_missing_emulator_names_the_package() -> None:
    programs = {k: v for k, v in CROSS_TOOLS.items() if k != "qemu-aarch64"}
    cap = decide(replace(X86, programs=programs), ARM)
    assert cap.can_build and not cap.can_run and not cap.emulated
    assert "qemu-aarch64, the emulator (not on PATH) (install the Debian package qemu-user)" in cap.run_reason


def test_missing_sysroot_is_named() -> None:
    cap = decide(replace(X86, existing_dirs=frozenset()), ARM)
    assert not cap.can_run and "sysroot /usr/aarch64-linux-gnu" in cap.run_reason


def test_a_linux_target_of_another_arch_without_a_toolchain_is_not_buildable() -> None:
    bare = Platform(id="x", description="x", os="linux", arch="arm64", llama_backend="cpu")
    assert "declares no cross toolchain" in decide(X86, bare).build_reason


def test_android_ndk_without_its_toolchain_file_is_named() -> None:
    note = "ANDROID_NDK_HOME=/opt/broken is not an NDK (no build/cmake/android.toolchain.cmake)"
    cap = decide(replace(X86, notes=(note,)), MATRIX.platform("android-arm64"))
    assert not cap.can_build and note in cap.build_reason


# --- cross-architecture agreement ---------------------------------------------------------


def test_agreement_of_identical_runs_is_one() -> None:
    a = run(prompt(0, (5, 6, 7), b"abc"), prompt(1, (8, 9), b"de"))
    result = token_agreement(a, a, left_label="arm", right_label="x86")
    assert result.rate == 1.0 and result.positions == 5 and result.meets(1.0)
    assert "5/5 token positions agree" in result.summary() and "no divergence" in result.summary()


def test_agreement_counts_tokens_before_the_first_divergence() -> None:
    left = run(prompt(0, (5, 6, 7, 8), b"abcd"), prompt(1, (8, 9), b"de"))
    right = run(prompt(0, (5, 6, 1, 8), b"abxd"), prompt(1, (8, 9), b"de"))
    result = token_agreement(left, right, left_label="arm", right_label="x86")
    assert (result.agreeing, result.positions) == (4, 6)
    assert result.rate == pytest.approx(4 / 6)
    assert result.meets(0.6) and not result.meets(0.7)
    assert "first divergence: prompt 0, step 2 (token 7 vs 1)" in result.summary()


def test_agreement_of_different_inputs_is_never_met() -> None:
    left = run(prompt(0, (5,), b"a"))
    right = run(replace(prompt(0, (5,), b"a"), prompt="other"))
    assert not token_agreement(left, right).meets(0.0)
