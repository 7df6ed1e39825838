"""The checks of matrix.yaml, run on built cells, each returning a CheckOutcome.

build and abi are computed here from the artefacts; selector and gate-fallthrough run the
pytest suites against a cell's library and read their JUnit XML, so the counts are the
test cases that really executed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.abi import AbiToolMissing, abidiff, exported_symbols, foreign_exports
from eliza.matrix.model import Cell
from eliza.outcome import CheckOutcome, Stopwatch, outcome
from eliza.paths import REPO_ROOT
from eliza.workflow import BuiltCell

HEADER = REPO_ROOT / "native" / "include" / "eliza-inference-ffi.h"


def header_functions() -> set[str]:
    return set(re.findall(r"ELIZA_API [^;]*?\b(eliza_inference_\w+)\(", HEADER.read_text()))


@dataclass(frozen=True, kw_only=True)
class SubCheck:
    name: str
    ok: bool
    detail: str = ""


def _from_subchecks(
    cell: Cell,
    check_id: str,
    subs: Sequence[SubCheck],
    watch: Stopwatch,
    *,
    artifacts: tuple[Path, ...],
    details: dict[str, object],
    metrics: dict[str, float | int | str] | None = None,
) -> CheckOutcome:
    failed = [s for s in subs if not s.ok]
    reason = "; ".join(f"{s.name}: {s.detail}" for s in failed)
    details["subchecks"] = [{"name": s.name, "ok": s.ok, "detail": s.detail} for s in subs]
    return outcome(
        cell.id,
        check_id,
        ran=len(subs),
        passed=len(subs) - len(failed),
        watch=watch,
        reason=reason,
        details=details,
        artifacts=artifacts,
        metrics=metrics or {},
    )


_GENERATE = (
    "import sys\n"
    "from pathlib import Path\n"
    "from eliza.workflow import generate_text\n"
    "tokens, text = generate_text(Path(sys.argv[1]), Path(sys.argv[2]), 'Once upon a time there was', 48)\n"
    "print(' '.join(map(str, tokens)), text.hex())\n"
)


def generated_in_subprocess(library: Path, bundle: Path) -> tuple[str, str]:
    """(stdout, stderr) of a greedy generation in a fresh process: a CUDA build initialises
    CUDA there, and a failure cannot take the orchestrator down with it."""
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this runs the CPU fallback even on a GPU host.
    result = subprocess.run(
        [sys.executable, "-c", _GENERATE, str(library), str(bundle)],
        env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
    )
    return result.stdout.strip(), result.stderr.strip()[-500:]


def cpu_fallback_subcheck(library: Path, cpu_reference: Path, bundle: Path) -> SubCheck:
    """A CUDA build on a host without a GPU runs on the CPU; its output must equal the CPU build's."""
    got, err = generated_in_subprocess(library, bundle)
    want, _ = generated_in_subprocess(cpu_reference, bundle)
    ok = bool(got) and got == want
    return SubCheck(
        name="without a GPU, output equals the CPU build's",
        ok=ok,
        detail=f"compared with {cpu_reference}" if ok else f"got {got[:80]!r}, want {want[:80]!r} {err}",
    )


def build_outcome(
    cell: Cell,
    check_id: str,
    built: BuiltCell,
    *,
    cpu_reference: Path | None = None,
    bundle: Path | None = None,
) -> CheckOutcome:
    watch = Stopwatch()
    subs = [SubCheck(name="library built", ok=built.library.is_file(), detail=str(built.library))]
    symbols = exported_symbols(built.library) if built.library.is_file() else []
    foreign = foreign_exports(symbols)
    subs.append(
        SubCheck(
            name="exports only eliza_inference_*",
            ok=bool(symbols) and not foreign,
            detail=f"{len(symbols)} exported; foreign: {', '.join(foreign[:5]) or 'none'}",
        )
    )
    missing = sorted(header_functions() - set(symbols))
    subs.append(
        SubCheck(name="every header function exported", ok=not missing, detail=", ".join(missing) or "all")
    )
    info_path = built.library.parent / "build-info.json"
    info = json.loads(info_path.read_text()) if info_path.is_file() else {}
    gates = sorted(info.get("gates", [])) if info else None
    subs.append(
        SubCheck(
            name="build-info gates match the cell",
            ok=gates == sorted(g.id for g in cell.gates),
            detail=f"build-info says {gates}",
        )
    )
    llama = info.get("llama_cpp") or {}
    if cell.platform.llama_backend == "cuda":
        deps = subprocess.run(["ldd", str(built.library)], capture_output=True, text=True, check=False).stdout
        for lib in ("libcudart", "libcublas"):
            subs.append(SubCheck(name=f"links {lib}", ok=lib in deps, detail=_ldd_line(deps, lib)))
        if cpu_reference is not None and bundle is not None:
            subs.append(cpu_fallback_subcheck(built.library, cpu_reference, bundle))
    source = llama.get("source", {})
    return _from_subchecks(
        cell,
        check_id,
        subs,
        watch,
        artifacts=(built.library, info_path),
        metrics={"build_s": round(built.seconds, 2)},
        details={
            "exports": symbols,
            "llama_source": source.get("requirement") or source.get("path") or source.get("kind", "unknown"),
            "llama_commit": source.get("upstream_commit") or source.get("content_hash", "unknown"),
            "isa": llama.get("cpu_isa", "unknown"),
            "cuda_architectures": llama.get("cuda_architectures", ""),
            "compiler": info.get("compiler", ""),
            "llama_package_id": built.llama_package_id,
            "llama_built_now": built.llama_built_now,
        },
    )


def _ldd_line(ldd: str, lib: str) -> str:
    return next(
        (line.strip() for line in ldd.splitlines() if lib in line), f"{lib} not among the dependencies"
    )


def abi_outcome(cell: Cell, check_id: str, library: Path, reference: Path | None) -> CheckOutcome:
    """Exports of this cell = the header's functions; abidiff against the no-gate cell."""
    watch = Stopwatch()
    symbols = exported_symbols(library)
    expected = header_functions()
    subs = [
        SubCheck(
            name="exports equal the header's functions",
            ok=set(symbols) == expected,
            detail=f"extra: {sorted(set(symbols) - expected)}; missing: {sorted(expected - set(symbols))}",
        )
    ]
    details: dict[str, object] = {"exports": symbols}
    if reference is not None and reference != library:
        try:
            diff = abidiff(reference, library)
        except AbiToolMissing as exc:
            return outcome(cell.id, check_id, ran=0, passed=0, watch=watch, reason=str(exc), error=True)
        subs.append(
            SubCheck(
                name="abidiff vs the no-gate cell reports no change",
                ok=diff.exit_code == 0,
                detail=f"abidiff exit {diff.exit_code}",
            )
        )
        subs.append(
            SubCheck(
                name="export list equals the no-gate cell's",
                ok=symbols == exported_symbols(reference),
                detail=str(reference),
            )
        )
        details["abi_diff"] = diff.report or "(no differences)"
        details["abidiff_exit"] = diff.exit_code
    return _from_subchecks(cell, check_id, subs, watch, artifacts=(library,), details=details)


@dataclass(frozen=True, kw_only=True)
class CaseResult:
    name: str
    passed: bool
    skipped: bool
    message: str


def read_junit(path: Path) -> list[CaseResult]:
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        cases.append(
            CaseResult(
                name=f"{case.get('classname', '')}::{case.get('name', '')}",
                passed=failure is None and case.find("skipped") is None,
                skipped=case.find("skipped") is not None,
                message=(failure.get("message", "") if failure is not None else ""),
            )
        )
    return cases


@dataclass(frozen=True, kw_only=True)
class PytestRun:
    cases: list[CaseResult]
    log: str
    error: str = ""  # pytest did not finish with results (crash, collection error, kill)


def run_pytest(paths: Sequence[str], junit: Path, env: dict[str, str]) -> PytestRun:
    """Runs a suite and reads its JUnit XML. Only pytest's own verdicts (exit 0 or 1) with a
    fresh XML count: an old file from an earlier run is removed first."""
    junit.parent.mkdir(parents=True, exist_ok=True)
    junit.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *paths]
    result = subprocess.run(
        cmd, cwd=REPO_ROOT, env={**os.environ, **env}, capture_output=True, text=True, check=False
    )
    log = (result.stdout + result.stderr)[-4000:]
    if result.returncode not in (0, 1) or not junit.is_file():
        return PytestRun(
            cases=[], log=log, error=f"pytest {' '.join(paths)} exited {result.returncode} without results"
        )
    return PytestRun(cases=read_junit(junit), log=log)


def cases_outcome(
    cell: Cell,
    check_id: str,
    cases: Sequence[CaseResult],
    log: str,
    watch: Stopwatch,
    artifacts: tuple[Path, ...],
    *,
    error: str = "",
) -> CheckOutcome:
    if error:
        return outcome(
            cell.id, check_id, ran=0, passed=0, watch=watch, reason=error, error=True, log_tail=log
        )
    ran = [c for c in cases if not c.skipped]
    passed = [c for c in ran if c.passed]
    failed = [c for c in ran if not c.passed]
    reason = "; ".join(f"{c.name}: {c.message[:200]}" for c in failed[:3])
    return outcome(
        cell.id,
        check_id,
        ran=len(ran),
        passed=len(passed),
        watch=watch,
        reason=reason,
        log_tail=log,
        artifacts=artifacts,
        details={"cases": [c.name for c in ran], "failed": [c.name for c in failed]},
    )


def cases_of_cell(cases: Sequence[CaseResult], cell_id: str, all_cells: Sequence[str]) -> list[CaseResult]:
    """Cases parametrised with cell=<id> for this cell, plus the platform-wide ones."""

    def names_cell(name: str, cid: str) -> bool:
        return f"cell={cid}]" in name or f"cell={cid}-" in name

    own = [c for c in cases if names_cell(c.name, cell_id)]
    if not own:
        return []  # without a case of its own, platform-wide cases prove nothing about this cell
    return own + [c for c in cases if not any(names_cell(c.name, x) for x in all_cells)]
