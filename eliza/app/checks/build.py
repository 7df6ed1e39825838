"""The build check: the cell's library exists, exports exactly the C ABI, says which
gates and llama.cpp it was built with, and (CUDA) links the CUDA runtime and falls back
to the CPU with the CPU build's output, or (Vulkan) has the Vulkan backend and links the
Vulkan loader."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.abi_tools import exported_symbols, foreign_exports
from eliza.app.checks.job import Job
from eliza.app.services.built import BuiltCell
from eliza.app.services.clock import Stopwatch
from eliza.app.services.run import Run
from eliza.core.c_abi import header_functions
from eliza.core.layout import public_header
from eliza.core.matrix import Cell
from eliza.core.outcome import CheckOutcome, SubCheck, from_subchecks, outcome

_GENERATE = (
    "import sys\n"
    "from pathlib import Path\n"
    "from eliza.app.services.bundle import generate_text\n"
    "tokens, text = generate_text(Path(sys.argv[1]), Path(sys.argv[2]), 'Once upon a time there was', 48)\n"
    "print(' '.join(map(str, tokens)), text.hex())\n"
)


def generated_in_subprocess(library: Path, bundle: Path, repo: Path) -> tuple[str, str]:
    """(stdout, stderr) of a greedy generation in a fresh process: a CUDA build initialises
    CUDA there, and a failure cannot take the orchestrator down with it."""
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this runs the CPU fallback even on a GPU host.
    result = proc.run(
        [sys.executable, "-c", _GENERATE, library, bundle], cwd=repo, extra_env={"CUDA_VISIBLE_DEVICES": ""}
    )
    return result.stdout.strip(), result.stderr.strip()[-500:]


def cpu_fallback_subcheck(library: Path, cpu_reference: Path, bundle: Path, repo: Path) -> SubCheck:
    """A CUDA build on a host without a GPU runs on the CPU; its output must equal the CPU build's."""
    got, err = generated_in_subprocess(library, bundle, repo)
    want, _ = generated_in_subprocess(cpu_reference, bundle, repo)
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
    repo: Path,
    cpu_reference: Path | None = None,
    bundle: Path | None = None,
) -> CheckOutcome:
    watch = Stopwatch()
    subs = [SubCheck(name="library built", ok=built.library.is_file(), detail=str(built.library))]
    symbols = exported_symbols(built.library, cell.platform) if built.library.is_file() else []
    foreign = foreign_exports(symbols)
    subs.append(
        SubCheck(
            name="exports only eliza_inference_*",
            ok=bool(symbols) and not foreign,
            detail=f"{len(symbols)} exported; foreign: {', '.join(foreign[:5]) or 'none'}",
        )
    )
    missing = sorted(header_functions(public_header(repo).read_text()) - set(symbols))
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
    if cell.variant is not None and cell.variant.sanitizers:
        # a build variant: the library and its llama.cpp package carry its sanitizers
        wanted = cell.variant.sanitize_option
        said = (info.get("sanitize"), llama.get("sanitize"))
        subs.append(
            SubCheck(
                name=f"built with {wanted} (library and llama.cpp)",
                ok=said == (wanted, wanted),
                detail=f"build-info says library {said[0]}, llama.cpp {said[1]}",
            )
        )
        if "address" in cell.variant.sanitizers:
            deps = proc.run(["ldd", built.library]).stdout
            subs.append(
                SubCheck(name="links libasan", ok="libasan" in deps, detail=_ldd_line(deps, "libasan"))
            )
    if cell.platform.llama_backend == "cuda":
        deps = proc.run(["ldd", built.library]).stdout
        for lib in ("libcudart", "libcublas"):
            subs.append(SubCheck(name=f"links {lib}", ok=lib in deps, detail=_ldd_line(deps, lib)))
        if cpu_reference is not None and bundle is not None:
            subs.append(cpu_fallback_subcheck(built.library, cpu_reference, bundle, repo))
    if cell.platform.llama_backend == "vulkan":
        # The Vulkan backend compiled in, and the loader (which finds the host's drivers) linked.
        subs.append(
            SubCheck(
                name="llama.cpp built with Vulkan",
                ok=llama.get("with_vulkan") is True,
                detail=f"eliza-llama-build.json says with_vulkan={llama.get('with_vulkan')}",
            )
        )
        deps = proc.run(["ldd", built.library]).stdout
        subs.append(
            SubCheck(name="links libvulkan", ok="libvulkan" in deps, detail=_ldd_line(deps, "libvulkan"))
        )
    source = llama.get("source", {})
    return from_subchecks(
        cell.id,
        check_id,
        subs,
        watch.span(),
        artifacts=(built.library, info_path),
        metrics={"build_s": round(built.seconds, 2)},
        details={
            "exports": symbols,
            "llama_source": source.get("requirement") or source.get("path") or source.get("kind", "unknown"),
            "llama_commit": source.get("upstream_commit") or source.get("content_hash", "unknown"),
            "isa": llama.get("cpu_isa", "unknown"),
            "arch": cell.platform.arch,
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


def run(job: Job, evidence: Run) -> list[CheckOutcome]:
    """The steps' cells were built in this run (their build evidence did not stand)."""
    outcomes = []
    for step, (cell, check) in zip(job.steps, job.pairs(), strict=True):
        built = job.built.get(step.cell)
        if built is None:  # the plan builds every cell whose build check runs
            why = f"{cell.id} was not built in this run: its build check has nothing to judge"
            outcomes.append(
                outcome(cell.id, check.id, ran=0, passed=0, span=Stopwatch().span(), reason=why, error=True)
            )
            continue
        fallback = job.libraries.get(step.needs[0]) if step.needs else None
        outcomes.append(
            build_outcome(
                cell,
                check.id,
                built,
                repo=evidence.project.repo,
                cpu_reference=fallback,
                bundle=evidence.bundle,
            )
        )
    return outcomes
