"""What every architecture's conversion shares: its error, the plan it hands back (a config
and the tensors, each loaded only when written), the loading of a GGUF tensor as float32,
and the safetensors writer."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import numpy.typing as npt
from gguf import ReaderTensor

from eliza.formats.gguf_models import tensors as gguf_tensors

_SAFETENSORS_METADATA = {"format": "mlx"}


class MlxWeightsError(ValueError):
    """A GGUF this converter cannot turn into MLX-LM weights; str() is one line naming the
    file, what is wrong and what would fix it."""


class ModelConfig(Protocol):
    """An architecture's config.json, as MLX-LM's model of that architecture reads it."""

    def to_json(self) -> dict[str, object]: ...


@dataclass(frozen=True, kw_only=True)
class PlannedTensor:
    """One tensor of the output: its shape is known before `load` dequantizes it, so the
    safetensors header is written first and the tensors stream one at a time."""

    name: str
    shape: tuple[int, ...]
    load: Callable[[], npt.NDArray[np.float32]]


@dataclass(frozen=True, kw_only=True)
class Plan:
    """An architecture's conversion of one GGUF, checked whole before anything is written."""

    config: ModelConfig
    tensors: list[PlannedTensor]


def loader(
    path: Path,
    tensor: ReaderTensor,
    transform: Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float32]] | None = None,
) -> Callable[[], npt.NDArray[np.float32]]:
    """The tensor as float32 in its (rows, columns) shape, through `transform` if given."""
    gguf_tensors.check_dequantizable(path, tensor, MlxWeightsError)

    def load() -> npt.NDArray[np.float32]:
        weight = gguf_tensors.float32(path, tensor, MlxWeightsError)
        if transform is not None:
            weight = transform(weight)
        return np.ascontiguousarray(weight, dtype=np.float32)

    return load


def write_safetensors(path: Path, tensors: Sequence[PlannedTensor]) -> str:
    """The safetensors layout (u64 LE header length, JSON header, raw LE data), in name
    order with a space-padded header, fsynced; returns the file's sha256."""
    ordered = sorted(tensors, key=lambda t: t.name)
    header: dict[str, object] = {"__metadata__": _SAFETENSORS_METADATA}
    offset = 0
    for tensor in ordered:
        size = 4 * int(np.prod(tensor.shape, dtype=np.int64))
        header[tensor.name] = {
            "dtype": "F32",
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    header_bytes = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("utf-8")
    header_bytes += b" " * (-len(header_bytes) % 8)
    digest = hashlib.sha256()
    with path.open("wb") as handle:
        for chunk in (len(header_bytes).to_bytes(8, "little"), header_bytes):
            handle.write(chunk)
            digest.update(chunk)
        for tensor in ordered:
            values = np.ascontiguousarray(tensor.load(), dtype="<f4")
            if values.shape != tensor.shape:
                raise ValueError(f"{tensor.name}: loaded shape {values.shape}, planned {tensor.shape}")
            data = values.data.cast("B")
            handle.write(data)
            digest.update(data)
        handle.flush()
        os.fsync(handle.fileno())
    return digest.hexdigest()
