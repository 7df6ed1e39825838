"""Input fingerprints: content hashes of what each check depends on.

`input_hashes` reads the tree (an adapter); `fingerprint_for` is the pure rule of which
parts a check kind depends on. The commit is provenance, never a part: evidence from
another commit with the same inputs stays fresh.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from eliza.evidence import InputFingerprint
from eliza.host import HostFacts
from eliza.matrix.model import Cell, Check, CheckKind

_IGNORED = {"CMakeUserPresets.json", "__pycache__", ".pytest_cache"}


def tree_hash(root: Path, entries: Iterable[str]) -> str:
    """sha256 over (relative path, bytes) of every file under the given entries of root."""
    digest = hashlib.sha256()
    for entry in sorted(entries):
        base = root / entry
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for f in files:
            if _IGNORED.intersection(f.relative_to(root).parts):
                continue
            digest.update(f.relative_to(root).as_posix().encode() + b"\0")
            digest.update(hashlib.sha256(f.read_bytes()).digest())
    return digest.hexdigest()


@dataclass(frozen=True, kw_only=True)
class InputHashes:
    native: str
    recipes: str
    bundle: str
    prompts: str
    selector_tests: str
    gate_tests: str
    bench: str  # the diff engine, the bench driver and the bench settings: they decide byte identity
    llama_source: str  # "0.3.36" (the pinned sdist) or "fork.<content hash>" (ELIZA_LLAMA_CPP_DIR)
    tools: Mapping[str, str]  # tool name -> version


def input_hashes(
    repo: Path,
    bundle: Path,
    prompts: Path,
    host: HostFacts,
    abidiff_version: str = "",
    *,
    llama_source: str,
    bench_settings: str,
) -> InputHashes:
    """bench_settings: a description of the bench's settings (max tokens, repeats, sampling,
    context override), so evidence from a non-default bench run is never fresh for the
    default one."""

    def version(tool: object) -> str:
        return str(getattr(tool, "version", "") or "absent")

    tools = {
        "compiler": version(host.compiler),
        "cmake": version(host.cmake),
        "conan": version(host.conan),
        "ninja": version(host.ninja),
        "nvcc": version(host.nvcc),
        "abidiff": abidiff_version or "absent",
    }
    return InputHashes(
        native=tree_hash(repo, ["native"]),
        # The recipes and the code that turns a cell into a Conan command line.
        recipes=tree_hash(
            repo, ["conanfile.py", "conan/index", "eliza/build.py", "eliza/conan.py", "eliza/cuda.py"]
        ),
        bundle=tree_hash(bundle, ["text"]) if (bundle / "text").is_dir() else "absent",
        prompts=hashlib.sha256(prompts.read_bytes()).hexdigest() if prompts.is_file() else "absent",
        selector_tests=tree_hash(repo, ["tests/selector", "tests/conftest.py", "eliza/ffi.py"]),
        gate_tests=tree_hash(repo, ["tests/gates", "tests/conftest.py", "eliza/ffi.py"]),
        bench=hashlib.sha256(tree_hash(repo, ["eliza/bench"]).encode() + bench_settings.encode()).hexdigest(),
        llama_source=llama_source,
        tools=tools,
    )


def _matrix_entries(cell: Cell, check: Check) -> str:
    """Hash of the matrix entries the check reads: its platform, the cell's gates, itself."""
    payload = {
        "platform": asdict(cell.platform),
        "gates": [asdict(g) for g in cell.gates],
        "check": asdict(check),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _tools(hashes: InputHashes, names: Iterable[str]) -> str:
    return ",".join(f"{n}={hashes.tools.get(n, 'absent')}" for n in sorted(names))


def fingerprint_for(
    cell: Cell, check: Check, hashes: InputHashes, baseline_commit: str = ""
) -> InputFingerprint:
    build_tools = ["compiler", "cmake", "conan", "ninja"] + (
        ["nvcc"] if cell.platform.llama_backend == "cuda" else []
    )
    parts = {
        "native": hashes.native,
        "recipes": hashes.recipes,
        "llama_source": hashes.llama_source,
        "matrix": _matrix_entries(cell, check),
    }
    kind = check.kind
    if kind is CheckKind.SELECTOR:
        parts["tests"] = hashes.selector_tests
    if kind is CheckKind.GATE_FALLTHROUGH:
        parts["tests"] = hashes.gate_tests
        parts["bundle"] = hashes.bundle
    if kind in (
        CheckKind.BYTE_IDENTITY_REFERENCE,
        CheckKind.BYTE_IDENTITY_GATES,
        CheckKind.BYTE_IDENTITY_BASELINE,
    ):
        parts["bundle"] = hashes.bundle
        parts["prompts"] = hashes.prompts
        parts["bench"] = hashes.bench
    if kind is CheckKind.BYTE_IDENTITY_BASELINE:
        parts["baseline"] = baseline_commit or "none"
    if kind is CheckKind.ABI:
        build_tools.append("abidiff")
    parts["tools"] = _tools(hashes, build_tools)
    return InputFingerprint.of(parts)
