"""The llama.cpp source pin and the local-checkout override, without building."""

from __future__ import annotations

from pathlib import Path

import pytest

from eliza.adapters.conan import BuildError, fork_version, resolve_llama_source
from eliza.adapters.llama_source import RECIPE_DIR, pinned_source


def test_pin_is_read_from_the_recipe() -> None:
    pin = pinned_source()
    text = (RECIPE_DIR / "conandata.yml").read_text()
    assert pin.sha256 in text and len(pin.sha256) == 64
    assert pin.pip_requirement == f"llama-cpp-python=={pin.version}"
    assert pin.upstream_commit in text and pin.subdir.endswith("vendor/llama.cpp")


def fake_checkout(root: Path, source: str) -> Path:
    (root / "include").mkdir(parents=True)
    (root / "include" / "llama.h").write_text("// llama.h\n")
    (root / "src").mkdir()
    (root / "src" / "llama.cpp").write_text(source)
    (root / "CMakeLists.txt").write_text("project(llama)\n")
    return root


def test_fork_version_follows_the_build_inputs(tmp_path: Path) -> None:
    a = fake_checkout(tmp_path / "a", "int x;\n")
    b = fake_checkout(tmp_path / "b", "int x;\n")
    c = fake_checkout(tmp_path / "c", "int y;\n")
    assert fork_version(a) == fork_version(b) != fork_version(c)
    assert fork_version(a).startswith("fork.")
    (a / "README.md").write_text("docs do not change the build")
    assert fork_version(a) == fork_version(b)


def test_override_that_is_not_a_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=r"ELIZA_LLAMA_CPP_DIR=.*is not a llama.cpp checkout"):
        resolve_llama_source(tmp_path / "cache", {"ELIZA_LLAMA_CPP_DIR": str(tmp_path)})
