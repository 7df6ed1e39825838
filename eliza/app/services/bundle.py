"""The bundles the checks run on (matrix.yaml `bundles`: the generated tiny fixture and
real models assembled from pinned chunks), and text generated from a bundle through the
C ABI."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from eliza.app.errors import BundleUnusable, UsageError
from eliza.app.project import current
from eliza.core.cell_id import CellId
from eliza.core.layout import tiny_bundle_dir
from eliza.core.matrix import Bundle, Gate, Matrix
from eliza.core.weight_cache import CacheState, cache_state, leftover_caches
from eliza.formats.files import sha256_file

_log = logging.getLogger("eliza.cache")


def tiny_bundle_default() -> Path:
    return tiny_bundle_dir(current().repo)


def tiny_vocab() -> Path:
    """The llama-spm vocabulary GGUF of the pinned llama.cpp tree (cached)."""
    from eliza.adapters.llama_source import vocab_gguf

    return vocab_gguf(current().cache)


def ensure_tiny_bundle(bundle_dir: Path | None = None) -> Path:
    """The deterministic tiny bundle, written (or rewritten when its generator changed)."""
    from eliza.formats.tiny_gguf import bundle_is_current, write_tiny_bundle

    bundle = bundle_dir or tiny_bundle_default()
    if not bundle_is_current(bundle):
        write_tiny_bundle(bundle, tiny_vocab())
    return bundle


# The command that fetches and assembles a model bundle again, named in its errors.
REPAIR = "nox -s verify"


def model_bundle(bundle: Bundle, matrix: Matrix) -> Path:
    """A real model's bundle folder in the cache, assembled from its pinned chunks on first
    use, every chunk and the model checked against their sha256 each time."""
    from eliza.adapters.model_bundle import BundleChunkError, ensure_model_bundle

    try:
        return ensure_model_bundle(current().cache, bundle, f"{matrix.source} bundles: {bundle.id}", REPAIR)
    except BundleChunkError as exc:
        raise BundleUnusable(str(exc)) from exc


def model_bundle_path(bundle: Bundle) -> Path:
    """Where a real model's bundle is (or will be) assembled; nothing is fetched."""
    from eliza.adapters.model_bundle import bundle_folder

    return bundle_folder(current().cache, bundle)


def ensure_bundles(matrix: Matrix, wanted: Iterable[str]) -> dict[str, Path]:
    """Bundle id -> folder for the bundles asked for (the first one always): the tiny
    fixture written when needed, each real model assembled."""
    ids = {matrix.default_bundle.id, *wanted}
    out: dict[str, Path] = {}
    for bundle in matrix.bundles:
        if bundle.id in ids:
            out[bundle.id] = ensure_bundle(matrix, bundle)
    return out


def sample_bundle(matrix: Matrix) -> Bundle:
    """The bundle text is shown from (`nox -s generate`, verify's sample line): the first
    real model, else the fixture."""
    return next((b for b in matrix.bundles if not b.generated), matrix.default_bundle)


def ensure_bundle(matrix: Matrix, bundle: Bundle) -> Path:
    return ensure_tiny_bundle() if bundle.generated else model_bundle(bundle, matrix)


def bundles_of(matrix: Matrix, cells: Iterable[CellId] | None = None) -> set[str]:
    """The bundles the checks of these cells (default: every cell) run on."""
    wanted = {str(c) for c in cells} if cells else None
    return {k.bundle for c in matrix.cells if wanted is None or c.id in wanted for k in c.checks}


def bundle_paths(matrix: Matrix) -> dict[str, Path]:
    """Bundle id -> where each bundle is, as it is now (a dry run writes nothing)."""
    return {b.id: tiny_bundle_default() if b.generated else model_bundle_path(b) for b in matrix.bundles}


def _one_gguf(bundle: Path, for_what: str = "") -> Path:
    """The bundle's one text GGUF; a usage error naming what was found otherwise."""
    models = sorted((bundle / "text").glob("*.gguf"))
    if len(models) != 1:
        found = ", ".join(m.name for m in models) or "none"
        raise UsageError(f"{bundle / 'text'}: needs exactly one .gguf{for_what}, found {found}")
    return models[0]


def ensure_mlx_weights(bundle: Path) -> Path:
    """`<bundle>/text/mlx/`, the MLX-LM directory of the bundle's one text GGUF, (re)written
    when it is missing or is not the current conversion of that GGUF: the MLX runtime must
    compute from exactly the weights llama.cpp loads."""
    from eliza.formats.mlx_weights import MlxWeightsError, convert, default_out_dir, stale_reason

    gguf = _one_gguf(bundle, " to derive the MLX weights from")
    out = default_out_dir(gguf)
    try:
        reason = stale_reason(gguf, out)
        if reason is not None:
            _say_repair(out, reason)
            convert(gguf, out)
    except MlxWeightsError as exc:
        raise UsageError(str(exc)) from exc
    return out


def ensure_litertlm(bundle: Path) -> Path:
    """`<bundle>/text/<name>.litertlm`, the LiteRT-LM model of the bundle's one text GGUF,
    (re)written when it is missing or is not the current writer's output for that GGUF: the
    engine must compute from exactly the weights and vocabulary llama.cpp loads."""
    from eliza.formats.litertlm import LitertlmError, default_out_path, stale_reason, write_litertlm

    gguf = _one_gguf(bundle, " to write the .litertlm from")
    out = default_out_path(gguf)
    try:
        reason = stale_reason(gguf, out)
        if reason is not None:
            _say_repair(out, reason)
            write_litertlm(gguf, out)
    except LitertlmError as exc:
        raise UsageError(str(exc)) from exc
    _remove_leftover_caches(out)
    return out


def _say_repair(artifact: Path, reason: str) -> None:
    """A runtime artifact there but not what its converter would write now is repaired:
    said in one line (one that is not there yet is simply written)."""
    if artifact.exists():
        _log.warning("%s; writing it again", reason.partition("; rewrite it:")[0] or reason)


def litert_weight_cache(bundle: Path) -> CacheState | None:
    """Whether a LiteRT-LM engine on `bundle` starts with its weight cache warm or cold
    (eliza.core.weight_cache); None when the bundle has no .litertlm."""
    models = sorted((bundle / "text").glob("*.litertlm"))
    return cache_state(*_beside(models[0])) if models else None


def _remove_leftover_caches(model: Path) -> None:
    """The engine's caches of earlier versions of `model`: never mapped again, only disk."""
    for name in leftover_caches(*_beside(model)):
        (model.parent / name).unlink(missing_ok=True)
        _log.warning("%s: the weight cache of an earlier %s; removed", model.parent / name, model.name)


def _beside(model: Path) -> tuple[str, int, int, list[str]]:
    """(name, mtime in whole seconds, size, the names in its folder): what the engine names
    its weight cache by, and what is there."""
    info = model.stat()
    return model.name, int(info.st_mtime), info.st_size, [p.name for p in model.parent.iterdir()]


# Gate id -> what stages its runtime's artifact into a bundle from the bundle's GGUF.
RUNTIME_STAGERS: dict[str, Callable[[Path], Path]] = {"mlx": ensure_mlx_weights, "litert": ensure_litertlm}
# Gate id -> the state of the cache its runtime keeps beside the artifact, read before a run.
RUNTIME_WEIGHT_CACHES: dict[str, Callable[[Path], CacheState | None]] = {"litert": litert_weight_cache}


def weight_cache_state(gate: str, bundle: Path) -> CacheState | None:
    """The state of the weight cache gate `gate`'s runtime keeps in `bundle` now; None for a
    runtime that keeps none."""
    probe = RUNTIME_WEIGHT_CACHES.get(gate)
    return probe(bundle) if probe is not None else None


# Checks that run side by side stage the same runtime bundle: one stages it, the others wait.
_STAGING = threading.Lock()


def ensure_runtime_bundle(bundle: Path, gates: Iterable[Gate]) -> Path:
    """`<bundle>-runtimes`: the bundle's text GGUF and, for every gate that has a stager, its
    runtime's artifact converted from that GGUF (text/mlx/ for MLX). The checks that judge a
    second runtime run on it; every other check keeps the bundle itself, whose GGUF alone
    makes each compiled-in gate fall through to llama.cpp."""
    with _STAGING:
        return _stage_runtime_bundle(bundle, gates)


def _stage_runtime_bundle(bundle: Path, gates: Iterable[Gate]) -> Path:
    gguf = _one_gguf(bundle)
    out = bundle.with_name(bundle.name + "-runtimes")
    text = out / "text"
    text.mkdir(parents=True, exist_ok=True)
    for stale in text.glob("*.gguf"):
        if stale.name != gguf.name:
            stale.unlink()
    target = text / gguf.name
    if not target.is_file() or sha256_file(target) != sha256_file(gguf):
        partial = target.with_name(target.name + ".part")
        shutil.copyfile(gguf, partial)
        partial.replace(target)
    for gate in gates:
        stage = RUNTIME_STAGERS.get(gate.id)
        if stage is not None:
            stage(out)
    return out


def generate_text(library: Path, bundle: Path, prompt: str, max_tokens: int = 32) -> tuple[list[int], bytes]:
    """Greedy generation of up to `max_tokens` after `prompt`: (token ids, text bytes)."""
    from eliza.adapters.ffi import Library, greedy_config

    lib = Library(library)
    with lib.open_context(bundle) as ctx, ctx.open_stream(greedy_config(max_tokens)) as stream:
        stream.prefill(ctx.tokenize(prompt))
        return stream.generate()
