"""The tiny bundle the checks run on, and text generated from a bundle through the C ABI."""

from __future__ import annotations

from pathlib import Path

from eliza.app.project import current
from eliza.core.layout import tiny_bundle_dir


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


def generate_text(library: Path, bundle: Path, prompt: str, max_tokens: int = 32) -> tuple[list[int], bytes]:
    """Greedy generation of up to `max_tokens` after `prompt`: (token ids, text bytes)."""
    from eliza.adapters.ffi import Library, greedy_config

    lib = Library(library)
    with lib.open_context(bundle) as ctx, ctx.open_stream(greedy_config(max_tokens)) as stream:
        stream.prefill(ctx.tokenize(prompt))
        return stream.generate()
