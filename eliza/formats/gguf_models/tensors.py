"""A GGUF tensor as float32 numbers, whatever type the file stores it in.

GGUFReader gives a 2-D tensor the numpy shape of ggml's `ne` reversed: (rows, columns),
which is the (out_features, in_features) of a linear layer's weight in MLX-LM and TFLite
alike, so no converter transposes. A model may mix types in one file (Gemma 3 270M's
Q4_K_M holds F32, Q8_0, Q5_0, Q4_K and Q6_K): each tensor is dequantized by its own type.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, ReaderTensor
from gguf.quants import dequantize

FLOAT_TYPES = (GGMLQuantizationType.F32, GGMLQuantizationType.F16, GGMLQuantizationType.F64)


def numpy_shape(tensor: ReaderTensor) -> tuple[int, ...]:
    """(rows, columns) of a 2-D tensor, (n,) of a vector: ggml's ne reversed."""
    return tuple(int(n) for n in reversed(tensor.shape.tolist()))


def check_dequantizable(path: Path, tensor: ReaderTensor, error: type[ValueError]) -> None:
    """`error` naming the file, the tensor and its type when gguf cannot dequantize it."""
    if tensor.tensor_type in FLOAT_TYPES:
        return
    rows = tensor.data.reshape(-1, tensor.data.shape[-1])
    try:
        dequantize(rows[:1], tensor.tensor_type)
    except (NotImplementedError, ValueError) as exc:
        raise error(
            f"{path}: {tensor.name} is of type {tensor.tensor_type.name}, which gguf cannot dequantize "
            f"({exc}); requantize the model to F16 or a common type (Q8_0, Q4_K)"
        ) from exc


def float32(path: Path, tensor: ReaderTensor, error: type[ValueError]) -> npt.NDArray[np.float32]:
    """The tensor's values as float32 in its numpy shape (rows, columns)."""
    if tensor.tensor_type in FLOAT_TYPES:
        # By value, not gguf's byte view: the reader has already ordered a big-endian file's bytes.
        values = np.asarray(tensor.data, dtype=np.float32)
    else:
        try:
            values = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        except (NotImplementedError, ValueError) as exc:
            raise error(
                f"{path}: {tensor.name} is of type {tensor.tensor_type.name}, which gguf cannot dequantize "
                f"({exc}); requantize the model to F16 or a common type (Q8_0, Q4_K)"
            ) from exc
    return np.ascontiguousarray(values.reshape(numpy_shape(tensor)), dtype=np.float32)


def check_tensors(
    path: Path,
    present: dict[str, ReaderTensor],
    expected: dict[str, tuple[int, ...]],
    error: type[ValueError],
    *,
    architecture: str,
    layers: int,
    known_unsupported: dict[str, str] | None = None,
) -> None:
    """`error` naming the first problem when the file's tensors are not exactly `expected`
    (names and numpy shapes): an unknown tensor, a missing one, a shape the keys contradict."""
    unknown = sorted(n for n in present if n not in expected)
    if unknown:
        known = [(known_unsupported or {})[n] for n in unknown if n in (known_unsupported or {})]
        what = known[0] if known else f"{len(unknown)} tensor(s) a dense {architecture} model has not"
        raise error(
            f"{path}: {what} ({', '.join(unknown[:3])}{', ...' if len(unknown) > 3 else ''}); "
            f"this converter maps the plain {architecture} tensors only"
        )
    missing = sorted(n for n in expected if n not in present)
    if missing:
        raise error(
            f"{path}: tensor(s) missing for {layers} layers: {', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}; the GGUF is incomplete or not a {architecture} model"
        )
    for name, dims in expected.items():
        got = numpy_shape(present[name])
        if got != dims:
            raise error(
                f"{path}: {name} has shape {got} (rows, columns), expected {dims} from the "
                "hyper-parameters; the GGUF's metadata and tensors disagree"
            )
