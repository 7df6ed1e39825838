"""The package's consumer test (`conan create .` and `conan export-pkg .` run it): a small
C program, built with CMakeDeps against elizainference::elizainference, opens the tiny
bundle and generates greedy text through the C ABI.

The bundle: conf user.eliza:test_bundle, else the repository's deterministic tiny bundle,
written (or reused) by its own generator."""

import os
import subprocess
import sys

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, cmake_layout


class ElizaInferenceTestPackage(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps", "CMakeToolchain", "VirtualRunEnv"
    test_type = "explicit"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def _bundle(self):
        given = self.conf.get("user.eliza:test_bundle")
        if given:
            return str(given)
        repo = os.path.dirname(os.path.abspath(self.recipe_folder))
        code = "from eliza.app.services.bundle import ensure_tiny_bundle; print(ensure_tiny_bundle())"
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"the tiny bundle could not be written: {done.stderr.strip()[-800:]}")
        return done.stdout.strip().splitlines()[-1]

    def test(self):
        if not can_run(self):  # a cross-built package: its consumer built, nothing to run here
            return
        program = os.path.join(self.cpp.build.bindirs[0], "generate")
        self.run(f'"{program}" "{self._bundle()}" 8 "Once upon a time"', env="conanrun")
