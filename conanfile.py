"""libelizainference: the consumer recipe that builds native/ against llama.cpp.

Gates come from matrix.yaml: each is a Conan option mirrored into a CMake option (e.g.
``with_litert`` -> ``ELIZA_ENABLE_LITERT``), and the whole gate table (id, option, factory
name, preference rank, artifacts) goes to CMake as ELIZA_GATE_TABLE, from which
native/cmake/gates.cmake derives sources, registration and build-info.json. Gates change
only this package: llama.cpp's package id does not depend on them, so every gate cell of a
platform reuses one llama.cpp build from the Conan cache.
"""

import os
import re

import yaml
from conan import ConanFile
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain

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


GATE_TABLE = gate_table(_read_matrix())
GATES = {g["conan_option"]: g["cmake_option"] for g in GATE_TABLE}  # Conan option -> CMake option


class ElizaInferenceConan(ConanFile):
    name = "elizainference"
    package_type = "shared-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {gate: [True, False] for gate in GATES} | {
        "with_test_kit": [True, False],
        # A build variant's sanitizers (matrix.yaml `variants`), as llama-cpp's option.
        "sanitize": ["none", "address", "undefined", "address+undefined"],
    }
    default_options = {gate: False for gate in GATES} | {"with_test_kit": False, "sanitize": "none"}

    def _llama_version(self):
        return str(self.conf.get("user.eliza:llama_cpp_version", default="0.3.36"))

    def _runtimes(self):
        """The gates' runtime packages this cell's build provides, {gate id: reference}:
        eliza passes them (user.eliza:runtimes, "mlx=mlx/0.32.4,...") from matrix.yaml's
        runtime_package and runtime_platforms for the cell's platform and gates."""
        value = str(self.conf.get("user.eliza:runtimes", default="") or "")
        pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
        return {gate.strip(): ref.strip() for gate, ref in pairs}

    def requirements(self):
        self.requires(f"llama-cpp/{self._llama_version()}")
        for ref in self._runtimes().values():
            # Shipped beside the library by its gate module, never linked into it.
            self.requires(ref, run=True, headers=True, libs=False)

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
