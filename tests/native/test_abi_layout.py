"""ABI facts checked from outside: the config layout and the export list."""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

from eliza.adapters.ffi import StreamConfig
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


def test_config_layout_static_asserts_match_the_header() -> None:
    source = (REPO_ROOT / "native" / "src" / "ffi.cpp").read_text()
    asserted = dict(re.findall(r"offsetof\(eliza_llm_stream_config_t, (\w+)\) == (\d+)", source))
    assert {k: int(v) for k, v in asserted.items()} == documented_offsets()
    assert "sizeof(eliza_llm_stream_config_t) == 64" in source


def test_only_the_c_abi_is_exported(library_path: Path) -> None:
    out = subprocess.run(
        ["nm", "-D", "--defined-only", str(library_path)], check=True, capture_output=True, text=True
    ).stdout
    symbols = [line.split()[-1] for line in out.splitlines() if line.strip()]
    assert symbols, "nm listed nothing"
    assert [s for s in symbols if not s.startswith("eliza_inference_")] == []
    header_functions = set(re.findall(r"ELIZA_API [^;]*?\b(eliza_inference_\w+)\(", HEADER.read_text()))
    assert set(symbols) == header_functions
