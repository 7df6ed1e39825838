"""llama.cpp, built as static PIC libraries for linking into libelizainference.

Project-owned recipe served from the local recipe index in ``conan/index``. Two sources:

* a pinned version listed in ``conandata.yml``: the llama.cpp tree vendored in a
  PyPI sdist. ``eliza`` fetches the sdist with pip and passes its path in the
  ``ELIZA_LLAMA_SDIST`` environment variable; this recipe verifies the sha256 before
  unpacking, so a wrong or tampered file fails the build.
* a local checkout (a fork): ``eliza`` exports this recipe as version
  ``fork.<content-hash>`` and passes the checkout in ``ELIZA_LLAMA_CPP_DIR``.

The CPU instruction-set level is an option, never ``-march=native``, so packages are
reproducible across machines; it is recorded in ``res/eliza-llama-build.json``. So is the
``sanitize`` option of a build variant (ASan/UBSan): each variant is a package of its own.

GPU backends: ``with_cuda`` (CUDA, linked to the toolkit's runtime) and ``with_vulkan``
(Vulkan, linked to the Vulkan loader; its shaders are compiled by ``glslc`` at build time).
The pinned source carries the patches listed in ``conandata.yml``, applied in ``source()``.

Reproducible whatever the Conan home: the source folder is mapped to its path relative to
the build folder (``-ffile-prefix-map``), which is also what ccache passes the compiler when
it runs with ``CCACHE_BASEDIR`` over the recipe's folder, so ``__FILE__`` strings are the
same with ccache or without, in any Conan home. ccache is used when the profile names it
(``user.eliza:ccache``, written by eliza when ccache is installed); a recipe change that
changes nothing compiled then rebuilds from the compiler cache.
"""

import json
import os
import shutil
import subprocess

from conan import ConanFile
from conan.errors import ConanException, ConanInvalidConfiguration
from conan.tools.cmake import CMake, CMakeToolchain, cmake_layout
from conan.tools.files import apply_conandata_patches, check_sha256, copy, export_conandata_patches, save, unzip

required_conan_version = ">=2.0"

# ggml instruction-set switches per x86-64 micro-architecture level.
_X86_ISA = {
    "x86-64-v2": {"GGML_SSE42": True},
    "x86-64-v3": {"GGML_SSE42": True, "GGML_AVX": True, "GGML_AVX2": True,
                  "GGML_BMI2": True, "GGML_FMA": True, "GGML_F16C": True},
    "x86-64-v4": {"GGML_SSE42": True, "GGML_AVX": True, "GGML_AVX2": True,
                  "GGML_BMI2": True, "GGML_FMA": True, "GGML_F16C": True,
                  "GGML_AVX512": True},
}
_ALL_X86_SWITCHES = sorted({k for v in _X86_ISA.values() for k in v})
# arm64: the -march ggml compiles for (GGML_CPU_ARM_ARCH), a deliberate level as on x86.
_ARM_ISA = ["armv8-a", "armv8.2-a", "armv8.2-a+dotprod", "armv8.2-a+dotprod+fp16", "armv8.6-a+dotprod+i8mm"]


class LlamaCppConan(ConanFile):
    name = "llama-cpp"
    description = "LLM inference in C/C++ (static, symbols hidden by the consumer)"
    license = "MIT"
    url = "https://github.com/ggml-org/llama.cpp"
    package_type = "static-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {
        "cpu_isa": ["x86-64-v2", "x86-64-v3", "x86-64-v4"],
        "arm_isa": _ARM_ISA,
        "with_cuda": [True, False],
        "cuda_architectures": ["ANY"],
        "with_vulkan": [True, False],
        # A build variant's sanitizers (matrix.yaml `variants`): its own package.
        "sanitize": ["none", "address", "undefined", "address+undefined"],
    }
    default_options = {
        "cpu_isa": "x86-64-v3",
        "arm_isa": "armv8.2-a+dotprod",
        "with_cuda": False,
        "cuda_architectures": "90",
        "with_vulkan": False,
        "sanitize": "none",
    }

    def config_options(self):
        if self.settings.arch != "x86_64":
            del self.options.cpu_isa
        if self.settings.arch != "armv8":
            del self.options.arm_isa

    def configure(self):
        if not self.options.with_cuda:
            self.options.rm_safe("cuda_architectures")

    def export_sources(self):
        export_conandata_patches(self)

    def package_id(self):
        # Without sanitizers (or Vulkan) the package id is the one it was before the option existed.
        if self.info.options.get_safe("sanitize") == "none":
            self.info.options.rm_safe("sanitize")
        if not self.info.options.get_safe("with_vulkan"):
            self.info.options.rm_safe("with_vulkan")

    def _sanitize_flags(self):
        sanitize = str(self.options.get_safe("sanitize") or "none")
        if sanitize == "none":
            return []
        return [f"-fsanitize={sanitize.replace('+', ',')}", "-fno-omit-frame-pointer"]

    def layout(self):
        cmake_layout(self, src_folder="src")

    def validate(self):
        if self.settings.get_safe("compiler.cppstd"):
            from conan.tools.build import check_min_cppstd
            check_min_cppstd(self, 17)
        if self.options.with_cuda and self.settings.os != "Linux":
            raise ConanInvalidConfiguration(f"{self.ref}: with_cuda is only supported on Linux")
        if self.options.with_cuda and self.options.get_safe("sanitize", "none") != "none":
            raise ConanInvalidConfiguration(f"{self.ref}: sanitize is for CPU builds (with_cuda=False)")
        if self.options.with_vulkan and self.options.with_cuda:
            raise ConanInvalidConfiguration(f"{self.ref}: with_vulkan and with_cuda are separate builds; choose one")
        if self.options.with_vulkan and self.options.get_safe("sanitize", "none") != "none":
            raise ConanInvalidConfiguration(f"{self.ref}: sanitize is for CPU builds (with_vulkan=False)")

    def _is_fork(self):
        return str(self.version).startswith("fork.")

    def source(self):
        if self._is_fork():
            tree = os.environ.get("ELIZA_LLAMA_CPP_DIR")
            if not tree or not os.path.isfile(os.path.join(tree, "include", "llama.h")):
                raise ConanException(
                    f"{self.ref}: ELIZA_LLAMA_CPP_DIR={tree!r} is not a llama.cpp checkout "
                    "(include/llama.h missing)")
            def ignore(directory, names):
                # .git anywhere; build trees only at the top (cmake/build-info.cmake is a source)
                top = os.path.abspath(directory) == os.path.abspath(tree)
                return [n for n in names if n == ".git" or (top and n.startswith("build"))]

            shutil.copytree(tree, self.source_folder, dirs_exist_ok=True, ignore=ignore)
            return
        data = self.conan_data["sources"][str(self.version)]
        archive = os.environ.get("ELIZA_LLAMA_SDIST")
        if not archive or not os.path.isfile(archive):
            raise ConanException(
                f"{self.ref}: set ELIZA_LLAMA_SDIST to the path of {data['archive']} "
                f"(fetch it with: pip download --no-deps --no-binary :all: {data['pip_requirement']})")
        check_sha256(self, archive, data["sha256"])
        staging = os.path.join(self.source_folder, "..", "_sdist")
        unzip(self, archive, destination=staging)
        shutil.copytree(os.path.join(staging, data["subdir"]), self.source_folder, dirs_exist_ok=True)
        shutil.rmtree(staging)
        apply_conandata_patches(self)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["BUILD_SHARED_LIBS"] = False
        tc.cache_variables["CMAKE_POSITION_INDEPENDENT_CODE"] = True
        tc.cache_variables["LLAMA_STANDALONE"] = False
        for flag in ("LLAMA_BUILD_COMMON", "LLAMA_BUILD_TESTS", "LLAMA_BUILD_TOOLS",
                     "LLAMA_BUILD_EXAMPLES", "LLAMA_BUILD_SERVER", "LLAMA_BUILD_APP",
                     "LLAMA_BUILD_UI", "LLAMA_BUILD_HTML", "LLAMA_CURL", "LLAMA_OPENSSL"):
            tc.cache_variables[flag] = False
        tc.cache_variables["LLAMA_BUILD_IS_DEV"] = False
        tc.cache_variables["GGML_NATIVE"] = False
        tc.cache_variables["GGML_OPENMP"] = False  # ggml's own threadpool: no libgomp dependency
        tc.cache_variables["GGML_CCACHE"] = False
        tc.cache_variables["GGML_BACKEND_DL"] = False
        isa = self.options.get_safe("cpu_isa")
        if isa:
            enabled = _X86_ISA[str(isa)]
            for switch in _ALL_X86_SWITCHES:
                tc.cache_variables[switch] = enabled.get(switch, False)
        arm = self.options.get_safe("arm_isa")
        if arm:
            tc.cache_variables["GGML_CPU_ARM_ARCH"] = str(arm)
        self._reproducible(tc)
        sanitize = self._sanitize_flags()
        tc.extra_cflags += sanitize
        tc.extra_cxxflags += sanitize
        tc.extra_sharedlinkflags += sanitize
        tc.extra_exelinkflags += sanitize
        tc.cache_variables["GGML_CUDA"] = bool(self.options.with_cuda)
        if self.options.with_cuda:
            tc.cache_variables["CMAKE_CUDA_ARCHITECTURES"] = str(self.options.cuda_architectures)
            tc.cache_variables["GGML_CUDA_NCCL"] = False
            tc.cache_variables["GGML_CUDA_FA"] = True
            # No libcuda.so link: the driver stub is not part of every toolkit install, and
            # without it a GPU-less host still loads the library and falls back to the CPU.
            tc.cache_variables["GGML_CUDA_NO_VMM"] = True
        tc.cache_variables["GGML_VULKAN"] = bool(self.options.with_vulkan)
        tc.generate()

    def _reproducible(self, tc):
        """No absolute path of this Conan home in the objects, and ccache when configured."""
        # llama.cpp asks git for a build number and commit, which finds the enclosing work
        # tree of a Conan home kept inside a checkout: fixed here, from what the recipe knows.
        tc.cache_variables["LLAMA_BUILD_NUMBER"] = 0
        tc.cache_variables["LLAMA_BUILD_COMMIT"] = (
            str(self.version) if self._is_fork()
            else self.conan_data["sources"][str(self.version)]["upstream_commit"][:7])
        relative_source = os.path.relpath(self.source_folder, self.build_folder).replace("\\", "/")
        prefix_map = f"-ffile-prefix-map={self.source_folder}={relative_source}"
        tc.extra_cflags.append(prefix_map)
        tc.extra_cxxflags.append(prefix_map)
        ccache = self.conf.get("user.eliza:ccache")
        if ccache:
            # CCACHE_BASEDIR over source and build folders: ccache hashes (and compiles)
            # paths relative to the build folder, so the new build folder of a new recipe
            # revision still hits; no debug info here, so the directory is not hashed.
            base = os.path.commonpath([self.source_folder, self.build_folder])
            launcher = ["env", f"CCACHE_BASEDIR={base}", "CCACHE_NOHASHDIR=1"]
            ccache_dir = self.conf.get("user.eliza:ccache_dir")
            if ccache_dir:
                launcher.append(f"CCACHE_DIR={ccache_dir}")
            launcher.append(str(ccache))
            tc.cache_variables["CMAKE_C_COMPILER_LAUNCHER"] = ";".join(launcher)
            tc.cache_variables["CMAKE_CXX_COMPILER_LAUNCHER"] = ";".join(launcher)

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        copy(self, "LICENSE", self.source_folder, os.path.join(self.package_folder, "licenses"))
        cmake = CMake(self)
        cmake.install()
        if self._is_fork():
            checkout = os.environ.get("ELIZA_LLAMA_CPP_DIR", "")
            commit = ""
            try:
                commit = subprocess.run(["git", "-C", checkout, "rev-parse", "HEAD"], capture_output=True,
                                        text=True, check=False).stdout.strip()
            except OSError:
                pass
            source = {"kind": "local-checkout", "path": checkout, "upstream_commit": commit or "unknown",
                      "content_hash": str(self.version)[len("fork."):]}
        else:
            data = self.conan_data["sources"][str(self.version)]
            source = {"kind": "pip-sdist", "requirement": data["pip_requirement"],
                      "sha256": data["sha256"], "upstream_commit": data["upstream_commit"]}
        facts = {
            "version": str(self.version),
            "source": source,
            "cpu_isa": str(self.options.get_safe("cpu_isa") or self.options.get_safe("arm_isa") or "default"),
            "arch": str(self.settings.arch),
            "with_cuda": bool(self.options.with_cuda),
            "cuda_architectures": str(self.options.get_safe("cuda_architectures") or ""),
            "with_vulkan": bool(self.options.with_vulkan),
            "build_type": str(self.settings.build_type),
            "sanitize": str(self.options.get_safe("sanitize") or "none"),
            "compiler": f"{self.settings.compiler} {self.settings.compiler.version}",
        }
        save(self, os.path.join(self.package_folder, "res", "eliza-llama-build.json"),
             json.dumps(facts, indent=2, sort_keys=True) + "\n")

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "llama-cpp")
        self.cpp_info.set_property("cmake_target_name", "llama-cpp::llama-cpp")
        libs = ["llama", "ggml"]
        if self.options.with_cuda:
            libs.append("ggml-cuda")
        if self.options.with_vulkan:
            libs.append("ggml-vulkan")
        libs += ["ggml-cpu", "ggml-base"]
        self.cpp_info.libs = libs
        self.cpp_info.resdirs = ["res"]
        sanitize = self._sanitize_flags()
        if sanitize:  # instrumented archives need the runtime on the consumer's link line
            self.cpp_info.sharedlinkflags = sanitize
            self.cpp_info.exelinkflags = sanitize
        if self.settings.os in ("Linux", "FreeBSD"):
            self.cpp_info.system_libs = ["pthread", "m", "dl"]
        if self.options.with_cuda:
            # The consumer locates the CUDA runtime and cuBLAS (host toolkit or NVIDIA's
            # wheels) and adds them to its link line; see native/CMakeLists.txt.
            self.cpp_info.defines = ["ELIZA_LLAMA_WITH_CUDA=1"]
        if self.options.with_vulkan:
            # The Vulkan loader (libvulkan.so.1), which finds the host's drivers at run time.
            self.cpp_info.system_libs.append("vulkan")
            self.cpp_info.defines = ["ELIZA_LLAMA_WITH_VULKAN=1"]
