"""libelizainference: the consumer recipe that builds native/ against llama.cpp.

Gates are Conan options mirrored into CMake options, both named by matrix.yaml (e.g.
``with_litert`` -> ``ELIZA_ENABLE_LITERT``). They change only this package: llama.cpp's
package id does not depend on them, so every gate cell of a platform reuses one llama.cpp
build from the Conan cache.
"""

import os

import yaml
from conan import ConanFile
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain

required_conan_version = ">=2.0"


def _gates_from_matrix():
    """Conan option -> CMake option for every gate of matrix.yaml, the one place gates are
    declared (the loader in eliza/ has validated the file before any build starts)."""
    matrix = os.path.join(os.path.dirname(os.path.abspath(__file__)), "matrix.yaml")
    with open(matrix, encoding="utf-8") as f:
        data = yaml.safe_load(f) or {}
    return {g["conan_option"]: g["cmake_option"] for g in data.get("gates", [])}


GATES = _gates_from_matrix()


class ElizaInferenceConan(ConanFile):
    name = "elizainference"
    package_type = "shared-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {gate: [True, False] for gate in GATES} | {"with_test_kit": [True, False]}
    default_options = {gate: False for gate in GATES} | {"with_test_kit": False}

    def _llama_version(self):
        return str(self.conf.get("user.eliza:llama_cpp_version", default="0.3.36"))

    def requirements(self):
        self.requires(f"llama-cpp/{self._llama_version()}")

    def layout(self):
        self.folders.source = "native"
        self.folders.build = "build"
        self.folders.generators = "generators"

    def generate(self):
        CMakeDeps(self).generate()
        tc = CMakeToolchain(self)
        for gate, cmake_option in GATES.items():
            tc.cache_variables[cmake_option] = bool(self.options.get_safe(gate))
        tc.cache_variables["ELIZA_BUILD_TEST_KIT"] = bool(self.options.with_test_kit)
        llama = self.dependencies["llama-cpp"]
        tc.cache_variables["ELIZA_LLAMA_BUILD_FACTS"] = os.path.join(
            llama.package_folder, "res", "eliza-llama-build.json"
        ).replace("\\", "/")
        tc.cache_variables["ELIZA_WITH_CUDA"] = bool(llama.options.with_cuda)
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()
