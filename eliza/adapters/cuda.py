"""The CUDA toolkit a linux-cuda build uses: nvcc from the host, cuBLAS from the host
toolkit or, when it lacks cuBLAS, from NVIDIA's PyPI wheel (nvidia-cublas).

When the wheel is used, a merged toolkit view is laid out in the cache: symlinks to the
host toolkit plus the wheel's headers and libraries, so CMake's FindCUDAToolkit and nvcc
see one ordinary toolkit. Building is the only thing that needs it; running needs the
CUDA runtime and cuBLAS libraries, found through the library's RUNPATH.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.errors import ToolError

CUBLAS_WHEEL = "nvidia-cublas"


class CudaError(ToolError):
    pass


@dataclass(frozen=True, kw_only=True)
class CudaToolkit:
    root: Path  # what CUDAToolkit_ROOT points at (host toolkit or merged view)
    host_root: Path  # the host's own toolkit
    version: str  # "13.0"
    cublas_from: str  # "host toolkit" or "nvidia-cublas <version> wheel"

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    @property
    def library_dirs(self) -> tuple[Path, ...]:
        return (self.root / "lib64",)

    def build_env(self) -> dict[str, str]:
        return {"CUDAToolkit_ROOT": str(self.root), "CUDACXX": str(self.nvcc)}


def find_host_toolkit(env: Mapping[str, str]) -> Path | None:
    candidates: list[Path] = [Path(env[k]) for k in ("CUDA_HOME", "CUDA_PATH") if env.get(k)]
    nvcc = shutil.which("nvcc", path=env.get("PATH"))
    if nvcc:
        candidates.append(Path(nvcc).resolve().parent.parent)
    candidates.append(Path("/usr/local/cuda"))
    for root in candidates:
        if (root / "bin" / "nvcc").is_file() and (root / "include" / "cuda_runtime.h").is_file():
            return root.resolve()
    return None


def toolkit_version(root: Path) -> str:
    out = proc.run([root / "bin" / "nvcc", "--version"]).stdout
    match = re.search(r"release (\d+\.\d+)", out)
    if not match:
        raise CudaError(f"{root / 'bin' / 'nvcc'} --version printed no release number")
    return match.group(1)


def _has_cublas(lib_dir: Path) -> bool:
    return any(lib_dir.glob("libcublas.so*"))


def _wheel_layout(major: str) -> tuple[str, str]:
    """(pip requirement, folder under the target) of NVIDIA's cuBLAS wheel for a CUDA major:
    from CUDA 13 one package per major version lays out nvidia/cu<major>/; CUDA 12 has
    its own package name and nvidia/cublas/."""
    if int(major) >= 13:
        return f"{CUBLAS_WHEEL}>={major},<{int(major) + 1}", f"cu{major}"
    return f"{CUBLAS_WHEEL}-cu{major}", "cublas"


def _install_cublas_wheel(cache: Path, major: str) -> Path:
    """pip-installs NVIDIA's cuBLAS wheel for this CUDA major into the cache; returns its prefix."""
    spec, folder = _wheel_layout(major)
    target = cache / "cuda-wheels" / f"cu{major}"
    lib = target / "nvidia" / folder / "lib"
    if not _has_cublas(lib):
        target.mkdir(parents=True, exist_ok=True)
        result = proc.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--upgrade", "--target", target, spec]
        )
        if not result.ok or not _has_cublas(lib):
            raise CudaError(f"pip could not install {spec} into {target}:\n{result.stderr[-2000:]}")
    return target / "nvidia" / folder


def _wheel_version(prefix: Path) -> str:
    for info in prefix.parent.parent.glob("nvidia_cublas*.dist-info"):
        return info.name.split("-", 1)[1].removesuffix(".dist-info")
    return "unknown"


def _merge_dir(dest: Path, sources: list[Path]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for src in sources:
        for entry in src.iterdir():
            link = dest / entry.name
            if not link.exists() and not link.is_symlink():
                link.symlink_to(entry)


def prepare_toolkit(cache: Path, env: Mapping[str, str]) -> CudaToolkit:
    host = find_host_toolkit(env)
    if host is None:
        raise CudaError("no CUDA toolkit: nvcc not on PATH and neither CUDA_HOME nor /usr/local/cuda has one")
    version = toolkit_version(host)
    if _has_cublas(host / "lib64"):
        return CudaToolkit(root=host, host_root=host, version=version, cublas_from="host toolkit")
    major = version.split(".")[0]
    wheel = _install_cublas_wheel(cache, major)
    key = hashlib.sha256(f"{host}|{wheel}|{_wheel_version(wheel)}".encode()).hexdigest()[:12]
    view = cache / f"cuda-toolkit-{version}-{key}"
    if not (view / ".complete").is_file():
        shutil.rmtree(view, ignore_errors=True)
        view.mkdir(parents=True)
        for entry in host.iterdir():
            if entry.name not in ("include", "lib64", "lib"):
                (view / entry.name).symlink_to(entry)
        _merge_dir(view / "include", [wheel / "include", host / "include"])
        _merge_dir(view / "lib64", [host / "lib64"])
        for so in sorted((wheel / "lib").glob("*.so.*")):
            (view / "lib64" / so.name).symlink_to(so)
            unversioned = view / "lib64" / so.name.split(".so.")[0]
            unversioned = unversioned.with_name(unversioned.name + ".so")
            if not unversioned.exists():
                unversioned.symlink_to(so)
        (view / "lib").symlink_to(view / "lib64")
        (view / ".complete").write_text("")
    return CudaToolkit(
        root=view,
        host_root=host,
        version=version,
        cublas_from=f"{CUBLAS_WHEEL} {_wheel_version(wheel)} wheel",
    )
