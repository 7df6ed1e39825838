"""Read a lab file (ELIZA_DEVICES / --devices) into eliza.core.lab, or say exactly what is
wrong: every finding names the file, the line and the key path, as for matrix.yaml (the
same YAML reader and schema wording), and an unknown platform id is one of them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from eliza.core.lab import Device, Lab, Transport
from eliza.core.matrix import Matrix, MatrixError, Problem, Requirement
from eliza.core.matrix_rules import KeyPath, did_you_mean, render_key_path, valid_words
from eliza.formats import matrix_yaml
from eliza.formats.json_schema import load_jsonschema

__all__ = ["LabError", "lab_schema", "load_lab", "parse_lab"]


class LabError(MatrixError):
    """The lab file cannot be used; str() is one line per finding, file:line: key: what."""


@cache
def lab_schema() -> Mapping[str, Any]:
    text = resources.files("eliza").joinpath("schema/lab.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def load_lab(path: Path, matrix: Matrix) -> Lab:
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise LabError(
            [Problem(file=source, line=None, key_path="", message=f"cannot read the lab file: {why}")]
        ) from None
    return parse_lab(text, source, matrix)


def parse_lab(text: str, source: str, matrix: Matrix) -> Lab:
    try:
        root, data, duplicates = matrix_yaml.read_yaml(text, source)
    except MatrixError as exc:
        raise LabError(exc.problems) from None
    problems = list(duplicates)

    def line_of(path: KeyPath) -> int:
        return matrix_yaml.locate(root, path)[0]

    # Imported only where a lab file is read (eliza.formats.json_schema: without the IRI grammars).
    load_jsonschema()
    from jsonschema import Draft202012Validator

    reported: set[tuple[KeyPath, str]] = set()
    for err in Draft202012Validator(lab_schema()).iter_errors(data):
        for path, message, hint in matrix_yaml.explain(err, root):
            if (path, message) not in reported:
                reported.add((path, message))
                problems.append(
                    Problem(
                        file=source,
                        line=line_of(path),
                        key_path=render_key_path(path),
                        message=message,
                        hint=hint,
                    )
                )
    if problems:
        raise LabError(problems)
    platforms = [p.id for p in matrix.platforms]
    devices: list[Device] = []
    names: dict[str, int] = {}
    for index, entry in enumerate(data["devices"]):
        at: KeyPath = ("devices", index)
        named = str(entry["platform"])
        if named not in platforms:
            path = (*at, "platform")
            problems.append(
                Problem(
                    file=source,
                    line=line_of(path),
                    key_path=render_key_path(path),
                    message=f"unknown platform {named!r}{did_you_mean(named, platforms)}",
                    hint=valid_words(platforms, "the matrix's platforms"),
                )
            )
            continue
        if entry["name"] in names:
            path = (*at, "name")
            problems.append(
                Problem(
                    file=source,
                    line=line_of(path),
                    key_path=render_key_path(path),
                    message=f"device {entry['name']!r} is declared twice "
                    f"(first at line {names[entry['name']]})",
                )
            )
            continue
        names[entry["name"]] = line_of(at)
        ((kind, settings),) = entry["transport"].items()
        transport = Transport(kind)
        devices.append(
            Device(
                name=entry["name"],
                platform=entry["platform"],
                transport=transport,
                address=settings["destination"] if transport is Transport.SSH else settings["serial"],
                provides=tuple(Requirement(r) for r in entry.get("provides", [])),
                ssh_options=tuple(settings.get("options", [])),
                work_dir=entry.get("work_dir", ""),
                command_prefix=tuple(entry.get("command_prefix", [])),
                line=line_of(at),
            )
        )
    if problems:
        raise LabError(problems)
    return Lab(source=source, devices=tuple(devices))
