"""Gather HostFacts from this machine: the one place that looks at PATH, /proc and drivers.

Everything is read-only and bounded: each program gets a short timeout, a program that
is missing, hangs or fails becomes an absent fact with a reason, never an exception.
The environment is passed in, so a caller can probe "as if" PATH or CUDA_HOME differed.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import platform as _platform
import re
import shlex
import shutil
import socket
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.conan import conan_program
from eliza.adapters.tool_versions import Ask, ToolVersions
from eliza.core.host import VULKAN_DEVICE_TYPES, HostFacts, Tool, VulkanDevice

__all__ = ["probe_host"]

_TIMEOUT_S = 10.0
_VERSION = re.compile(r"\d+(?:\.\d+)+")


def probe_host(
    env: Mapping[str, str],
    programs: Iterable[str] = (),
    dirs: Iterable[str] = (),
    *,
    versions: ToolVersions | None = None,
) -> HostFacts:
    """Facts about this machine; `env` is the environment its tools are looked up in.
    `programs` and `dirs` are what the matrix names beyond the usual tools (cross compilers,
    emulators and their sysroots): which of them are here. `versions`: the answers to
    `--version` heard before, reused while the program is the same file."""
    env = dict(env)
    os_name = _os_name()
    arch = _arch()

    def ask(argv: list[str]) -> tuple[int, str]:
        return versions.ask(argv, lambda a: _run(a, env)) if versions else _run(argv, env)

    # The probes are independent and mostly wait on child processes: run them side by side.
    with ThreadPoolExecutor(max_workers=8) as pool:
        compiler = pool.submit(_compiler, env, ask)
        conan = pool.submit(_conan, env, ask)
        cmake = pool.submit(_simple_tool, "cmake", env, ask)
        ninja = pool.submit(_simple_tool, "ninja", env, ask)
        cuda = pool.submit(_cuda, env, ask)
        gpu = pool.submit(_nvidia_gpu, env)
        android = pool.submit(_android_device, env)
        ios = pool.submit(_ios_device, os_name, env)
        xcode = pool.submit(_xcode, os_name, env)
        cpu = pool.submit(_cpu, os_name, env)
        glslc = pool.submit(_simple_tool, "glslc", env, ask)
        vulkan = pool.submit(_vulkan_devices, env)
        extra = {name: pool.submit(_simple_tool, name, env, ask) for name in sorted(set(programs))}
        ndk, ndk_notes = _android_ndk(env)
        ndk_clang = _ndk_clang(ndk, ask) if ndk else None
        nvcc, cuda_version, cublas_path, cublas_origin = cuda.result()
        cpu_model, cpu_flags = cpu.result()
        nvidia_gpu, gpu_reason = gpu.result()
        android_device, android_reason = android.result()
        ios_device, ios_reason = ios.result()
        vulkan_headers, vulkan_headers_reason = _vulkan_headers(env)
        vulkan_devices, vulkan_reason = vulkan.result()
        facts = HostFacts(
            os=os_name,
            arch=arch,
            os_release=_os_release(os_name),
            cpu_model=cpu_model,
            cpu_count=os.cpu_count() or 0,
            cpu_flags=cpu_flags,
            compiler=compiler.result(),
            conan=conan.result(),
            cmake=cmake.result(),
            ninja=ninja.result(),
            nvcc=nvcc,
            cuda_version=cuda_version,
            cublas_path=cublas_path,
            cublas_origin=cublas_origin,
            cublas_installable=_cublas_installable(os_name, arch),
            android_ndk=ndk,
            android_ndk_clang=ndk_clang,
            xcode=xcode.result(),
            nvidia_gpu=nvidia_gpu,
            nvidia_gpu_reason=gpu_reason,
            android_device=android_device,
            android_device_reason=android_reason,
            ios_device=ios_device,
            ios_device_reason=ios_reason,
            vulkan_headers=vulkan_headers,
            vulkan_headers_reason=vulkan_headers_reason,
            glslc=glslc.result(),
            vulkan_devices=vulkan_devices,
            vulkan_device_reason=vulkan_reason,
            notes=tuple(ndk_notes),
            programs={name: tool for name, f in extra.items() if (tool := f.result()) is not None},
            existing_dirs=frozenset(d for d in dirs if os.path.isdir(d)),
        )
        if versions is not None:
            versions.save()
        return facts


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS has one, which a
    container or `taskset` narrows), at least 1."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        return max(1, len(affinity(0)))
    return max(1, os.cpu_count() or 1)


# --- helpers ------------------------------------------------------------------------------


def _run(argv: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    """(exit status, stdout+stderr); -1 with the reason when it could not run or timed out."""
    done = proc.run(argv, env=env, timeout=_TIMEOUT_S)
    return done.returncode, done.output


def _which(name: str, env: Mapping[str, str]) -> str | None:
    return shutil.which(name, path=env.get("PATH", os.defpath))


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _version(text: str) -> str | None:
    match = _VERSION.search(_first_line(text))
    return match.group(0) if match else None


def _read(path: str) -> str:
    """A small system file's text; "" when it is absent or unreadable."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


# --- OS and CPU ---------------------------------------------------------------------------


def _os_name() -> str:
    system = _platform.system().lower()
    return {"darwin": "macos"}.get(system, system)


def _arch() -> str:
    machine = _platform.machine().lower()
    return {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def _os_release(os_name: str) -> str:
    kernel = _platform.release()
    if os_name == "linux":
        text = _read("/etc/os-release")
        match = re.search(r'^PRETTY_NAME="?([^"\n]*)"?', text, re.MULTILINE)
        if match:
            return f"{match.group(1)}, kernel {kernel}"
    if os_name == "macos":
        version = _platform.mac_ver()[0]
        if version:
            return f"macOS {version}"
    return kernel


def _cpu(os_name: str, env: Mapping[str, str]) -> tuple[str | None, frozenset[str]]:
    if os_name == "linux":
        text = _read("/proc/cpuinfo")
        model = re.search(r"^(?:model name|Hardware|Processor)\s*:\s*(.+)$", text, re.MULTILINE)
        # x86 lists "flags", arm64 "Features"; the first processor stands for all of them.
        flags = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.MULTILINE)
        return (
            model.group(1).strip() if model else None,
            frozenset(flags.group(1).split()) if flags else frozenset(),
        )
    if os_name == "macos" and _which("sysctl", env):
        rc, out = _run(["sysctl", "-n", "machdep.cpu.brand_string"], env)
        return (_first_line(out) or None) if rc == 0 else None, frozenset()
    return _platform.processor() or None, frozenset()


# --- build tools --------------------------------------------------------------------------


def _simple_tool(name: str, env: Mapping[str, str], ask: Ask) -> Tool | None:
    path = _which(name, env)
    if path is None:
        return None
    rc, out = ask([path, "--version"])
    return Tool(name=name, path=path, version=_version(out) if rc == 0 else None)


def _conan(env: Mapping[str, str], ask: Ask) -> Tool | None:
    """The Conan the builds start (eliza.adapters.conan.conan_program): this interpreter's,
    whose version its installed distribution says without starting it; else PATH's."""
    program = conan_program()
    if program[0] == "conan":
        return _simple_tool("conan", env, ask)
    try:
        version = importlib.metadata.version("conan")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return Tool(name="conan", path=" ".join(program), version=version)


def _compiler(env: Mapping[str, str], ask: Ask) -> Tool | None:
    # The compiler CMake would pick: $CXX first, then the usual names.
    candidates = []
    if env.get("CXX", "").strip():
        try:
            candidates.append(shlex.split(env["CXX"])[0])
        except ValueError:  # unbalanced quotes: take it as one path
            candidates.append(env["CXX"].strip())
    candidates += ["c++", "g++", "clang++"]
    for name in candidates:
        path = _which(name, env)
        if path is None:
            continue
        rc, out = ask([path, "--version"])
        if rc != 0:
            return Tool(name=Path(name).name, path=path, version=None)
        head, text = _first_line(out).lower(), out.lower()
        # "c++" says nothing about the family; GCC names itself only in its copyright line.
        if "clang" in head:
            family = "clang++"
        elif "g++" in head or "gcc" in head or "free software foundation" in text:
            family = "g++"
        else:
            family = Path(name).name
        return Tool(name=family, path=path, version=_version(out))
    return None


def _xcode(os_name: str, env: Mapping[str, str]) -> Tool | None:
    if os_name != "macos":
        return None
    path = _which("xcodebuild", env)
    if path is None:
        return None
    rc, out = _run([path, "-version"], env)
    # Without full Xcode (command line tools only) xcodebuild exits non-zero.
    return Tool(name="Xcode", path=path, version=_version(out)) if rc == 0 else None


def _android_ndk(env: Mapping[str, str]) -> tuple[str | None, list[str]]:
    notes: list[str] = []

    def valid(root: str) -> bool:
        return Path(root, "build", "cmake", "android.toolchain.cmake").is_file()

    for var in ("ANDROID_NDK_HOME", "ANDROID_NDK_ROOT", "ANDROID_NDK"):
        root = env.get(var)
        if root:
            if valid(root):
                return root, notes
            notes.append(f"{var}={root} is not an NDK (no build/cmake/android.toolchain.cmake)")
    for var in ("ANDROID_HOME", "ANDROID_SDK_ROOT"):
        sdk = env.get(var)
        if not sdk:
            continue
        # Side-by-side NDKs live in ndk/<version>; prefer the newest.
        versions = sorted(
            glob.glob(os.path.join(glob.escape(sdk), "ndk", "*")),
            key=lambda p: [int(x) for x in re.findall(r"\d+", os.path.basename(p))],
            reverse=True,
        )
        for root in [*versions, os.path.join(sdk, "ndk-bundle")]:
            if valid(root):
                return root, notes
    return None, notes


def _ndk_clang(ndk: str, ask: Ask) -> str | None:
    """The version of the NDK's own clang (the Android profile's compiler.version)."""
    for clang in sorted(
        glob.glob(os.path.join(glob.escape(ndk), "toolchains", "llvm", "prebuilt", "*", "bin", "clang"))
    ):
        rc, out = ask([clang, "--version"])
        if rc == 0:
            return _version(out)
    return None


# --- CUDA ---------------------------------------------------------------------------------


def _cuda(env: Mapping[str, str], ask: Ask) -> tuple[Tool | None, str | None, str | None, str | None]:
    """(nvcc, CUDA version, libcublas path, where it lies)."""
    nvcc_path = _which("nvcc", env)
    if nvcc_path is None:
        for home in (env.get("CUDA_HOME"), env.get("CUDA_PATH"), "/usr/local/cuda"):
            if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
                nvcc_path = os.path.join(home, "bin", "nvcc")
                break
    nvcc: Tool | None = None
    version: str | None = None
    roots: list[str] = []
    if nvcc_path is not None:
        rc, out = ask([nvcc_path, "--version"])
        match = re.search(r"release (\d+\.\d+)", out)
        version = match.group(1) if match else None
        nvcc = Tool(name="nvcc", path=nvcc_path, version=version if rc == 0 else None)
        roots = _toolkit_roots(nvcc_path, env)
    for root in roots:
        found = _find_cublas(
            [
                os.path.join(root, "lib64"),
                os.path.join(root, "lib"),
                *glob.glob(os.path.join(glob.escape(root), "targets", "*", "lib")),
            ]
        )
        if found:
            return nvcc, version, found, "cuda-toolkit"
    wheel = _find_cublas(_wheel_lib_dirs())
    if wheel:
        return nvcc, version, wheel, "python-wheel"
    return nvcc, version, None, None


def _toolkit_roots(nvcc_path: str, env: Mapping[str, str]) -> list[str]:
    roots: list[str] = []
    # nvcc may be a wrapper script (e.g. /usr/local/bin/nvcc exec-ing the real one), so
    # ask the driver where its toolkit is rather than trusting the path it was found at.
    _, out = _run([nvcc_path, "-dryrun", "-x", "cu", "-E", os.devnull], env)
    match = re.search(r"^#\$ TOP=(.+)$", out, re.MULTILINE)
    if match:
        roots.append(os.path.realpath(match.group(1).strip()))
    roots.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc_path))))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var):
            roots.append(os.path.realpath(env[var]))
    return list(dict.fromkeys(roots))


def _wheel_lib_dirs() -> list[str]:
    # nvidia-cublas-cu12 installs nvidia/cublas/lib; the CUDA 13 wheels use nvidia/cu13/lib.
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [
        os.path.join(base, *sub)
        for base in spec.submodule_search_locations
        for sub in (("cublas", "lib"), ("cu13", "lib"), ("cu12", "lib"))
    ]


def _find_cublas(dirs: list[str]) -> str | None:
    for directory in dirs:
        hits = sorted(glob.glob(os.path.join(glob.escape(directory), "libcublas.so*")))
        if hits:
            return hits[0]
    return None


def _cublas_installable(os_name: str, arch: str) -> bool:
    # NVIDIA publishes cuBLAS wheels for Linux x86_64/arm64 and Windows; pip must be here
    # to install them. Whether the index is reachable is only known when installing.
    wheels_exist = (os_name, arch) in {("linux", "x86_64"), ("linux", "arm64"), ("windows", "x86_64")}
    return wheels_exist and importlib.util.find_spec("pip") is not None


# --- devices ------------------------------------------------------------------------------


def _nvidia_gpu(env: Mapping[str, str]) -> tuple[str | None, str]:
    smi = _which("nvidia-smi", env)
    if smi is not None:
        rc, out = _run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"], env)
        gpus = [line.strip() for line in out.splitlines() if line.strip()] if rc == 0 else []
        if gpus:
            name, _, driver = gpus[0].partition(",")
            count = f"{len(gpus)}x " if len(gpus) > 1 else ""
            return f"{count}{name.strip()}, driver {driver.strip()}", ""
        return None, f"nvidia-smi failed: {_first_line(out) or f'exit status {rc}'}"
    version = _read("/proc/driver/nvidia/version")
    if version:
        models = []
        for info in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
            text = _read(info)
            match = re.search(r"^Model:\s*(.+)$", text, re.MULTILINE)
            if match:
                models.append(match.group(1).strip())
        driver = _version(version) or "unknown"
        if models:
            return f"{models[0]}, driver {driver} (nvidia-smi not found)", ""
        return None, f"NVIDIA driver {driver} loaded but it lists no GPU (nvidia-smi not found)"
    return None, "no NVIDIA driver (nvidia-smi not found)"


_VULKAN_HEADER_VERSION = re.compile(r"^#define VK_HEADER_VERSION (\d+)", re.MULTILINE)
_VULKAN_HEADER_COMPLETE = re.compile(
    r"^#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION\(0, (\d+), (\d+), VK_HEADER_VERSION\)",
    re.MULTILINE,
)


def _vulkan_headers(env: Mapping[str, str]) -> tuple[str | None, str]:
    """("1.3.239 at /usr/include/vulkan", "") where the headers and the loader to link are
    (a Vulkan SDK's under VULKAN_SDK first), else (None, what is missing)."""
    roots = [env["VULKAN_SDK"]] if env.get("VULKAN_SDK") else []
    roots += ["/usr", "/usr/local"]
    for root in roots:
        include = os.path.join(root, "include", "vulkan")
        text = _read(os.path.join(include, "vulkan_core.h"))
        if not text:
            continue
        libs = (
            glob.glob(os.path.join(root, "lib", "libvulkan.so"))
            + glob.glob(os.path.join(root, "lib", "*-linux-gnu", "libvulkan.so"))
            + glob.glob(os.path.join(root, "lib", "libvulkan.dylib"))
        )
        if not libs:
            return None, f"{include} has the headers, but no libvulkan.so to link is beside them"
        patch = _VULKAN_HEADER_VERSION.search(text)
        complete = _VULKAN_HEADER_COMPLETE.search(text)
        version = (
            f"{complete.group(1)}.{complete.group(2)}.{patch.group(1)}"
            if complete and patch
            else "(version unknown)"
        )
        return f"{version} at {include}", ""
    return None, "no vulkan/vulkan_core.h under " + ", ".join(f"{r}/include" for r in roots)


def _vulkan_devices(env: Mapping[str, str]) -> tuple[tuple[VulkanDevice, ...], str]:
    """The Vulkan devices the loader enumerates, as `vulkaninfo --summary` lists them."""
    vulkaninfo = _which("vulkaninfo", env)
    if vulkaninfo is None:
        return (), "vulkaninfo not found, so no Vulkan device could be listed (Debian/Ubuntu: vulkan-tools)"
    rc, out = _run([vulkaninfo, "--summary"], env)
    devices = parse_vulkaninfo_summary(out)
    if devices:
        return devices, ""
    failure = next((line.strip() for line in out.splitlines() if "ERROR" in line or "Cannot" in line), "")
    return (), f"the Vulkan loader lists no device ({failure or f'vulkaninfo exit status {rc}'})"


def parse_vulkaninfo_summary(text: str) -> tuple[VulkanDevice, ...]:
    """The devices of `vulkaninfo --summary` ("GPU0:" blocks of "key = value" lines)."""
    blocks: list[tuple[int, dict[str, str]]] = []
    for line in text.splitlines():
        head = re.match(r"^GPU(\d+):\s*$", line.strip())
        if head:
            blocks.append((int(head.group(1)), {}))
            continue
        key, sep, value = line.partition("=")
        if blocks and sep and line[:1].isspace():
            blocks[-1][1][key.strip()] = value.strip()
    return tuple(
        VulkanDevice(
            index=index,
            name=fields.get("deviceName", "unknown"),
            driver=fields.get("driverName", "unknown"),
            driver_info=fields.get("driverInfo", ""),
            device_type=VULKAN_DEVICE_TYPES.get(fields.get("deviceType", ""), "other"),
            api_version=fields.get("apiVersion", "").split(" ")[0],
        )
        for index, fields in blocks
        if "deviceName" in fields
    )


def _android_device(env: Mapping[str, str]) -> tuple[str | None, str]:
    adb = _which("adb", env)
    if adb is None:
        return None, "adb not found"
    # `adb devices` would start a server daemon that outlives the probe; ask only a running one.
    port_text = env.get("ANDROID_ADB_SERVER_PORT", "")
    port = int(port_text) if port_text.isdigit() else 5037
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            pass
    except OSError:
        return None, f"no adb server on port {port} (start one with: adb start-server)"
    rc, out = _run([adb, "devices"], env)
    serials = [line.split()[0] for line in out.splitlines()[1:] if line.strip().endswith("device")]
    if rc == 0 and serials:
        return serials[0], ""
    return None, "adb lists no device" if rc == 0 else f"adb failed: {_first_line(out)}"


def _ios_device(os_name: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    if os_name != "macos":
        return None, "iOS devices are detected on a macOS host only"
    tool = _which("idevice_id", env)
    if tool is None:
        return None, "idevice_id (libimobiledevice) not found"
    rc, out = _run([tool, "-l"], env)
    udids = [line.strip() for line in out.splitlines() if line.strip()]
    if rc == 0 and udids:
        return udids[0], ""
    return None, "idevice_id lists no device" if rc == 0 else f"idevice_id failed: {_first_line(out)}"
