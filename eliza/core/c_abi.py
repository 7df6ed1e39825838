"""Facts of the C ABI read from the text of the public header, the one place they are
defined: the ABI version and the exported functions."""

from __future__ import annotations

import re

_VERSION = re.compile(r"^\s*#\s*define\s+ELIZA_INFERENCE_ABI_VERSION\s+(\d+)\s*$", re.M)
_FUNCTION = re.compile(r"ELIZA_API [^;]*?\b(eliza_inference_\w+)\(")


class HeaderError(ValueError):
    pass


def abi_version(header_text: str, source: str = "the public header") -> str:
    """The decimal ELIZA_INFERENCE_ABI_VERSION, as eliza_inference_abi_version() returns it."""
    found = _VERSION.findall(header_text)
    if len(found) != 1:
        raise HeaderError(
            f"{source}: expected one '#define ELIZA_INFERENCE_ABI_VERSION <n>', found {len(found)}"
        )
    return str(found[0])


_CONSTANT = re.compile(r"^\s*#\s*define\s+(ELIZA_[A-Z0-9_]+)\s+(\(?\s*-?\d+\s*\)?)\s*$", re.M)


def header_constants(header_text: str) -> dict[str, int]:
    """The numeric ELIZA_* constants the header defines (status codes): part of the ABI,
    though no debug information records them. The ABI version is the baseline's name."""
    return {
        name: int(value.strip("() \t"))
        for name, value in _CONSTANT.findall(header_text)
        if name != "ELIZA_INFERENCE_ABI_VERSION"
    }


def header_functions(header_text: str) -> frozenset[str]:
    """Every eliza_inference_* function the header declares with ELIZA_API."""
    return frozenset(_FUNCTION.findall(header_text))
