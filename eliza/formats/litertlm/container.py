"""The container: the LLM metadata proto and the packing of the three sections with
litert-lm-builder, byte-deterministic (the package docstring)."""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from eliza.formats.litertlm.common import CREATION_TIMESTAMP

# litert-lm-builder reads its system-metadata hook as a module global: one build at a time
# may replace it.
_PACK_LOCK = threading.Lock()


def llm_metadata(start: int, stops: Sequence[int], context: int, model_type: str) -> bytes:
    """The LlmMetadata proto: `start` the start token, each of `stops` a stop token of its own,
    `model_type` the field of LlmModelType set (empty: no image or audio inputs)."""
    from litert_lm_builder.runtime.proto import llm_metadata_pb2  # type: ignore[import-untyped]

    metadata: Any = llm_metadata_pb2.LlmMetadata()
    metadata.start_token.token_ids.ids.append(start)
    for stop in stops:
        metadata.stop_tokens.add().token_ids.ids.append(stop)
    metadata.max_num_tokens = context
    getattr(metadata.llm_model_type, model_type).SetInParent()
    serialized: bytes = metadata.SerializeToString(deterministic=True)
    return serialized


def pack(out: Path, sections: Mapping[str, bytes]) -> None:
    """Packs the sections into `out` (a fresh file): litert-lm-builder reads each from a path."""
    from litert_lm_builder import litertlm_builder as lb  # type: ignore[import-untyped]

    digest = hashlib.sha256()
    for name in sorted(sections):
        digest.update(name.encode() + b"\0" + len(sections[name]).to_bytes(8, "little") + sections[name])
    file_uuid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"urn:sha256:{digest.hexdigest()}"))

    def derived_system_metadata(system_metadata: list[Any]) -> list[Any]:
        kept = [m for m in system_metadata if m.key not in ("uuid", "creation_timestamp")]
        return [
            *kept,
            lb.Metadata(key="uuid", value=file_uuid, dtype=lb.DType.STRING),
            lb.Metadata(key="creation_timestamp", value=CREATION_TIMESTAMP, dtype=lb.DType.STRING),
        ]

    with tempfile.TemporaryDirectory(prefix="eliza-litertlm-") as folder:
        paths = {name: Path(folder) / name for name in sections}
        for name, data in sections.items():
            paths[name].write_bytes(data)
        builder = lb.LitertLmFileBuilder()
        builder.add_llm_metadata(str(paths["llm_metadata.pb"]))
        builder.add_sentencepiece_tokenizer(str(paths["tokenizer.spm"]))
        builder.add_tflite_model(str(paths["model.tflite"]), lb.TfLiteModelType.PREFILL_DECODE)
        with _replaced(lb, "populate_system_metadata", derived_system_metadata), out.open("wb") as handle:
            builder.build(handle)
            handle.flush()
            os.fsync(handle.fileno())


@contextmanager
def _replaced(module: Any, name: str, value: Callable[..., Any]) -> Iterator[None]:
    with _PACK_LOCK:
        original = getattr(module, name)
        setattr(module, name, value)
        try:
            yield
        finally:
            setattr(module, name, original)
