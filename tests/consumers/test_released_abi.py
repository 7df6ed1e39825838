"""The consumers carry the released ABI (as a shipped binding does), so it must be the one
native/abi/ records: the version of the header and every status constant of abi-<v>.constants."""

from __future__ import annotations

import re

from eliza.adapters.ffi import expected_abi_version
from eliza.core.layout import REPO_ROOT
from tests.consumers.helpers import JNI_SOURCES, NODE_CONSUMER


def released_constants() -> dict[str, int]:
    version = expected_abi_version()
    lines = (REPO_ROOT / "native" / "abi" / f"abi-{version}.constants").read_text().split("\n")
    return {name: int(value) for name, value in (line.split() for line in lines if line.strip())}


def test_node_consumer_carries_the_released_abi() -> None:
    text = (NODE_CONSUMER.parent / "abi.js").read_text(encoding="utf-8")
    version = re.search(r"const ABI_VERSION = '(\d+)';", text)
    assert version and version[1] == expected_abi_version()
    found = {m[1]: int(m[2]) for m in re.finditer(r"^\s+(ELIZA_[A-Z_]+): (-?\d+),$", text, re.M)}
    assert found == released_constants()


def test_jni_consumer_carries_the_released_abi() -> None:
    text = (JNI_SOURCES / "java" / "eliza" / "inference" / "jni" / "ElizaNative.java").read_text(
        encoding="utf-8"
    )
    version = re.search(r'String ABI_VERSION = "(\d+)";', text)
    assert version and version[1] == expected_abi_version()
    found = {m[1]: int(m[2]) for m in re.finditer(r"static final int (ELIZA_[A-Z_]+) = (-?\d+);", text)}
    assert found == released_constants()
