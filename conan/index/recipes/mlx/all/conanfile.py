"""MLX's C++ runtime, packaged from the pinned PyPI wheel of the target.

Project-owned recipe served from the local recipe index in ``conan/index``. Nothing is
compiled: ``eliza`` fetches the target's wheel with pip and passes the folder holding it in
the ``ELIZA_RUNTIME_WHEELS`` environment variable; this recipe verifies the wheel's sha256
(``conandata.yml``) before unpacking it, so a wrong or tampered file fails the build.

The package keeps the wheel's layout: ``mlx/lib/libmlx.so`` finds its BLAS and LAPACK in
``mlx_cpu.libs/`` through its RPATH ``$ORIGIN/../../mlx_cpu.libs``, and its CMake package is
``mlx/share/cmake/MLX`` (``find_package(MLX CONFIG)``). The library's MLX module links it
and ships it beside itself in that same layout.
"""

import os

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import check_sha256, copy, unzip

required_conan_version = ">=2.0"


class MlxConan(ConanFile):
    name = "mlx"
    description = "MLX array framework, C++ runtime (CPU on Linux, Metal on macOS)"
    license = "MIT"
    url = "https://github.com/ml-explore/mlx"
    package_type = "shared-library"
    settings = "os", "arch"

    def _pin(self):
        key = f"{self.settings.os}-{self.settings.arch}"
        pins = self.conan_data["sources"][self.version]
        if key not in pins:
            raise ConanInvalidConfiguration(
                f"{self.ref}: no MLX wheel for {key}; pinned: {', '.join(sorted(pins))} (conandata.yml)"
            )
        return pins[key]

    def validate(self):
        self._pin()

    def build(self):
        pin = self._pin()
        folder = os.environ.get("ELIZA_RUNTIME_WHEELS")
        if not folder or not os.path.isfile(os.path.join(folder, pin["wheel"])):
            raise ConanInvalidConfiguration(
                f"{self.ref}: set ELIZA_RUNTIME_WHEELS to the folder holding {pin['wheel']} "
                f"(eliza fetches it with pip: {pin['pip_requirement']} for {pin['pip_platform']})"
            )
        wheel = os.path.join(folder, pin["wheel"])
        check_sha256(self, wheel, pin["sha256"])
        unzip(self, wheel, destination=os.path.join(self.build_folder, "wheel"))

    def package(self):
        wheel = os.path.join(self.build_folder, "wheel")
        copy(self, "*", os.path.join(wheel, "mlx"), os.path.join(self.package_folder, "mlx"))
        copy(self, "*", os.path.join(wheel, "mlx_cpu.libs"), os.path.join(self.package_folder, "mlx_cpu.libs"))
        copy(self, "*.dist-info/licenses/*", wheel, os.path.join(self.package_folder, "licenses"), keep_path=False)

    def package_info(self):
        # The wheel's own CMake package is what consumers use (find_package(MLX CONFIG)
        # under mlx/share/cmake/MLX); Conan's generators stay out of the way.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.includedirs = ["mlx/include"]
        self.cpp_info.libdirs = ["mlx/lib"]
        self.cpp_info.libs = ["mlx"]
        self.cpp_info.builddirs = ["mlx/share/cmake/MLX"]
