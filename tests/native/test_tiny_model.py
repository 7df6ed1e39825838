"""The tiny model is deterministic: same seed, same bytes; another seed, other bytes."""

from __future__ import annotations

import hashlib
from pathlib import Path

from eliza.app.services.bundle import tiny_vocab
from eliza.formats.tiny_gguf import TinyModelSpec, write_tiny_bundle, write_tiny_gguf


def test_same_seed_same_sha256(tmp_path: Path) -> None:
    vocab = tiny_vocab()
    a = write_tiny_gguf(tmp_path / "a.gguf", vocab, TinyModelSpec(seed=7))
    b = write_tiny_gguf(tmp_path / "b.gguf", vocab, TinyModelSpec(seed=7))
    c = write_tiny_gguf(tmp_path / "c.gguf", vocab, TinyModelSpec(seed=8))
    assert a == b == hashlib.sha256((tmp_path / "a.gguf").read_bytes()).hexdigest()
    assert c != a
    assert not list(tmp_path.glob("*.part"))


def test_bundle_layout(tmp_path: Path) -> None:
    import json

    manifest = write_tiny_bundle(tmp_path / "b", tiny_vocab())
    data = json.loads(manifest.read_text())
    model = tmp_path / "b" / data["text"]["model"]
    assert model.parent.name == "text" and model.suffix == ".gguf"
    assert data["text"]["sha256"] == hashlib.sha256(model.read_bytes()).hexdigest()
