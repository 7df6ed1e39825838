"""ABI facts checked from outside: the config layout and the export list."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from eliza.adapters.abi_tools import exported_symbols
from eliza.adapters.ffi import StreamConfig
from eliza.core.c_abi import header_functions
from eliza.core.layout import REPO_ROOT

HEADER = REPO_ROOT / "native" / "include" / "eliza-inference-ffi.h"


def documented_offsets() -> dict[str, int]:
    """The 'offset N field' table in the header comment, which consumers marshal by."""
    table = re.findall(r"^\s*\*\s+offset\s+(\d+)\s+(\w+)", HEADER.read_text(), flags=re.M)
    return {name: int(offset) for offset, name in table}


def test_config_layout_matches_the_header() -> None:
    documented = documented_offsets()
    assert list(documented) == [name for name, _ in StreamConfig._fields_]
    assert ctypes.sizeof(StreamConfig) == 64
    for name, offset in documented.items():
        assert getattr(StreamConfig, name).offset == offset, name


def asserted_layouts() -> dict[str, dict[str, int]]:
    """The header's ELIZA_LAYOUT_ASSERT offsets, per data model ("LP64", "ILP32")."""
    found: dict[str, dict[str, int]] = {}
    for field, offset, model in re.findall(
        r"ELIZA_LAYOUT_ASSERT\(offsetof\(eliza_llm_stream_config_t, (\w+)\) == (\d+), \"(\w+) offset\"\)",
        HEADER.read_text(),
    ):
        found.setdefault(model, {})[field] = int(offset)
    return found


def documented_ilp32_offsets() -> dict[str, int]:
    text = " ".join(HEADER.read_text().split())
    table = re.search(r"ILP32 offsets ([^.]*)\.", text)
    assert table, "the header documents no ILP32 offsets"
    return {name: int(offset) for name, offset in re.findall(r"(\w+) (\d+)", table.group(1))}


def test_config_layout_asserts_match_the_header() -> None:
    asserted = asserted_layouts()
    assert asserted["LP64"] == documented_offsets()
    assert asserted["ILP32"] == documented_ilp32_offsets()
    assert list(asserted["ILP32"]) == [name for name, _ in StreamConfig._fields_]
    source = HEADER.read_text()
    assert "sizeof(eliza_llm_stream_config_t) == 64" in source
    assert "sizeof(eliza_llm_stream_config_t) == 48" in source


MULTILIB = {"c": "gcc-multilib", "c++": "g++-multilib"}


def _syntax_check(compiler: str, bits: int, lang: str, src: Path) -> subprocess.CompletedProcess[str]:
    std = "-std=c11" if lang == "c" else "-std=c++17"
    return subprocess.run(
        [compiler, f"-m{bits}", "-ffreestanding", std, "-fsyntax-only", str(src)],
        capture_output=True,
        text=True,
        check=False,
    )


def cannot_target(compiler: str, bits: int, lang: str, work: Path) -> str | None:
    """Why the compiler cannot check a trivial program for -m{bits} (None when it can): the
    standard headers the public header includes, and nothing of the project's. Only that
    is a reason to skip; once it compiles, any error in the header is the header's."""
    probe = work / ("probe.c" if lang == "c" else "probe.cpp")
    probe.write_text(
        f"#include <stddef.h>\n#include <stdint.h>\nint probe[sizeof(void *) == {bits // 8} ? 1 : -1];\n"
    )
    result = _syntax_check(compiler, bits, lang, probe)
    if result.returncode == 0:
        return None
    said = (result.stderr.strip().splitlines() or ["no output"])[0][:200]
    install = f"install {MULTILIB[lang]} (Debian/Ubuntu)" if bits == 32 else "needs a 64-bit target compiler"
    return f"{compiler} -m{bits} cannot compile a trivial {lang} program here ({said}): {install}"


@pytest.mark.parametrize("bits", [32, 64])
@pytest.mark.parametrize("lang", ["c", "c++"])
def test_header_layout_asserts_hold_per_data_model(bits: int, lang: str, tmp_path: Path) -> None:
    """The header alone compiles for 32- and 64-bit pointers (a 32-bit Android build
    included): the layout assertion is per data model, not LP64's everywhere. Skipped only
    where the compiler cannot target that data model at all; a header that does not
    compile (as C, as C++, for either data model) fails."""
    compiler = shutil.which("gcc" if lang == "c" else "g++")
    if compiler is None:
        pytest.skip(f"no {lang} compiler on PATH (ci/setup.sh installs g++)")
    why = cannot_target(compiler, bits, lang, tmp_path)
    if why is not None:
        pytest.skip(why)
    src = tmp_path / ("t.c" if lang == "c" else "t.cpp")
    src.write_text(f'#include "{HEADER}"\nint probe[sizeof(void *) == {bits // 8} ? 1 : -1];\n')
    result = _syntax_check(compiler, bits, lang, src)
    assert result.returncode == 0, f"{HEADER} does not compile as {lang} with -m{bits}:\n{result.stderr}"


def test_only_the_c_abi_is_exported(library_path: Path) -> None:
    symbols = exported_symbols(library_path)
    assert symbols, "nm listed nothing"
    assert [s for s in symbols if not s.startswith("eliza_inference_")] == []
    assert set(symbols) == header_functions(HEADER.read_text())
