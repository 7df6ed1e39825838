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


_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def declarations(header_text: str) -> list[str]:
    """The header without its comments, one declaration or directive per line, whitespace
    collapsed: what a compiler sees of the ABI. Two headers with equal declarations
    declare the same functions, types and constants, however their comments differ."""
    text = _COMMENT.sub(" ", header_text)
    lines: list[str] = []
    for line in text.splitlines():
        words = " ".join(line.split())
        if not words:
            continue
        if (
            words.startswith("#")
            or not lines
            or lines[-1].startswith("#")
            or lines[-1].endswith((";", "{", "}"))
        ):
            lines.append(words)
        else:
            lines[-1] = f"{lines[-1]} {words}"
    return lines


_DECLARES_NOTHING = re.compile(
    r"^(#\s*(if|ifdef|ifndef|elif|else|endif|undef)\b|#\s*define\s+\w+\(|\w*ASSERT\w*\()"
)


def abi_declarations(header_text: str) -> list[str]:
    """`declarations` less what declares nothing a consumer binds to: compile-time
    assertions (static_assert and the macros that wrap it), function-like macros, and the
    preprocessor conditionals around them. What is left (functions, types, object-like
    macros, includes) is the ABI the header promises."""
    return [d for d in declarations(header_text) if not _DECLARES_NOTHING.match(d)]
