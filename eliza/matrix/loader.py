"""Read matrix.yaml into the value objects of eliza.matrix.model, or say exactly what is wrong.

Every finding names the file, the line and the key path, and where a name is close to a
valid one, suggests it. Findings are collected and reported together so one edit-run
cycle fixes them all. The only exception that leaves this module is MatrixError.

Stages: YAML (syntax, duplicate keys) -> JSON Schema (shape) -> semantics (references
between sections, allowed gates, cell set). Semantics run only on schema-valid data, so
they can index it without defensive code.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from eliza.matrix.model import (
    Cell,
    Check,
    CheckKind,
    DeviceGatedItem,
    Gate,
    Matrix,
    Platform,
    Problem,
    Requirement,
)

__all__ = ["MatrixError", "Problem", "load_matrix", "matrix_schema", "parse_matrix"]

KeyPath = tuple[str | int, ...]

_MERGE_TAG = "tag:yaml.org,2002:merge"
_TOP_LEVEL_KEYS = "version, platforms, gates, checks, cells"


class MatrixError(Exception):
    """matrix.yaml cannot be used; `problems` lists every finding, in file order."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        ordered = sorted(problems, key=lambda p: (p.file, p.line is not None, p.line or 0))
        self.problems: tuple[Problem, ...] = tuple(ordered)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


@cache
def matrix_schema() -> Mapping[str, Any]:
    """The JSON Schema of matrix.yaml, shipped as eliza/schema/matrix.schema.json."""
    text = resources.files("eliza").joinpath("schema/matrix.schema.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(matrix_schema())


def load_matrix(path: Path) -> Matrix:
    """Read and validate the matrix file at `path`; the source is recorded as given."""
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
    return _parse(text, source, hashlib.sha256(raw).hexdigest())


def parse_matrix(text: str, source: str) -> Matrix:
    """Validate matrix YAML given as text; `source` names it in problems and in Matrix.source."""
    return _parse(text, source, hashlib.sha256(text.encode("utf-8")).hexdigest())


def _parse(text: str, source: str, sha256: str) -> Matrix:
    root, data, duplicates = _read_yaml(text, source)
    builder = _Builder(source, root, data)
    builder.errors.extend(duplicates)
    try:
        return builder.build(sha256)
    except RecursionError as exc:
        # Only a self-referencing alias (&a [*a]) nests deep enough to get here.
        raise MatrixError([_file_problem(source, "recursive YAML aliases are not supported")]) from exc


# --- YAML ---------------------------------------------------------------------------------


class _Loader(yaml.SafeLoader):
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
                                key_path=_render((*path, key.value)),
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


def _render(path: Sequence[str | int]) -> str:
    out = ""
    for seg in path:
        if isinstance(seg, int) and not isinstance(seg, bool):
            out += f"[{seg}]"
        else:
            out += f".{seg}" if out else str(seg)
    return out


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


def _did_you_mean(value: object, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(value), list(valid), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _valid(valid: Sequence[str], noun: str = "valid") -> str:
    return f"{noun}: {', '.join(valid)}" if valid else f"{noun}: none declared"


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


# --- building -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _CellSpec:
    checks: tuple[str, ...] | None  # None: default_checks
    origin: KeyPath  # where in the file the cell was formed


class _Builder:
    def __init__(self, source: str, root: yaml.Node, data: Any) -> None:
        self.source = source
        self.root = root
        self.data = data
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []
        # Platforms whose allowed_gates name an unknown gate: judging gate sets against a
        # list with a typo in it would only repeat the same finding.
        self.unsure_allowed: set[str] = set()

    # findings

    def problem(self, path: KeyPath, message: str, hint: str = "") -> Problem:
        line, _ = _locate(self.root, path)
        return Problem(file=self.source, line=line, key_path=_render(path), message=message, hint=hint)

    def error(self, path: KeyPath, message: str, hint: str = "") -> None:
        self.errors.append(self.problem(path, message, hint))

    def where(self, path: KeyPath) -> str:
        return f"{_render(path)} (line {_locate(self.root, path)[0]})"

    def ref(self, value: str, known: Sequence[str], noun: str, path: KeyPath) -> bool:
        if value in known:
            return True
        self.error(path, f"unknown {noun} {value!r}{_did_you_mean(value, known)}", _valid(known))
        return False

    # entry point

    def build(self, sha256: str) -> Matrix:
        self.schema_problems()
        if self.errors:
            raise MatrixError(self.errors)
        d = self.data
        platform_ids = self.unique_ids("platforms", "platform")
        gate_ids = self.unique_ids("gates", "gate")
        check_ids = self.unique_ids("checks", "check")
        self.unique_ids("device_gated", "device-gated item")
        self.check_gates(platform_ids)
        self.check_platforms(gate_ids)
        for j, cid in enumerate(d.get("default_checks", [])):
            self.ref(cid, check_ids, "check", ("default_checks", j))
        for i, item in enumerate(d.get("device_gated", [])):
            for j, pid in enumerate(item.get("platforms", [])):
                self.ref(pid, platform_ids, "platform", ("device_gated", i, "platforms", j))
        specs = self.cell_specs(platform_ids, gate_ids, check_ids)
        if self.errors:
            raise MatrixError(self.errors)

        platforms = tuple(_platform(p) for p in d["platforms"])
        gates = {g["id"]: _gate(g) for g in d["gates"]}
        checks = tuple(_check(c) for c in d["checks"])
        default = tuple(d.get("default_checks", [c.id for c in checks]))
        by_platform = {p.id: p for p in platforms}
        order = {pid: n for n, pid in enumerate(platform_ids)}
        cells: list[Cell] = []
        for (pid, gate_key), spec in sorted(
            specs.items(), key=lambda kv: (order[kv[0][0]], len(kv[0][1]), kv[0][1])
        ):
            wanted = set(spec.checks if spec.checks is not None else default)
            cell_checks = tuple(c for c in checks if c.id in wanted and (gate_key or not c.gated_cells_only))
            cell = Cell(
                platform=by_platform[pid], gates=tuple(gates[g] for g in gate_key), checks=cell_checks
            )
            if not cell_checks:
                self.error(
                    spec.origin,
                    f"cell {cell.id!r} has no checks to run",
                    "checks with gated_cells_only apply only to cells with at least one gate",
                )
            cells.append(cell)
        if self.errors:
            raise MatrixError(self.errors)
        return Matrix(
            source=self.source,
            sha256=sha256,
            platforms=platforms,
            gates=tuple(gates.values()),
            checks=checks,
            cells=tuple(cells),
            device_gated=tuple(_device_gated(x) for x in d.get("device_gated", [])),
            warnings=tuple(self.warnings),
        )

    # schema

    def schema_problems(self) -> None:
        reported: set[tuple[KeyPath, str]] = set()
        for err in _validator().iter_errors(self.data):
            for path, message, hint in _explain(err, self.root):
                if (path, message) not in reported:
                    reported.add((path, message))
                    self.error(path, message, hint)

    # semantics

    def unique_ids(self, section: str, noun: str) -> list[str]:
        ids: dict[str, int] = {}
        for i, item in enumerate(self.data.get(section, [])):
            item_id = item["id"]
            if item_id in ids:
                first = (section, ids[item_id], "id")
                self.error(
                    (section, i, "id"), f"duplicate {noun} id {item_id!r}", f"first at {self.where(first)}"
                )
            else:
                ids[item_id] = i
        return list(ids)

    def check_gates(self, platform_ids: Sequence[str]) -> None:
        first: dict[tuple[str, str], int] = {}
        for i, gate in enumerate(self.data["gates"]):
            if gate["id"] == "none":
                self.error(
                    ("gates", i, "id"),
                    "gate id 'none' is reserved",
                    "cell ids use it for the no-gate cell, e.g. linux-cpu.none",
                )
            for field in ("cmake_option", "conan_option", "factory"):
                value = gate[field]
                if (field, value) in first:
                    other = ("gates", first[(field, value)], field)
                    self.error(
                        ("gates", i, field),
                        f"{field} {value!r} is already used by another gate",
                        f"first at {self.where(other)}; each gate needs its own",
                    )
                else:
                    first[(field, value)] = i
            for j, pid in enumerate(gate.get("runtime_platforms", [])):
                self.ref(pid, platform_ids, "platform", ("gates", i, "runtime_platforms", j))

    def check_platforms(self, gate_ids: Sequence[str]) -> None:
        for i, plat in enumerate(self.data["platforms"]):
            for j, gid in enumerate(plat.get("allowed_gates", [])):
                if not self.ref(gid, gate_ids, "gate", ("platforms", i, "allowed_gates", j)):
                    self.unsure_allowed.add(plat["id"])
            options = plat.get("llama_options", {})
            if "cpu_isa" in options and plat["arch"] != "x86_64":
                self.error(
                    ("platforms", i, "llama_options", "cpu_isa"),
                    f"cpu_isa applies to x86_64 platforms only; this one is {plat['arch']}",
                    "remove it: the llama-cpp recipe has no such option on other architectures",
                )
            if "cuda_architectures" in options and plat["llama_backend"] != "cuda":
                self.error(
                    ("platforms", i, "llama_options", "cuda_architectures"),
                    "cuda_architectures applies to llama_backend cuda only; "
                    f"this one is {plat['llama_backend']}",
                    "remove it, or set llama_backend: cuda",
                )
            if plat["llama_backend"] == "cuda":
                missing = [r for r in ("nvcc", "cublas") if r not in plat["build_requires"]]
                if missing:
                    self.error(
                        ("platforms", i, "build_requires"),
                        f"llama_backend cuda builds with {' and '.join(missing)}, "
                        "missing from build_requires",
                        f"add {', '.join(missing)}",
                    )

    def allowed(self, pid: str, gates: Sequence[str], path: KeyPath) -> bool:
        if pid in self.unsure_allowed:
            return False
        index = next(i for i, p in enumerate(self.data["platforms"]) if p["id"] == pid)
        allowed = self.data["platforms"][index].get("allowed_gates", [])
        ok = True
        for gid in gates:
            if gid not in allowed:
                ok = False
                self.error(
                    path,
                    f"gate {gid!r} is not allowed on platform {pid!r}",
                    f"{_valid(allowed, f'allowed_gates of {pid}')}; add it at "
                    f"{self.where(('platforms', index, 'allowed_gates'))} or drop this gate set",
                )
        return ok

    def check_refs(self, ids: Sequence[str] | None, known: Sequence[str], path: KeyPath) -> None:
        for j, cid in enumerate(ids or []):
            self.ref(cid, known, "check", (*path, j))

    def cell_specs(
        self, platform_ids: Sequence[str], gate_ids: Sequence[str], check_ids: Sequence[str]
    ) -> dict[tuple[str, tuple[str, ...]], _CellSpec]:
        cells: dict[tuple[str, tuple[str, ...]], _CellSpec] = {}
        spec = self.data["cells"]

        for i, entry in enumerate(spec["product"]):
            base: KeyPath = ("cells", "product", i)
            self.check_refs(entry.get("checks"), check_ids, (*base, "checks"))
            plats = [
                pid
                for j, pid in enumerate(entry["platforms"])
                if self.ref(pid, platform_ids, "platform", (*base, "platforms", j))
            ]
            gate_sets: list[tuple[int, tuple[str, ...]]] = []
            for k, gate_set in enumerate(entry["gate_sets"]):
                known = [
                    self.ref(g, gate_ids, "gate", (*base, "gate_sets", k, n)) for n, g in enumerate(gate_set)
                ]
                if all(known):
                    gate_sets.append((k, tuple(sorted(gate_set))))
            checks = tuple(entry["checks"]) if "checks" in entry else None
            for pid in plats:
                for k, gates in gate_sets:
                    path = (*base, "gate_sets", k)
                    if not self.allowed(pid, gates, path):
                        continue
                    key = (pid, gates)
                    if key in cells:
                        self.error(
                            path,
                            f"cell {_cell_id(key)!r} is formed twice",
                            f"already formed at {self.where(cells[key].origin)}",
                        )
                        continue
                    cells[key] = _CellSpec(checks, path)

        for i, entry in enumerate(spec.get("exclude", [])):
            base = ("cells", "exclude", i)
            pid = entry.get("platform")
            gates = entry.get("gates")
            if pid is not None and not self.ref(pid, platform_ids, "platform", (*base, "platform")):
                continue
            if gates is not None:
                known = [self.ref(g, gate_ids, "gate", (*base, "gates", n)) for n, g in enumerate(gates)]
                if not all(known):
                    continue
            wanted = tuple(sorted(gates)) if gates is not None else None
            matched = [
                k for k in cells if (pid is None or k[0] == pid) and (wanted is None or k[1] == wanted)
            ]
            if not matched:
                present = [_cell_id(k) for k in cells if pid is None or k[0] == pid]
                self.warnings.append(self.problem(base, "exclude matches no cell", _valid(present, "cells")))
            for key in matched:
                del cells[key]

        for i, entry in enumerate(spec.get("include", [])):
            base = ("cells", "include", i)
            self.check_refs(entry.get("checks"), check_ids, (*base, "checks"))
            pid = entry["platform"]
            if not self.ref(pid, platform_ids, "platform", (*base, "platform")):
                continue
            known = [self.ref(g, gate_ids, "gate", (*base, "gates", n)) for n, g in enumerate(entry["gates"])]
            if not all(known):
                continue
            key = (pid, tuple(sorted(entry["gates"])))
            if not self.allowed(pid, key[1], (*base, "gates")):
                continue
            if key in cells:
                self.error(
                    base,
                    f"include adds nothing: cell {_cell_id(key)!r} is already present",
                    f"formed at {self.where(cells[key].origin)}; remove this entry, "
                    "or exclude the cell first to give it other checks",
                )
                continue
            cells[key] = _CellSpec(tuple(entry["checks"]) if "checks" in entry else None, base)

        if not cells and not self.errors:
            self.error(
                ("cells",),
                "no cells remain",
                "every cell formed by cells.product was removed by cells.exclude",
            )
        return cells


def _cell_id(key: tuple[str, tuple[str, ...]]) -> str:
    return f"{key[0]}.{'+'.join(key[1]) or 'none'}"


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
            ((*path, k), f"unknown key {k!r}{_did_you_mean(k, props)}", _valid(props, "valid keys"))
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
        return [(path, f"unknown {title} {_short(inst)}{_did_you_mean(inst, valid)}", _valid(valid))]
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


# --- value objects ------------------------------------------------------------------------


def _platform(p: Mapping[str, Any]) -> Platform:
    return Platform(
        id=p["id"],
        description=p["description"],
        os=p["os"],
        arch=p["arch"],
        llama_backend=p["llama_backend"],
        llama_options={str(k): str(v) for k, v in p.get("llama_options", {}).items()},
        build_requires=tuple(Requirement(r) for r in p["build_requires"]),
        run_requires=tuple(Requirement(r) for r in p["run_requires"]),
        allowed_gates=tuple(p.get("allowed_gates", [])),
        ci_runner=tuple(p["ci_runner"]),
        slow_build=bool(p.get("slow_build", False)),
    )


def _gate(g: Mapping[str, Any]) -> Gate:
    return Gate(
        id=g["id"],
        description=g["description"],
        cmake_option=g["cmake_option"],
        conan_option=g["conan_option"],
        factory=g["factory"],
        artifacts=tuple(g["artifacts"]),
        runtime_platforms=tuple(g.get("runtime_platforms", [])),
        preference_rank=g.get("preference_rank", 50),
    )


def _check(c: Mapping[str, Any]) -> Check:
    return Check(
        id=c["id"],
        kind=CheckKind(c["kind"]),
        description=c["description"],
        pass_rule=c["pass_rule"],
        needs_run=c["needs_run"],
        gated_cells_only=c.get("gated_cells_only", False),
    )


def _device_gated(x: Mapping[str, Any]) -> DeviceGatedItem:
    return DeviceGatedItem(
        id=x["id"],
        title=x["title"],
        needs=x["needs"],
        milestone=x["milestone"],
        evidence=x["evidence"],
        platforms=tuple(x.get("platforms", [])),
    )
