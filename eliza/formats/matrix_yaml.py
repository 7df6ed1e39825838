"""Read matrix.yaml into the value objects of eliza.core.matrix, or say exactly what is wrong.

Every finding names the file, the line and the key path, and where a name is close to a
valid one, suggests it. Findings are collected and reported together so one edit-run
cycle fixes them all. The only exception that leaves this module is MatrixError.

Stages: YAML (syntax, duplicate keys) -> JSON Schema (shape), here; then the semantics
(references between sections, allowed gates, cell set) of eliza.core.matrix_rules, which
run only on schema-valid data.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from eliza.core.matrix import Matrix, MatrixError, Problem
from eliza.core.matrix_rules import KeyPath, MatrixRules, did_you_mean, render_key_path, valid_words
from eliza.formats.files import atomic_write_text
from eliza.formats.json_schema import load_jsonschema

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import ValidationError

__all__ = ["MatrixError", "Problem", "load_matrix", "matrix_schema", "parse_matrix"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_TOP_LEVEL_KEYS = "version, platforms, gates, checks, cells"


@cache
def matrix_schema() -> Mapping[str, Any]:
    """The JSON Schema of matrix.yaml, shipped as eliza/schema/matrix.schema.json."""
    text = resources.files("eliza").joinpath("schema/matrix.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> Draft202012Validator:
    # Imported here, which a matrix already found schema-valid never needs (load_matrix's
    # `memo`), and without the IRI grammars its schema never asks for (eliza.formats.json_schema).
    load_jsonschema()
    from jsonschema import Draft202012Validator

    return Draft202012Validator(matrix_schema())


def _schema_key(raw: bytes) -> str:
    """What a schema verdict depends on: the file's bytes and the schema's."""
    schema = json.dumps(matrix_schema(), sort_keys=True).encode("utf-8")
    return hashlib.sha256(hashlib.sha256(raw).digest() + hashlib.sha256(schema).digest()).hexdigest()


def _schema_valid_before(memo: Path, key: str) -> bool:
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(known, dict) and known.get("schema_valid") == key


def load_matrix(path: Path, memo: Path | None = None) -> Matrix:
    """Read and validate the matrix file at `path`; the source is recorded as given.
    `memo`: a file remembering the last matrix found schema-valid (by the hash of its bytes
    and of the schema), whose schema check is then not repeated; the rules always run."""
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise MatrixError([_file_problem(source, f"cannot read: {exc.strerror or exc}")]) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise MatrixError([_file_problem(source, f"not UTF-8 text ({exc.reason})", line=line)]) from exc
    key = _schema_key(raw) if memo is not None else ""
    checked = memo is not None and _schema_valid_before(memo, key)
    matrix = _parse(text, source, hashlib.sha256(raw).hexdigest(), schema_checked=checked)
    if memo is not None and not checked:
        # an unwritable memo costs the check next time, nothing else
        with contextlib.suppress(OSError):
            atomic_write_text(memo, json.dumps({"schema_valid": key}) + "\n")
    return matrix


def parse_matrix(text: str, source: str) -> Matrix:
    """Validate matrix YAML given as text; `source` names it in problems and in Matrix.source."""
    return _parse(text, source, hashlib.sha256(text.encode("utf-8")).hexdigest())


def _parse(text: str, source: str, sha256: str, *, schema_checked: bool = False) -> Matrix:
    root, data, duplicates = _read_yaml(text, source)
    problems = list(duplicates)
    reported: set[tuple[KeyPath, str]] = set()
    for err in () if schema_checked else _validator().iter_errors(data):
        for path, message, hint in _explain(err, root):
            if (path, message) not in reported:
                reported.add((path, message))
                line, _ = _locate(root, path)
                problems.append(
                    Problem(
                        file=source, line=line, key_path=render_key_path(path), message=message, hint=hint
                    )
                )
    if problems:
        raise MatrixError(problems)
    # Semantics run only on schema-valid data, so they can index it without defensive code.
    rules = MatrixRules(source, data, lambda path: _locate(root, path)[0])
    try:
        return rules.build(sha256)
    except RecursionError as exc:
        # Only a self-referencing alias (&a [*a]) nests deep enough to get here.
        raise MatrixError([_file_problem(source, "recursive YAML aliases are not supported")]) from exc


# --- YAML ---------------------------------------------------------------------------------


# libyaml's parser when PyYAML was built with it: the matrix is read by every session, and
# the pure-Python parser spends about 0.1 s on it.
if TYPE_CHECKING:
    _SafeLoader = yaml.SafeLoader
else:
    _SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_SafeLoader):
    # Dates stay text (a waiver's `expires: 2027-01-31` unquoted): the schema and the rules
    # read them, and report a bad one with its line.
    yaml_implicit_resolvers = {  # noqa: RUF012  (PyYAML's own class attribute, replaced)
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # SafeLoader lets Python errors escape for bad explicitly tagged scalars
        # (`!!float abc`); turn them into a located YAML error.
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read {node.tag} value {node.value!r} ({exc})", node.start_mark
            ) from exc


def _read_yaml(text: str, source: str) -> tuple[yaml.Node, Any, list[Problem]]:
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            empty = _file_problem(
                source, "the file is empty", hint=f"expected a mapping with {_TOP_LEVEL_KEYS}"
            )
            raise MatrixError([empty])
        # Duplicates must be found on the node tree: construction silently keeps the last one.
        duplicates = _duplicate_keys(root, source)
        data = loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        raise MatrixError([_yaml_problem(exc, source)]) from exc
    except yaml.YAMLError as exc:
        raise MatrixError([_file_problem(source, f"YAML error: {exc}")]) from exc
    finally:
        loader.dispose()
    if not isinstance(root, yaml.MappingNode):
        kind = "a list" if isinstance(root, yaml.SequenceNode) else f"the scalar {root.value!r}"
        message = f"the top level is {kind}; expected a mapping"
        line = root.start_mark.line + 1
        raise MatrixError(
            [*duplicates, _file_problem(source, message, hint=f"keys: {_TOP_LEVEL_KEYS}", line=line)]
        )
    return root, data, duplicates


def _file_problem(source: str, message: str, *, hint: str = "", line: int | None = None) -> Problem:
    """A problem with the file as a whole (no key path applies)."""
    return Problem(file=source, line=line, key_path="", message=message, hint=hint)


def _yaml_problem(exc: yaml.MarkedYAMLError, source: str) -> Problem:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or "invalid YAML"
    # A constructor error is a well-formed document with a value YAML cannot represent.
    kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
    if mark is None:
        return _file_problem(source, f"{kind}: {what}")
    hint = exc.context or ""
    if exc.context_mark is not None and exc.context_mark is not mark and exc.context:
        hint = f"{exc.context} at line {exc.context_mark.line + 1}"
    return _file_problem(source, f"{kind} at column {mark.column + 1}: {what}", hint=hint, line=mark.line + 1)


def _duplicate_keys(root: yaml.Node, source: str) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[int] = set()

    def walk(node: yaml.Node, path: KeyPath) -> None:
        if id(node) in seen:  # an alias: its target was (or will be) walked
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                if key.tag == _MERGE_TAG:
                    walk(value, path)
                    continue
                if isinstance(key, yaml.ScalarNode):
                    line = key.start_mark.line + 1
                    if key.value in first:
                        problems.append(
                            Problem(
                                file=source,
                                line=line,
                                key_path=render_key_path((*path, key.value)),
                                message=f"duplicate key {key.value!r} (first at line {first[key.value]})",
                                hint="YAML keeps only the last one; remove or merge them",
                            )
                        )
                    else:
                        first[key.value] = line
                    walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*path, index))

    walk(root, ())
    return problems


def _locate(root: yaml.Node, path: Sequence[str | int]) -> tuple[int, yaml.Node | None]:
    """Line of the deepest part of `path` found (a key's own line), and the node there."""
    node: yaml.Node = root
    line = root.start_mark.line + 1
    for seg in path:
        if isinstance(node, yaml.MappingNode):
            hit: tuple[yaml.Node, yaml.Node] | None = None
            for key, value in node.value:  # the last match wins, as in construction
                if isinstance(key, yaml.ScalarNode) and key.value == str(seg):
                    hit = (key, value)
            if hit is None:
                return line, None
            line, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(seg, int) and 0 <= seg < len(node.value):
            node = node.value[seg]
            line = node.start_mark.line + 1
        else:
            return line, None
    return line, node


# --- schema -------------------------------------------------------------------------------

_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "text",
    "boolean": "true or false",
    "integer": "a whole number",
    "number": "a number",
    "null": "nothing",
}


def _type_of(value: object) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "text"
    if value is None:
        return "nothing"
    return type(value).__name__


def _short(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _explain(err: ValidationError, root: yaml.Node) -> list[tuple[KeyPath, str, str]]:
    """One or more (path, message, hint) for a schema error, in words a matrix editor uses."""
    path: KeyPath = tuple(err.absolute_path)
    schema: Mapping[str, Any] = err.schema if isinstance(err.schema, Mapping) else {}
    kw = err.validator
    inst: Any = err.instance
    value: Any = err.validator_value
    title = str(schema.get("title") or (path[-1] if path and isinstance(path[-1], str) else "value"))
    description = str(schema.get("description", ""))

    if kw == "additionalProperties":
        props = list(schema.get("properties", {}))
        extra = [k for k in inst if k not in props]
        return [
            ((*path, k), f"unknown key {k!r}{did_you_mean(k, props)}", valid_words(props, "valid keys"))
            for k in extra
        ]
    if kw == "required":
        props = schema.get("properties", {})
        return [
            (path, f"missing required key {name!r}", str(props.get(name, {}).get("description", "")))
            for name in value
            if name not in inst
        ]
    if kw == "enum":
        valid = [str(v) for v in value]
        return [(path, f"unknown {title} {_short(inst)}{did_you_mean(inst, valid)}", valid_words(valid))]
    if kw == "const":
        return [(path, f"must be {value!r}, not {_short(inst)}", description)]
    if kw == "type":
        expected = value if isinstance(value, str) else value[0]
        message = f"expected {_TYPE_WORDS.get(expected, expected)}, got {_type_of(inst)} {_short(inst)}"
        _, node = _locate(root, path)
        hint = description
        if expected == "string" and isinstance(node, yaml.ScalarNode):
            hint = f'quote it: "{node.value}"'
        elif expected == "array" and isinstance(node, yaml.ScalarNode):
            hint = f"write a list: [{node.value}]"
        return [(path, message, hint)]
    if kw == "pattern":
        return [(path, f"{_short(inst)} is not a valid {title}", description)]
    if kw in ("minItems", "minLength"):
        n = value
        message = "must not be empty" if n == 1 else f"needs at least {n} entries"
        return [(path, message, description)]
    if kw == "uniqueItems":
        seen: list[object] = []
        for index, item in enumerate(inst):
            if item in seen:
                return [
                    ((*path, index), f"{_short(item)} is listed more than once", "each entry at most once")
                ]
            seen.append(item)
    if kw == "minProperties":
        props = list(schema.get("properties", {}))
        return [(path, f"must name at least one of: {', '.join(props)}", description)]
    return [(path, err.message, description)]


# The same reader, locator and schema wording serve the lab file (eliza.formats.lab_yaml).
read_yaml = _read_yaml
locate = _locate
explain = _explain
