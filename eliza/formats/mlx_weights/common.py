"""What every architecture's conversion shares: its error, the plan it hands back (a config,
the tensors, each computed only when written, and how each module is quantized), the
tensors of one GGUF tensor (affine groups or dense float32) and the safetensors writer. An
architecture says only what each of its GGUF tensors is called in MLX-LM and what changes
(`Mapping`)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
from gguf import GGUFReader, ReaderTensor

from eliza.formats.gguf_models import affine
from eliza.formats.gguf_models import tensors as gguf_tensors

_SAFETENSORS_METADATA = {"format": "mlx"}
_ITEM_BYTES = {"F32": 4, "U32": 4}
_NUMPY_TYPES = {"F32": "<f4", "U32": "<u4"}


class MlxWeightsError(ValueError):
    """A GGUF this converter cannot turn into MLX-LM weights; str() is one line naming the
    file, what is wrong and what would fix it."""


class ModelConfig(Protocol):
    """An architecture's config.json, as MLX-LM's model of that architecture reads it."""

    def to_json(self) -> dict[str, object]: ...


@dataclass(frozen=True, kw_only=True)
class PlannedTensor:
    """One tensor of the output: its shape and type are known before `load` computes it, so
    the safetensors header is written first and the tensors stream one at a time."""

    name: str
    shape: tuple[int, ...]
    load: Callable[[], npt.NDArray[Any]]
    dtype: str = "F32"  # safetensors' name: F32, or U32 for packed quantized values


@dataclass(frozen=True, kw_only=True)
class ModuleQuantization:
    """How one module's weight is stored: MLX affine groups, and how they relate to the GGUF."""

    bits: int
    group_size: int
    source_type: str  # the GGUF's type of the tensor
    exact: bool  # the GGUF's values exactly; else quantized again (Plan.added_error says how far)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """An architecture's conversion of one GGUF, checked whole before anything is written."""

    config: ModelConfig
    tensors: list[PlannedTensor]
    # module -> its groups; a module not named here is dense (as are all, for --dense)
    quantization: dict[str, ModuleQuantization] = field(default_factory=dict)
    # module -> the relative RMS error its requantization added, filled in as it is written
    added_error: dict[str, float] = field(default_factory=dict)


RowOrder = Callable[[npt.NDArray[Any]], npt.NDArray[Any]]
DenseTransform = Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float32]]


@dataclass(frozen=True, kw_only=True)
class Mapping:
    """What an architecture says of one GGUF tensor: its MLX-LM module, and what changes."""

    module: str  # "model.layers.0.self_attn.q_proj"; the tensors are <module>.weight (...)
    rows: RowOrder | None = None  # a permutation of the rows (llama's Q and K)
    transform: DenseTransform | None = None  # of the values of a dense tensor (Gemma's norms)


def plan_of(
    config: ModelConfig,
    path: Path,
    reader: GGUFReader,
    expected: dict[str, tuple[int, ...]],
    mapping: Callable[[str], Mapping],
    *,
    architecture: str,
    layers: int,
    known_unsupported: dict[str, str] | None = None,
    dense: bool,
) -> Plan:
    """Every expected GGUF tensor as its MLX-LM tensors. A quantized matrix becomes affine
    groups (`<module>.weight` packed, `.scales`, `.biases`: eliza.formats.gguf_models.affine),
    exact where its type allows; a float one, a vector, or everything when `dense`, float32.
    A requantized module's added error goes into the plan's `added_error` as it is written.
    The file's tensors must be exactly `expected` (names and shapes), else MlxWeightsError."""
    present = {t.name: t for t in reader.tensors}
    gguf_tensors.check_tensors(
        path,
        present,
        expected,
        MlxWeightsError,
        architecture=architecture,
        layers=layers,
        known_unsupported=known_unsupported,
    )
    added_error: dict[str, float] = {}
    planned: list[PlannedTensor] = []
    quantization: dict[str, ModuleQuantization] = {}
    for name, shape in expected.items():
        tensor = present[name]
        where = mapping(name)
        gguf_tensors.check_dequantizable(path, tensor, MlxWeightsError)
        if dense or len(shape) != 2 or affine.is_dense(tensor):
            if where.rows is not None and where.transform is not None:
                raise ValueError(f"{name}: a row order and a transform of one tensor")
            planned.append(
                PlannedTensor(name=f"{where.module}.weight", shape=shape, load=_dense(path, tensor, where))
            )
            continue
        bits = affine.bits_of(tensor)
        groups = _Groups(path, tensor, where, added_error)
        rows, columns = shape
        planned += [
            PlannedTensor(name=f"{where.module}.weight", shape=(rows, columns * bits // 32), dtype="U32",
                          load=groups.packed),
            PlannedTensor(name=f"{where.module}.scales", shape=(rows, columns // affine.GROUP_SIZE),
                          load=groups.scales),
            PlannedTensor(name=f"{where.module}.biases", shape=(rows, columns // affine.GROUP_SIZE),
                          load=groups.biases),
        ]  # fmt: skip
        quantization[where.module] = ModuleQuantization(
            bits=bits,
            group_size=affine.GROUP_SIZE,
            source_type=tensor.tensor_type.name,
            exact=affine.is_exact(tensor),
        )
    return Plan(config=config, tensors=planned, quantization=quantization, added_error=added_error)


def module_name(name: str, global_names: dict[str, str], layer_names: dict[str, str]) -> tuple[str, str]:
    """(the MLX-LM module of GGUF tensor `name`, its kind): `token_embd.weight` by
    `global_names`, `blk.<i>.<kind>.weight` as `model.layers.<i>.<layer_names[kind]>`."""
    layer, _, kind = name.removesuffix(".weight").rpartition(".")
    if not layer:
        return global_names[name], kind
    return f"model.layers.{layer.removeprefix('blk.')}.{layer_names[kind]}", kind


def _dense(path: Path, tensor: ReaderTensor, where: Mapping) -> Callable[[], npt.NDArray[np.float32]]:
    def load() -> npt.NDArray[np.float32]:
        weight = gguf_tensors.float32(path, tensor, MlxWeightsError)
        for change in (where.rows, where.transform):
            if change is not None:
                weight = change(weight)
        return np.ascontiguousarray(weight, dtype=np.float32)

    return load


class _Groups:
    """One tensor's affine groups, decomposed once for its three output tensors (written
    one after another: .biases, .scales, .weight in name order) and then let go."""

    def __init__(
        self, path: Path, tensor: ReaderTensor, where: Mapping, added_error: dict[str, float]
    ) -> None:
        self._path, self._tensor, self._where, self._added_error = path, tensor, where, added_error
        self._done: affine.Decomposed | None = None
        self._taken = 0

    def _take(self) -> affine.Decomposed:
        if self._done is None:
            done = affine.decompose(self._path, self._tensor, MlxWeightsError)
            if self._where.rows is not None:
                done = done.rows(np.asarray(self._where.rows(np.arange(done.q.shape[0])), dtype=np.intp))
            if not done.exact:
                self._added_error[self._where.module] = done.relative_rms_error
            self._done = done
        done = self._done
        self._taken += 1
        if self._taken == 3:
            self._done, self._taken = None, 0
        return done

    def packed(self) -> npt.NDArray[np.uint32]:
        done = self._take()
        return affine.pack(done.q, done.bits)

    def scales(self) -> npt.NDArray[np.float32]:
        return self._take().scales

    def biases(self) -> npt.NDArray[np.float32]:
        return self._take().biases


def write_safetensors(path: Path, tensors: Sequence[PlannedTensor]) -> str:
    """The safetensors layout (u64 LE header length, JSON header, raw LE data), in name
    order with a space-padded header, fsynced; returns the file's sha256."""
    ordered = sorted(tensors, key=lambda t: t.name)
    header: dict[str, object] = {"__metadata__": _SAFETENSORS_METADATA}
    offset = 0
    for tensor in ordered:
        size = _ITEM_BYTES[tensor.dtype] * int(np.prod(tensor.shape, dtype=np.int64))
        header[tensor.name] = {
            "dtype": tensor.dtype,
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
            values = np.ascontiguousarray(tensor.load(), dtype=_NUMPY_TYPES[tensor.dtype])
            if values.shape != tensor.shape:
                raise ValueError(f"{tensor.name}: loaded shape {values.shape}, planned {tensor.shape}")
            data = values.data.cast("B")
            handle.write(data)
            digest.update(data)
        handle.flush()
        os.fsync(handle.fileno())
    return digest.hexdigest()
