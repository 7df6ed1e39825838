"""Input fingerprints: the pure rule of which inputs each check kind depends on.

The hashes themselves are read from the tree by eliza.app.services.inputs. The commit is
provenance, never a part: evidence from another commit with the same inputs stays fresh.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from eliza.core.bench_records import METRIC_DEFINITIONS
from eliza.core.evidence import EvidenceRecord, InputFingerprint, Status
from eliza.core.matrix import Cell, Check, CheckKind


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
    build_check: str = ""  # the code that judges a build
    abi_check: str = ""  # the code that judges an ABI (surface cut, baseline, abidiff)
    native_tests: str = ""  # tests/native and the harness: the native-suite check's cases
    consumers: str = ""  # native/consumers and the code that runs and judges them
    perf_check: str = ""  # the perf runner, its statistics and its round settings
    backend_check: str = ""  # the backend-agreement runner and judge, and the runtimes' converters
    # Bundles other than the first (matrix.yaml `bundles`), by id: (the hash of its text
    # files and its bench sizing, the hash of its prompt file). The first bundle is
    # `bundle` and `prompts`.
    bundles: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    def bundle_of(self, check: Check) -> str:
        return self.bundles.get(check.bundle, (self.bundle, self.prompts))[0]

    def prompts_of(self, check: Check) -> str:
        return self.bundles.get(check.bundle, (self.bundle, self.prompts))[1]


def _matrix_entries(cell: Cell, check: Check) -> str:
    """Hash of the matrix entries the check reads: its platform, the cell's gates, itself."""
    entry = asdict(check)
    if not check.run_requires:  # a field most checks leave empty: their evidence stays fresh
        del entry["run_requires"]
    for name in ("metrics", "rounds"):  # perf-only fields: the other checks' evidence stays fresh
        if not entry[name]:
            del entry[name]
    if not entry["declared_id"]:  # a check on the first bundle: its evidence stays fresh
        del entry["declared_id"], entry["bundle"]
    payload = {
        "platform": asdict(cell.platform),
        "gates": [asdict(g) for g in cell.gates],
        "check": entry,
    }
    if cell.variant is not None:
        payload["variant"] = asdict(cell.variant)
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def _tools(hashes: InputHashes, names: Iterable[str]) -> str:
    return ",".join(f"{n}={hashes.tools.get(n, 'absent')}" for n in sorted(names))


def fingerprint_for(
    cell: Cell, check: Check, hashes: InputHashes, baseline_commit: str = ""
) -> InputFingerprint:
    build_tools = (
        ["compiler", "cmake", "conan", "ninja"]
        + (["nvcc"] if cell.platform.llama_backend == "cuda" else [])
        + (["glslc"] if cell.platform.llama_backend == "vulkan" else [])
    )
    if cell.platform.llama_backend == "vulkan" and check.needs_run:
        build_tools.append("vulkan-device")
    parts = {
        "native": hashes.native,
        "recipes": hashes.recipes,
        "llama_source": hashes.llama_source,
        "matrix": _matrix_entries(cell, check),
    }
    kind = check.kind
    if kind is CheckKind.BUILD:
        parts["check_code"] = hashes.build_check
        if cell.platform.llama_backend == "cuda":
            parts["bundle"] = hashes.bundle_of(check)  # the CPU-fallback run generates from it
    if kind is CheckKind.SELECTOR:
        parts["tests"] = hashes.selector_tests
    if kind is CheckKind.GATE_FALLTHROUGH:
        parts["tests"] = hashes.gate_tests
        parts["bundle"] = hashes.bundle_of(check)
    if kind in (
        CheckKind.BYTE_IDENTITY_REFERENCE,
        CheckKind.BYTE_IDENTITY_GATES,
        CheckKind.BYTE_IDENTITY_BASELINE,
        CheckKind.BYTE_IDENTITY_DRAFTER,
    ):
        parts["bundle"] = hashes.bundle_of(check)
        parts["prompts"] = hashes.prompts_of(check)
        parts["bench"] = hashes.bench
        parts["metric_definitions"] = METRIC_DEFINITIONS
    if kind is CheckKind.BYTE_IDENTITY_BASELINE:
        parts["baseline"] = baseline_commit or "none"
    if kind is CheckKind.PERF:
        # the reference's identity and the rounds (see eliza.core.perf_plan.reference_identity)
        parts["bundle"] = hashes.bundle_of(check)
        parts["prompts"] = hashes.prompts_of(check)
        parts["bench"] = hashes.bench
        parts["reference"] = baseline_commit or "none"
        parts["check_code"] = hashes.perf_check
        parts["metric_definitions"] = METRIC_DEFINITIONS
    if kind is CheckKind.BACKEND_AGREEMENT:
        # the runtimes' artifacts are converted from the bundle's GGUF by the converters,
        # whose code is part of check_code; the runtime itself is the recipes' pin
        parts["bundle"] = hashes.bundle_of(check)
        parts["prompts"] = hashes.prompts_of(check)
        parts["bench"] = hashes.bench
        parts["check_code"] = hashes.backend_check
    if kind is CheckKind.ABI and baseline_commit:  # compared with the pre-M3 library's surface too
        parts["baseline"] = baseline_commit
    if kind is CheckKind.NATIVE_SUITE:
        parts["tests"] = hashes.native_tests
        parts["bundle"] = hashes.bundle_of(check)
    if kind is CheckKind.CONSUMER:
        parts["consumers"] = hashes.consumers
        parts["bundle"] = hashes.bundle_of(check)
        parts["prompts"] = hashes.prompts_of(check)
        build_tools += [r.value for r in check.run_requires]  # node, jdk: the consumers' runtimes
    if kind is CheckKind.ABI:
        parts["check_code"] = hashes.abi_check
        build_tools.append("abidiff")
    parts["tools"] = _tools(hashes, build_tools)
    return InputFingerprint.of(parts)


def is_fresh_pass(record: EvidenceRecord, current: InputFingerprint) -> bool:
    """Whether a record lets a run skip its check: passed, ran something, passed all of
    it, and was produced from the current inputs."""
    counts = record.counts
    return (
        record.status is Status.PASSED
        and counts.ran > 0
        and counts.passed == counts.ran
        and record.fingerprint.key == current.key
    )
