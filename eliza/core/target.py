"""What a platform's binaries are: file names, export control, how their symbols are
listed, whether abidiff reads them, and what the host must have to build and run them.

Pure: derived from the matrix's platform entry alone, so every platform's choices are
unit-tested on any host. The build plan, the CMake build (ELIZA_EXPORT_CONTROL) and the
abi and build checks all take them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from eliza.core.matrix import SIMULATOR, Matrix, Platform

LIBRARY_STEM = "libelizainference"
TEST_KIT_STEM = "libelizainference_testkit"

_APPLE = ("macos", "ios")


class BinaryFormat(StrEnum):
    ELF = "elf"  # linux, android
    MACH_O = "mach-o"  # macos, ios


class ExportControl(StrEnum):
    """How the link keeps every symbol but the C ABI's local (native/CMakeLists.txt)."""

    GNU_VERSION_SCRIPT = "gnu-version-script"  # --version-script + --exclude-libs,ALL
    APPLE_EXPORTED_SYMBOLS = "apple-exported-symbols-list"  # ld64 -exported_symbols_list


def binary_format(platform: Platform) -> BinaryFormat:
    return BinaryFormat.MACH_O if platform.os in _APPLE else BinaryFormat.ELF


def shared_library_suffix(platform: Platform) -> str:
    return ".dylib" if binary_format(platform) is BinaryFormat.MACH_O else ".so"


def library_file(platform: Platform) -> str:
    """The shipped library's file name: libelizainference.so / libelizainference.dylib."""
    return LIBRARY_STEM + shared_library_suffix(platform)


def test_kit_file(platform: Platform) -> str:
    return TEST_KIT_STEM + shared_library_suffix(platform)


def export_control(platform: Platform) -> ExportControl:
    if binary_format(platform) is BinaryFormat.MACH_O:
        return ExportControl.APPLE_EXPORTED_SYMBOLS
    return ExportControl.GNU_VERSION_SCRIPT


def linker_export_flags(platform: Platform, export_list: str) -> tuple[str, ...]:
    """The link options export_control means, with the list file it reads (the CMake build
    spells the same choice; this is what the build plan and the docs say it does)."""
    if export_control(platform) is ExportControl.APPLE_EXPORTED_SYMBOLS:
        return (f"-Wl,-exported_symbols_list,{export_list}",)
    return (f"-Wl,--version-script={export_list}", "-Wl,--exclude-libs,ALL", "-Wl,--no-undefined")


def nm_program(platform: Platform, host_arch: str) -> str:
    """The symbol lister that reads the platform's binaries: the cross binutils' nm when
    the platform is cross-built, else the host's."""
    prefix = platform.toolchain.cross_prefix
    if prefix and platform.arch != host_arch:
        return f"{prefix}nm"
    return "nm"


def symbol_lister(platform: Platform, host_arch: str) -> tuple[str, ...]:
    """The command listing a shared library's defined dynamic symbols (the library path
    follows): `nm -D --defined-only` on ELF, `nm -gU` on Mach-O (names then carry a
    leading underscore, which exported_names strips)."""
    if binary_format(platform) is BinaryFormat.MACH_O:
        return ("nm", "-gU")
    return (nm_program(platform, host_arch), "-D", "--defined-only")


def exported_names(platform: Platform, nm_output: str) -> list[str]:
    """Sorted symbol names of nm's output (`<address> <type> <name>` lines)."""
    names = []
    for line in nm_output.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        name = parts[-1].split("@")[0]
        if binary_format(platform) is BinaryFormat.MACH_O and name.startswith("_"):
            name = name[1:]
        names.append(name)
    return sorted(set(names))


def abidiff_reads(platform: Platform) -> bool:
    """abidiff (libabigail) reads ELF and its DWARF only."""
    return binary_format(platform) is BinaryFormat.ELF


def runs_natively(platform: Platform, host_os: str, host_arch: str) -> bool:
    """Whether the host can load the platform's binaries itself (ctypes, subprocesses)."""
    return platform.os == host_os == "linux" and platform.arch == host_arch


def probe_targets(matrix: Matrix) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(programs, directories) the host probe looks for beyond its usual tools: each
    platform's cross compilers and binutils, its emulator and the emulator's sysroot, the
    checks' runtimes and the perf check's simulator."""
    programs: set[str] = set()
    dirs: set[str] = set()
    for platform in matrix.platforms:
        prefix = platform.toolchain.cross_prefix
        if prefix:
            programs.update({f"{prefix}gcc", f"{prefix}g++", f"{prefix}nm"})
        if platform.emulator is not None:
            programs.add(platform.emulator.program)
            if platform.emulator.sysroot:
                dirs.add(platform.emulator.sysroot)
    for check in matrix.checks:
        for req in check.run_requires:
            programs.update(CHECK_PROGRAMS.get(req.value, ()))
        if check.simulated is not None:
            programs.add(SIMULATOR)
    return tuple(sorted(programs)), tuple(sorted(dirs))


# The programs a check's run requirement stands for (eliza.core.host decides from them).
CHECK_PROGRAMS: dict[str, tuple[str, ...]] = {"node": ("node",), "jdk": ("javac", "java")}


@dataclass(frozen=True, kw_only=True)
class TargetRunner:
    """How a target binary runs here: natively (no prefix) or under an emulator, with a
    time limit on every run so a binary that hangs under emulation fails instead."""

    prefix: tuple[str, ...] = ()
    words: str = "native"
    timeout_s: float = 600.0

    def argv(self, binary_argv: list[str]) -> list[str]:
        return [*self.prefix, *binary_argv]
