"""libelizainference: the consumer recipe that builds native/ against llama.cpp.

Gates come from matrix.yaml: each is a Conan option mirrored into a CMake option (e.g.
``with_litert`` -> ``ELIZA_ENABLE_LITERT``), and the whole gate table (id, option, factory
name, preference rank, artifacts) goes to CMake as ELIZA_GATE_TABLE, from which
native/cmake/gates.cmake derives sources, registration and build-info.json. Gates change
only this package: llama.cpp's package id does not depend on them, so every gate cell of a
platform reuses one llama.cpp build from the Conan cache.
"""

import json
import os
import re

import yaml
from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain
from conan.tools.files import copy, load, save

required_conan_version = ">=2.0"

# The matrix the sessions use (ELIZA_MATRIX, which eliza passes to every build), else the
# repository's own: the options and the gate table must come from the same file.
MATRIX = os.environ.get("ELIZA_MATRIX") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "matrix.yaml"
)
DEFAULT_PREFERENCE_RANK = 50  # the default of gates[].preference_rank in matrix.schema.json

# A table cell goes through CMake's -D"..." command line and into C++ string literals: no
# list separators (| , ;), quotes, or shell characters. The schema's patterns already keep
# ids, options and factory names to this; artifacts are checked here.
_SAFE_FIELD = re.compile(r"^[A-Za-z0-9_.+@/*-]+$")


def gate_table(matrix):
    """The gates of a parsed matrix.yaml, in file order, with defaults applied: the one table
    CMake builds the gates from (the loader in eliza/ has validated the file before any
    build starts)."""
    table = []
    for i, g in enumerate(matrix.get("gates") or []):
        row = {
            "id": g["id"],
            "cmake_option": g["cmake_option"],
            "conan_option": g["conan_option"],
            "factory": g["factory"],
            "preference_rank": int(g.get("preference_rank", DEFAULT_PREFERENCE_RANK)),
            "artifacts": tuple(g["artifacts"]),
        }
        checked = {key: row[key] for key in ("id", "cmake_option", "factory")}
        checked.update({f"artifacts[{j}]": a for j, a in enumerate(row["artifacts"])})
        for key, value in checked.items():
            if not _SAFE_FIELD.match(value):
                raise ValueError(
                    f"{MATRIX}: gates[{i}].{key} {value!r}: only letters, digits and _.+@/*- can be "
                    "passed to CMake"
                )
        table.append(row)
    return table


def cmake_gate_table(table):
    """ELIZA_GATE_TABLE for native/cmake/gates.cmake: one list item per gate,
    "<id>|<CMake option>|<factory>|<preference rank>|<artifact>,<artifact>..."."""
    return ";".join(
        "|".join(
            [g["id"], g["cmake_option"], g["factory"], str(g["preference_rank"]), ",".join(g["artifacts"])]
        )
        for g in table
    )


def _read_matrix():
    with open(MATRIX, encoding="utf-8") as f:
        return yaml.safe_load(f) or {}


def llama_choices(matrix):
    """{option: default} of llama.cpp's choices a consumer may want (the keys of the
    platforms' llama_options, with_cuda and with_vulkan): this package's own options, because
    llama.cpp is linked in and never part of a consumer's graph. A default is the value the
    first platform of the matrix that sets it chooses (every platform's build passes its own);
    with_cuda's and with_vulkan's are False (the CPU build)."""
    found = {}
    for platform in matrix.get("platforms") or []:
        for key, value in (platform.get("llama_options") or {}).items():
            found.setdefault(str(key), str(value))
    return {"with_cuda": False, "with_vulkan": False, **dict(sorted(found.items()))}


def llama_choices_by_arch(matrix):
    """{option: {Conan arch, ...}}: the architectures whose platforms set the option (an
    instruction-set level means nothing on another architecture)."""
    arches = {"x86_64": "x86_64", "arm64": "armv8"}
    found = {}
    for platform in matrix.get("platforms") or []:
        for key in platform.get("llama_options") or {}:
            arch = str(platform.get("arch"))
            found.setdefault(str(key), set()).add(arches.get(arch, arch))
    return found


_MATRIX_DATA = _read_matrix()
GATE_TABLE = gate_table(_MATRIX_DATA)
GATES = {g["conan_option"]: g["cmake_option"] for g in GATE_TABLE}  # Conan option -> CMake option
LLAMA_CHOICES = llama_choices(_MATRIX_DATA)
LLAMA_CHOICE_ARCHES = llama_choices_by_arch(_MATRIX_DATA)
# Only with CUDA do its architectures choose anything.
_CUDA_ONLY = ("cuda_architectures",)


# The public header's ABI version is the package's major version (set_version).
_ABI_DEFINE = re.compile(r"^#define ELIZA_INFERENCE_ABI_VERSION ([0-9]+)$", re.MULTILINE)
# What a cell's build leaves beside the library that ships with it, as the build made it:
# the library and its SONAME links, a gate's module (libelizainference-<gate>.so) and the
# runtimes a gate loads from the library's folder in their wheel's layout (docs/backends.md).
# The test kit (libelizainference_testkit) and the bench tools never ship.
_SHIPPED_LIBRARIES = ("libelizainference.so*", "libelizainference.*.dylib", "libelizainference.dylib",
                      "libelizainference-*.so", "libelizainference-*.dylib")
_SHIPPED_RUNTIME_DIRS = ("mlx/lib", "mlx_cpu.libs", "litert_lm")


def _pypi_purl(requirement):
    """ "name==version" as the package URL pkg:pypi/name@version (a URI, as CycloneDX wants)."""
    name, _, version = requirement.partition("==")
    purl = f"pkg:pypi/{name.strip().lower()}"
    return f"{purl}@{version.strip()}" if version else purl


class ElizaInferenceConan(ConanFile):
    name = "elizainference"
    description = "On-device inference behind one C ABI: llama.cpp in-process, other runtimes behind gates"
    license = "MIT"
    package_type = "shared-library"
    # llama.cpp is linked in and the runtimes are copied beside the library: a consumer's
    # graph is this package alone (its requirements are never expanded there, nor part of
    # its package id), so a consumer needs neither their recipes nor their options.
    # Packaging it again from source needs tools.graph:vendor=build.
    vendor = True
    # The recipe reads the gate table from the matrix, in the cache too; the sources are the
    # native tree only (layout: folders.source = "native").
    exports = "matrix.yaml", "LICENSE"
    exports_sources = (
        "native/CMakeLists.txt",
        "native/cmake/*",
        "native/include/*",
        "native/src/*",
        "native/testkit/*",
        "native/tools/*",
    )
    settings = "os", "arch", "compiler", "build_type"
    options = {gate: [True, False] for gate in GATES} | {
        "with_test_kit": [True, False],
        # A build variant's sanitizers (matrix.yaml `variants`), as llama-cpp's option.
        "sanitize": ["none", "address", "undefined", "address+undefined"],
    } | {key: ([True, False] if isinstance(value, bool) else ["ANY"]) for key, value in LLAMA_CHOICES.items()}
    default_options = (
        {gate: False for gate in GATES} | {"with_test_kit": False, "sanitize": "none"} | LLAMA_CHOICES
    )

    def set_version(self):
        """The header's ABI version as <abi>.0.0, unless the command line names a version;
        a named version must keep the ABI version as its major (a release of ABI 9 is 9.x.y)."""
        header = os.path.join(self.recipe_folder, "native", "include", "eliza-inference-ffi.h")
        found = _ABI_DEFINE.search(load(self, header))
        if found is None:
            raise ConanInvalidConfiguration(f"{header}: no '#define ELIZA_INFERENCE_ABI_VERSION <n>' line")
        abi = found.group(1)
        if not self.version:
            self.version = f"{abi}.0.0"
        elif str(self.version).split(".")[0] != abi:
            raise ConanInvalidConfiguration(
                f"version {self.version}: its major must be the ABI version {abi} of {header}"
            )

    def _llama_version(self):
        return str(self.conf.get("user.eliza:llama_cpp_version", default="0.3.36"))

    def _runtimes(self):
        """The gates' runtime packages this cell's build provides, {gate id: reference}:
        eliza passes them (user.eliza:runtimes, "mlx=mlx/0.32.4,...") from matrix.yaml's
        runtime_package and runtime_platforms for the cell's platform and gates."""
        value = str(self.conf.get("user.eliza:runtimes", default="") or "")
        pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
        return {gate.strip(): ref.strip() for gate, ref in pairs}

    def config_options(self):
        for key, arches in LLAMA_CHOICE_ARCHES.items():
            if str(self.settings.arch) not in arches:
                self.options.rm_safe(key)

    def configure(self):
        if not self.options.get_safe("with_cuda"):
            for key in _CUDA_ONLY:
                self.options.rm_safe(key)
        # llama.cpp's choices are this package's options, passed on to the package linked in.
        for key in LLAMA_CHOICES:
            value = self.options.get_safe(key)
            if value is not None:
                setattr(self.options["llama-cpp"], key, value)

    def requirements(self):
        self.requires(f"llama-cpp/{self._llama_version()}")
        for ref in self._runtimes().values():
            # Shipped beside the library by its gate module, never linked into it. Not
            # visible: the package carries its own copy, so a consumer never resolves the
            # runtime's package (its CMakeDeps would look for a CMake package it has none of).
            self.requires(ref, run=True, headers=True, libs=False, visible=False)

    def layout(self):
        self.folders.source = "native"
        self.folders.build = "build"
        self.folders.generators = "generators"

    def generate(self):
        CMakeDeps(self).generate()
        tc = CMakeToolchain(self)
        # The whole table, so CMake declares every gate's option and knows its factory,
        # artifacts and rank; which gates are ON in this cell travels as those options.
        tc.cache_variables["ELIZA_GATE_TABLE"] = cmake_gate_table(GATE_TABLE)
        for gate, cmake_option in GATES.items():
            tc.cache_variables[cmake_option] = bool(self.options.get_safe(gate))
        tc.cache_variables["ELIZA_BUILD_TEST_KIT"] = bool(self.options.with_test_kit)
        # How the link keeps all but the C ABI local, chosen per platform by eliza.core.target.
        tc.cache_variables["ELIZA_EXPORT_CONTROL"] = str(
            self.conf.get("user.eliza:export_control", default="gnu-version-script")
        )
        tc.cache_variables["ELIZA_SANITIZE"] = str(self.options.sanitize)
        llama = self.dependencies["llama-cpp"]
        for key in LLAMA_CHOICES:  # a command line's llama-cpp/* option would win over configure()
            ours, linked = self.options.get_safe(key), llama.options.get_safe(key)
            if ours is not None and str(ours) != str(linked):
                raise ConanInvalidConfiguration(
                    f"option {key}: elizainference's is {ours}, llama-cpp's {linked}; set "
                    f"elizainference/*:{key} (it is passed on to llama-cpp), not llama-cpp/*:{key}"
                )
        tc.cache_variables["ELIZA_LLAMA_BUILD_FACTS"] = os.path.join(
            llama.package_folder, "res", "eliza-llama-build.json"
        ).replace("\\", "/")
        tc.cache_variables["ELIZA_WITH_CUDA"] = bool(llama.options.with_cuda)
        for gate, ref in self._runtimes().items():
            root = self.dependencies[ref.split("/", 1)[0]].package_folder
            tc.cache_variables[f"ELIZA_RUNTIME_ROOT_{gate}"] = root.replace("\\", "/")
        # Reproducible whatever the Conan home: llama.cpp's headers are named by a fixed
        # prefix in the debug info (native/CMakeLists.txt maps the checkout's own folders).
        tc.cache_variables["ELIZA_PREFIX_MAPS"] = f"{llama.package_folder}=/llama-cpp".replace("\\", "/")
        ccache = self.conf.get("user.eliza:ccache")
        if ccache:  # the profile names ccache where it is installed (see eliza.adapters.conan)
            # CCACHE_BASEDIR over the checkout: ccache hashes the paths under it relative
            # to the build folder, so another copy of the repository (a CI clone, a
            # rehearsal's) hits the same entries. The directory is not hashed: the prefix
            # maps keep the checkout's path out of the debug information.
            launcher = ["env", f"CCACHE_BASEDIR={self.recipe_folder}", "CCACHE_NOHASHDIR=1"]
            ccache_dir = self.conf.get("user.eliza:ccache_dir")
            if ccache_dir:
                launcher.append(f"CCACHE_DIR={ccache_dir}")
            launcher.append(str(ccache))
            tc.cache_variables["CMAKE_C_COMPILER_LAUNCHER"] = ";".join(launcher)
            tc.cache_variables["CMAKE_CXX_COMPILER_LAUNCHER"] = ";".join(launcher)
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package_id(self):
        # The test kit is built beside the library for the selector tests and never shipped:
        # a package exported from a verified build tree (with it) and one built without it
        # are the same package.
        del self.info.options.with_test_kit
        # Without Vulkan the package id is the one it was before the option existed.
        if not self.info.options.get_safe("with_vulkan"):
            self.info.options.rm_safe("with_vulkan")
        # A C ABI with everything C++ linked in or kept local: the consumer's compiler, C++
        # standard and standard library do not select the binary (Conan Center's rule for a
        # C library). Neither does the build type, except where it selects a C runtime
        # (MSVC's debug one), which none of the matrix's platforms has.
        del self.info.settings.compiler
        if self.info.settings.get_safe("os") != "Windows":
            del self.info.settings.build_type

    def package(self):
        """The files the checks judged, copied byte for byte from the build folder (no
        install step that could rewrite them: a release compares the packaged library's
        sha256 with its evidence), so `conan export-pkg` of a verified cell ships exactly
        what was verified; `native/CMakeLists.txt`'s install rules do the same for CMake
        users without Conan."""
        build, lib = self.build_folder, os.path.join(self.package_folder, "lib")
        copy(self, "eliza-inference-ffi.h", os.path.join(self.source_folder, "include"),
             os.path.join(self.package_folder, "include"))
        for pattern in _SHIPPED_LIBRARIES:
            copy(self, pattern, build, lib, keep_path=False)
        for folder in _SHIPPED_RUNTIME_DIRS:
            copy(self, "*", os.path.join(build, folder), os.path.join(lib, folder))
        copy(self, "build-info.json", build, os.path.join(self.package_folder, "res"))
        # What a user without Conan needs, as the build wrote it (native/CMakeLists.txt), at
        # the places `cmake --install` puts it: the CMake package (config, version, the
        # exported target, whose paths are relative to its own folder) and the pkg-config
        # file (relative to ${pcfiledir}). A Conan consumer's CMakeDeps and PkgConfigDeps
        # write their own and never look here.
        cmake_dir = os.path.join(lib, "cmake", "elizainference")
        for pattern in ("elizainferenceConfig.cmake", "elizainferenceConfigVersion.cmake"):
            copy(self, pattern, build, cmake_dir, keep_path=False)
        copy(self, "*elizainferenceTargets*.cmake", os.path.join(build, "CMakeFiles", "Export"), cmake_dir,
             keep_path=False)
        copy(self, "elizainference.pc", build, os.path.join(lib, "pkgconfig"), keep_path=False)
        # The project's own license, at the top (an unpacked archive shows it) and where
        # Conan's tools look, beside those of what it ships.
        for folder in (self.package_folder, os.path.join(self.package_folder, "licenses")):
            copy(self, "LICENSE", self.recipe_folder, folder, keep_path=False)
        # The licenses of everything shipped: llama.cpp is linked in, the runtimes are copied.
        for dep in self.dependencies.host.values():
            copy(self, "*", os.path.join(dep.package_folder, "licenses"),
                 os.path.join(self.package_folder, "licenses", dep.ref.name))
        self._write_sbom()

    def _write_sbom(self):
        """A CycloneDX 1.6 SBOM from Conan's own tool, with what the graph does not know:
        llama.cpp's upstream commit and source archive hash, the runtimes' pinned wheels,
        the compiler. In the package's metadata folder: its timestamp and serial number
        leave the package revision alone."""
        from conan.tools.sbom import cyclonedx_1_6

        extra = {}
        for dep in self.dependencies.host.values():
            facts = os.path.join(dep.package_folder, "res", "eliza-llama-build.json")
            if os.path.isfile(facts):
                source = json.loads(load(self, facts)).get("source", {})
                reference = {"type": "source-distribution", "url": _pypi_purl(source.get("requirement", ""))}
                if source.get("sha256"):
                    reference["hashes"] = [{"alg": "SHA-256", "content": source["sha256"]}]
                extra[dep.ref.name] = {
                    "externalReferences": [reference, {"type": "vcs", "url": str(dep.url or "")}],
                    "pedigree": {"commits": [{"uid": source.get("upstream_commit", "unknown"),
                                              "url": str(dep.url or "")}]},
                }
                continue
            pins = (dep.conan_data or {}).get("sources", {}).get(str(dep.ref.version), {})
            pin = pins.get(f"{dep.settings.get_safe('os')}-{dep.settings.get_safe('arch')}")
            if pin:
                extra[dep.ref.name] = {"externalReferences": [{
                    "type": "distribution", "comment": pin["wheel"],
                    "url": _pypi_purl(pin["pip_requirement"]),
                    "hashes": [{"alg": "SHA-256", "content": pin["sha256"]}],
                }]}
        sbom = cyclonedx_1_6(self, extra_info=extra)
        # The root component is this package: Conan's tool names it only by name and type.
        root = sbom["metadata"]["component"]
        root["version"] = str(self.version)
        root["purl"] = f"pkg:conan/{self.name}@{self.version}"
        root["licenses"] = [{"license": {"id": self.license}}]
        compiler = self.settings.get_safe("compiler")
        if compiler:
            sbom["metadata"]["tools"]["components"].append(
                {"type": "application", "name": str(compiler),
                 "version": str(self.settings.get_safe("compiler.version") or "")})
        save(self, os.path.join(self.package_metadata_folder, "sbom", "elizainference.cdx.json"),
             json.dumps(sbom, indent=2, sort_keys=True) + "\n")

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "elizainference")
        self.cpp_info.set_property("cmake_target_name", "elizainference::elizainference")
        self.cpp_info.set_property("pkg_config_name", "elizainference")
        self.cpp_info.libs = ["elizainference"]
        self.cpp_info.resdirs = ["res"]
