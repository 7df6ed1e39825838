"""The JSON Schema of matrix.yaml: valid itself, strict everywhere, documented, in step with the model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from eliza.core.matrix import CheckKind, Requirement
from eliza.formats.json_schema import load_jsonschema
from eliza.formats.matrix_yaml import matrix_schema

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "eliza" / "schema" / "matrix.schema.json"
MATRIX_FILE = ROOT / "matrix.yaml"


def _subschemas(node: Any, where: str = "#") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            if key in ("properties", "$defs"):
                for name, sub in value.items():
                    yield from _subschemas(sub, f"{where}/{key}/{name}")
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                yield from _subschemas(value, f"{where}/{key}")


def test_schema_is_valid_draft_2020_12() -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    load_jsonschema().Draft202012Validator.check_schema(schema)


def test_loader_uses_the_shipped_schema_file() -> None:
    assert matrix_schema() == json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def test_every_object_is_closed() -> None:
    objects = [(w, s) for w, s in _subschemas(matrix_schema()) if s.get("type") == "object"]
    assert len(objects) >= 10
    for where, sub in objects:
        assert sub.get("additionalProperties") is False, where


def test_every_property_has_a_description() -> None:
    for where, sub in _subschemas(matrix_schema()):
        for name, prop in sub.get("properties", {}).items():
            assert prop.get("description"), f"{where}/properties/{name}"


def test_requirement_enums_cover_the_model() -> None:
    defs = matrix_schema()["$defs"]
    build = set(defs["buildRequirement"]["enum"])
    run = set(defs["runRequirement"]["enum"])
    check = set(defs["checkRequirement"]["enum"])
    assert not build & run and not (build | run) & check
    assert build | run | check == {r.value for r in Requirement}


def test_check_kinds_match_the_model() -> None:
    kinds = matrix_schema()["$defs"]["check"]["properties"]["kind"]["enum"]
    assert kinds == [k.value for k in CheckKind]


def test_shipped_matrix_validates_against_the_schema() -> None:
    data = yaml.safe_load(MATRIX_FILE.read_text(encoding="utf-8"))
    errors = list(load_jsonschema().Draft202012Validator(matrix_schema()).iter_errors(data))
    assert errors == []


def test_matrix_first_line_points_at_the_schema() -> None:
    first = MATRIX_FILE.read_text(encoding="utf-8").splitlines()[0]
    assert first == "# yaml-language-server: $schema=eliza/schema/matrix.schema.json"
    target = first.split("$schema=", 1)[1]
    assert (ROOT / target).resolve() == SCHEMA_FILE.resolve()


def test_schema_rejects_a_misspelt_key() -> None:
    data = yaml.safe_load(MATRIX_FILE.read_text(encoding="utf-8"))
    data["platforms"][0]["alowed_gates"] = data["platforms"][0].pop("allowed_gates")
    errors = list(load_jsonschema().Draft202012Validator(matrix_schema()).iter_errors(data))
    assert [e.validator for e in errors] == ["additionalProperties"]
