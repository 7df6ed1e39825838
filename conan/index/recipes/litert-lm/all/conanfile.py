"""The LiteRT-LM engine, packaged from the pinned PyPI wheel of the target.

Project-owned recipe served from the local recipe index in ``conan/index``. Nothing is
compiled: ``eliza`` fetches the target's wheel with pip and passes the folder holding it in
the ``ELIZA_RUNTIME_WHEELS`` environment variable; this recipe verifies the wheel's sha256
(``conandata.yml``) before unpacking it, so a wrong or tampered file fails the build.

The package holds ``litert_lm/liblitert-lm.so`` (no SONAME; its C API is ``litert_lm_*``)
and nothing to link: the library's litert backend dlopen()s it with RTLD_LOCAL from the
folder the library was loaded from, where the gate's build copies it. The wheel ships no
header: the backend declares the functions it uses (native/src/backends/litert/).
"""

import os

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.files import check_sha256, copy, unzip

required_conan_version = ">=2.0"


class LiteRtLmConan(ConanFile):
    name = "litert-lm"
    description = "LiteRT-LM, on-device LLM inference engine (C API), as its PyPI wheel ships it"
    license = "Apache-2.0"
    url = "https://github.com/google-ai-edge/LiteRT-LM"
    package_type = "shared-library"
    settings = "os", "arch"

    def _pin(self):
        key = f"{self.settings.os}-{self.settings.arch}"
        pins = self.conan_data["sources"][self.version]
        if key not in pins:
            raise ConanInvalidConfiguration(
                f"{self.ref}: no LiteRT-LM wheel for {key}; pinned: {', '.join(sorted(pins))} (conandata.yml)"
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
        unzip(self, wheel, destination=os.path.join(self.build_folder, "wheel"), pattern="*.so")
        unzip(self, wheel, destination=os.path.join(self.build_folder, "wheel"), pattern="*.dist-info/METADATA")

    def package(self):
        wheel = os.path.join(self.build_folder, "wheel")
        copy(self, "liblitert-lm.so", os.path.join(wheel, "litert_lm"), os.path.join(self.package_folder, "litert_lm"))
        # The wheel carries no license file; its METADATA names the license (Apache-2.0).
        copy(self, "*.dist-info/METADATA", wheel, os.path.join(self.package_folder, "licenses"), keep_path=False)

    def package_info(self):
        # Loaded at run time by path, never linked: no include dirs, no libs for consumers.
        self.cpp_info.set_property("cmake_find_mode", "none")
        self.cpp_info.includedirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.bindirs = []
