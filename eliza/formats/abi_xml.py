"""The public ABI of a library as abixml: what `abidw` writes, cut down to the exported
surface of the C ABI, so that a baseline of it can live in the repository (native/abi/)
and `abidiff` can compare it with a new build.

abidw records every type reachable from the exported functions. The opaque handles of the
C ABI are declared in the public header and defined in private C++ headers, so abidw
follows them into std:: containers and llama.cpp: a megabyte of XML that changes with the
standard library's internals, not with our ABI. libabigail's own remedy (--headers-dir
with --drop-private-types) leaves them in for this library, and its type suppressions
leave dangling type references that abidiff then asserts on. So the cut is made here, the
way libabigail means it: the exported functions and variables, every type they reach, and
each struct, class, union or enum that is defined outside the public header replaced by
an opaque declaration of the same name (which is what the consumer of the header sees).
Source locations are dropped: they are not ABI, and they name build paths.
"""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator

_AGGREGATES = {"class-decl", "union-decl", "enum-decl"}
_LOCATION = ("filepath", "line", "column")


class AbiXmlError(ValueError):
    """The text is not abixml as abidw writes it."""


def _strip_locations(element: ET.Element) -> None:
    for node in element.iter():
        for name in _LOCATION:
            node.attrib.pop(name, None)


def _opaque(element: ET.Element) -> ET.Element:
    """The declaration a consumer of the public header sees of a type defined elsewhere."""
    keep = {k: v for k, v in element.attrib.items() if k in ("name", "is-struct", "visibility", "id")}
    keep["is-declaration-only"] = "yes"
    return ET.Element(element.tag, keep)


def _references(element: ET.Element) -> Iterator[str]:
    for node in element.iter():
        ref = node.get("type-id")
        if ref:
            yield ref


def public_surface(xml_text: str, *, prefix: str, public_header: str) -> str:
    """The abixml of the exported surface: symbols named `prefix`*, their declarations,
    and the types they reach; aggregates not defined in a file named `public_header` are
    opaque. Deterministic for equal input, whatever the build paths."""
    try:
        corpus = ET.fromstring(xml_text)
    except ET.ParseError as exc:
        raise AbiXmlError(f"not XML: {exc}") from None
    if corpus.tag != "abi-corpus":
        raise AbiXmlError(f"the root element is <{corpus.tag}>, not <abi-corpus> (abidw's output)")

    types: dict[str, ET.Element] = {}
    for node in corpus.iter():
        type_id = node.get("id")
        if type_id and node.tag != "elf-symbol" and type_id not in types:
            types[type_id] = node
    exported = [
        node
        for instr in corpus.iter("abi-instr")
        for node in instr.iter()
        if node.tag in ("function-decl", "var-decl") and node.get("elf-symbol-id", "").startswith(prefix)
    ]
    if not exported:
        raise AbiXmlError(f"no declaration of an exported {prefix}* symbol: was the library built with -g?")

    def defined_in_header(node: ET.Element) -> bool:
        return node.get("filepath", "").rsplit("/", 1)[-1] == public_header

    out = ET.Element(
        "abi-corpus", {k: v for k, v in corpus.attrib.items() if k in ("version", "architecture")}
    )
    soname = corpus.get("soname")
    if soname:
        out.set("soname", soname)
    for section in ("elf-function-symbols", "elf-variable-symbols"):
        symbols = [s for s in corpus.findall(f"{section}/elf-symbol") if s.get("name", "").startswith(prefix)]
        if symbols:
            ET.SubElement(out, section).extend(sorted(symbols, key=lambda s: s.get("name", "")))
    instr = ET.SubElement(
        out, "abi-instr", {"address-size": "64", "path": public_header, "language": "LANG_C"}
    )

    emitted: set[str] = set()
    pending = [ref for decl in exported for ref in _references(decl)]
    kept: list[ET.Element] = []
    while pending:
        type_id = pending.pop()
        if type_id in emitted or type_id not in types:
            continue
        node = types[type_id]
        # An aggregate without a source location cannot be placed: kept whole, never hidden.
        if node.tag in _AGGREGATES and node.get("filepath") and not defined_in_header(node):
            copy = _opaque(node)
        else:
            copy = ET.fromstring(ET.tostring(node))
            # Types defined inside this one (member types) are emitted with it.
            emitted.update(n.get("id", "") for n in copy.iter() if n.get("id"))
            pending.extend(_references(copy))
        emitted.add(type_id)
        kept.append(copy)
    decls = [
        ET.fromstring(ET.tostring(d)) for d in sorted(exported, key=lambda d: d.get("elf-symbol-id", ""))
    ]
    for node in (*kept, *decls):
        _strip_locations(node)
    renamed = _canonical_ids(kept)
    seen: set[str] = set()
    for node in (*kept, *decls):
        for sub in node.iter():
            for attr in ("id", "type-id"):
                if sub.get(attr) in renamed:
                    sub.set(attr, renamed[sub.get(attr, "")])
    for node in sorted(kept, key=lambda n: (n.tag, n.get("name", ""), n.get("id", ""))):
        if node.get("id") not in seen:  # structurally equal types are one type
            seen.add(node.get("id", ""))
            instr.append(node)
    instr.extend(decls)
    ET.indent(out, space="  ")
    return ET.tostring(out, encoding="unicode") + "\n"


def _canonical_ids(kept: list[ET.Element]) -> dict[str, str]:
    """New type ids from each type's structure, not abidw's: abidw's hashed ids move when an
    unrelated type of the library happens to collide with them, which is no ABI change."""
    defined: dict[str, ET.Element] = {}
    for node in kept:
        for sub in node.iter():
            if sub.get("id"):
                defined.setdefault(sub.get("id", ""), sub)

    def signature(type_id: str, stack: frozenset[str]) -> str:
        node = defined.get(type_id)
        if node is None:
            return f"?{type_id}"
        if type_id in stack:  # a type that refers back to itself: its name breaks the cycle
            return f"<{node.tag} {node.get('name', '')}>"
        inner = stack | {type_id}
        parts = []
        for sub in node.iter():
            attrs = " ".join(f"{k}={v}" for k, v in sorted(sub.attrib.items()) if k not in ("id", "type-id"))
            ref = sub.get("type-id")
            parts.append(f"{sub.tag}[{attrs}]" + (f"->({signature(ref, inner)})" if ref else ""))
        return " ".join(parts)

    return {
        type_id: "t" + hashlib.sha256(signature(type_id, frozenset()).encode()).hexdigest()[:12]
        for type_id in defined
    }


def exports_text(symbols: list[str]) -> str:
    """The export list as native/abi stores it: one symbol per line, sorted."""
    return "".join(f"{s}\n" for s in sorted(symbols))


def architecture_of(surface_xml: str) -> str:
    """abidw's architecture name, e.g. elf-amd-x86_64."""
    return ET.fromstring(surface_xml).get("architecture", "unknown")


def soname_of(surface_xml: str) -> str | None:
    """The SONAME abidw recorded (None for a library without one)."""
    return ET.fromstring(surface_xml).get("soname")
