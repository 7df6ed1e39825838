"""A GGUF weight as affine groups: w = scale * q + bias, with q an unsigned integer of a few
bits and one scale and one bias per group of 32 consecutive values of a row.

That is the quantization MLX (and MLX-LM's files) compute with. Most of llama.cpp's block
types are exactly such groups, so their weights carry over without one value changing:

| GGUF type | bits | scale | bias |
|---|---|---|---|
| Q8_0 | 8 | d | -128 d |
| Q5_0 | 5 | d | -16 d |
| Q4_0 | 4 | d | -8 d |
| Q5_1, Q4_1 | 5, 4 | d | m |
| Q5_K, Q4_K | 5, 4 | d * sc (per 32-value sub-block) | -dmin * m |

Scales and biases are float32: every product above is exact there (a float16 times an
integer of at most 8 bits), and `scale * q + bias` rounds once, as gguf's dequantization
does, so each value is the GGUF's bit for bit but for the sign of a zero (`decompose`
checks it before returning). Only about 6 % of Q4_K's scales would fit float16.

Every other quantized type (Q6_K and Q2_K/Q3_K have sub-blocks of 16, the IQ types a grid)
has no exact form; it is dequantized and quantized again to 8 bits in groups of 32 (min/max
per group), which adds about 0.5 % relative RMS error to a Q6_K weight (Gemma 3 270M's
nine: 0.47-0.48 %). `Decomposed.relative_rms_error` says what was added, 0 for an exact
type. Float tensors (F32, F16, BF16) are not quantized at all: the converters keep them
dense.

`int8_rows` is the other scheme the runtimes deploy: XNNPACK's (LiteRT-LM's CPU path)
symmetric int8 per output channel, which no GGUF block type matches exactly.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, ReaderTensor

from eliza.formats.gguf_models import tensors as gguf_tensors

GROUP_SIZE = 32
REQUANTIZED_BITS = 8

Q = GGMLQuantizationType
# type -> (bits, bytes per block, values per block)
_EXACT: dict[GGMLQuantizationType, tuple[int, int, int]] = {
    Q.Q8_0: (8, 34, 32),
    Q.Q5_0: (5, 22, 32),
    Q.Q4_0: (4, 18, 32),
    Q.Q5_1: (5, 24, 32),
    Q.Q4_1: (4, 20, 32),
    Q.Q5_K: (5, 176, 256),
    Q.Q4_K: (4, 144, 256),
}
EXACT_TYPES = frozenset(_EXACT)


@dataclass(frozen=True, kw_only=True)
class Decomposed:
    """One 2-D weight as affine groups of GROUP_SIZE along its rows."""

    bits: int
    q: npt.NDArray[np.uint8]  # (rows, columns), each < 2**bits
    scales: npt.NDArray[np.float32]  # (rows, columns / GROUP_SIZE)
    biases: npt.NDArray[np.float32]
    exact: bool
    relative_rms_error: float  # of scale * q + bias against the GGUF's values; 0.0 when exact

    def values(self) -> npt.NDArray[np.float32]:
        """scale * q + bias, rounded once in float32, as MLX's dequantize computes it."""
        rows, columns = self.q.shape
        grouped = self.q.reshape(rows, columns // GROUP_SIZE, GROUP_SIZE).astype(np.float32)
        grouped *= self.scales[..., None]
        grouped += self.biases[..., None]
        return grouped.reshape(rows, columns)

    def rows(self, order: npt.NDArray[np.intp]) -> Decomposed:
        """The same weight with its rows taken in `order` (groups run along a row)."""
        return Decomposed(
            bits=self.bits,
            q=np.ascontiguousarray(self.q[order]),
            scales=np.ascontiguousarray(self.scales[order]),
            biases=np.ascontiguousarray(self.biases[order]),
            exact=self.exact,
            relative_rms_error=self.relative_rms_error,
        )


def is_dense(tensor: ReaderTensor) -> bool:
    """Float tensors stay dense; every quantized one becomes affine groups."""
    return tensor.tensor_type in gguf_tensors.FLOAT_TYPES or tensor.tensor_type == Q.BF16


def is_exact(tensor: ReaderTensor) -> bool:
    return tensor.tensor_type in _EXACT


def bits_of(tensor: ReaderTensor) -> int:
    """The width its groups get: the type's own where exact, else REQUANTIZED_BITS."""
    return bits_of_type(tensor.tensor_type)


def bits_of_type(kind: GGMLQuantizationType) -> int:
    return _EXACT[kind][0] if kind in _EXACT else REQUANTIZED_BITS


def decompose(path: Path, tensor: ReaderTensor, error: type[ValueError]) -> Decomposed:
    """The GGUF's quantized 2-D `tensor` as affine groups, exact where its type allows."""
    values = gguf_tensors.float32(path, tensor, error)
    if values.ndim != 2 or values.shape[1] % GROUP_SIZE:
        raise error(
            f"{path}: {tensor.name} has shape {values.shape}; affine groups need a matrix whose rows "
            f"are a multiple of {GROUP_SIZE} long"
        )
    rows, columns = values.shape
    if tensor.tensor_type not in _EXACT:
        return requantize(values)
    bits, block_bytes, block_values = _EXACT[tensor.tensor_type]
    blocks = np.asarray(tensor.data, dtype=np.uint8).reshape(rows * columns // block_values, block_bytes)
    scales, biases = _block_scales(tensor.tensor_type, blocks)
    scales = scales.reshape(rows, columns // GROUP_SIZE)
    biases = biases.reshape(rows, columns // GROUP_SIZE)
    if tensor.tensor_type == Q.Q8_0:  # the values are the block's int8 bytes, offset
        q = (blocks[:, 2:].view(np.int8).astype(np.int16) + 128).astype(np.uint8).reshape(rows, columns)
    else:
        s = scales[..., None]
        level = values.reshape(rows, columns // GROUP_SIZE, GROUP_SIZE) - biases[..., None]
        level /= np.where(s != 0, s, np.float32(1))
        np.rint(level, out=level)
        np.clip(level, 0, (1 << bits) - 1, out=level)
        level[np.broadcast_to(s == 0, level.shape)] = 0
        q = level.astype(np.uint8).reshape(rows, columns)
    out = Decomposed(bits=bits, q=q, scales=scales, biases=biases, exact=True, relative_rms_error=0.0)
    # As numbers: a zero may come back with the other sign (d * 0 is -0 for a negative d,
    # d * 16 - 16 * d is +0), which no product or sum of the weight can tell apart.
    if not np.array_equal(out.values(), values):
        raise error(
            f"{path}: {tensor.name} ({tensor.tensor_type.name}) does not decompose into affine groups "
            "exactly; this is a converter defect, please report it with the GGUF"
        )
    return out


def requantize(values: npt.NDArray[np.float32], bits: int = REQUANTIZED_BITS) -> Decomposed:
    """float32 (rows, columns) as `bits`-bit affine groups: min/max per group, q rounded to
    the nearest level."""
    rows, columns = values.shape
    grouped = values.reshape(rows, columns // GROUP_SIZE, GROUP_SIZE).astype(np.float32)
    low = grouped.min(axis=2)
    high = grouped.max(axis=2)
    levels = np.float32((1 << bits) - 1)
    scales = ((high - low) / levels).astype(np.float32)
    safe = np.where(scales != 0, scales, np.float32(1))[..., None]
    q = np.clip(np.rint((grouped - low[..., None]) / safe), 0, levels).astype(np.uint8).reshape(rows, columns)
    out = Decomposed(
        bits=bits, q=q, scales=scales, biases=low.astype(np.float32), exact=False, relative_rms_error=0.0
    )
    return replace(out, relative_rms_error=_relative_rms(out.values(), values))


def pack(q: npt.NDArray[np.uint8], bits: int) -> npt.NDArray[np.uint32]:
    """Each row's values as one little-endian bit stream, `bits` per value, in uint32 words:
    MLX's layout for every width (a 5-bit value may straddle two words)."""
    rows, columns = q.shape
    if columns % 32:
        raise ValueError(f"a row of {columns} values is not a whole number of 32-value groups")
    if bits == 8:
        return np.ascontiguousarray(q).view("<u4").astype(np.uint32)
    # Eight values fill exactly `bits` bytes: built as one little-endian uint64 each.
    eight = q.reshape(rows, columns // 8, 8).astype(np.uint64)
    words = np.bitwise_or.reduce(eight << (np.arange(8, dtype=np.uint64) * np.uint64(bits)), axis=2)
    as_bytes = words.astype("<u8").view(np.uint8).reshape(rows, columns // 8, 8)[:, :, :bits]
    return np.ascontiguousarray(as_bytes).reshape(rows, columns * bits // 8).view("<u4").astype(np.uint32)


def _block_scales(
    kind: GGMLQuantizationType, blocks: npt.NDArray[np.uint8]
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
    """Per group of 32: (scale, bias) as the block's header states them, in float32."""
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32).reshape(-1)
    if kind in (Q.Q8_0, Q.Q5_0, Q.Q4_0):
        offset = {Q.Q8_0: 128, Q.Q5_0: 16, Q.Q4_0: 8}[kind]
        return d, (np.float32(-offset) * d).astype(np.float32)
    second = blocks[:, 2:4].copy().view(np.float16).astype(np.float32).reshape(-1)
    if kind in (Q.Q5_1, Q.Q4_1):
        return d, second
    sc, m = _k_scale_min(blocks[:, 4:16])  # Q4_K and Q5_K share the 12-byte header
    scales = (d[:, None] * sc.astype(np.float32)).astype(np.float32)
    biases = -(second[:, None] * m.astype(np.float32)).astype(np.float32)
    return scales.reshape(-1), biases.reshape(-1)


def _k_scale_min(packed: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """The eight 6-bit scales and mins of a Q4_K/Q5_K super-block (ggml's get_scale_min_k4)."""
    by_kind = packed.reshape(-1, 3, 4)
    d, m, low = by_kind[:, 0], by_kind[:, 1], by_kind[:, 2]
    sc = np.concatenate([d & 0x3F, (low & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mins = np.concatenate([m & 0x3F, (low >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.astype(np.uint8), mins.astype(np.uint8)


@dataclass(frozen=True, kw_only=True)
class Int8Rows:
    """A matrix as symmetric int8 with one float32 scale per row (w = scale * q, q in
    -127..127): per output channel for a linear layer, per token for an embedding table.
    XNNPACK's int8 weights; no GGUF type carries over exactly, so the error it adds over the
    GGUF's values is measured."""

    q: npt.NDArray[np.int8]  # (rows, columns)
    scales: npt.NDArray[np.float32]  # (rows,)
    relative_rms_error: float

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.q.shape)

    @property
    def nbytes(self) -> int:
        return int(self.q.nbytes + self.scales.nbytes)

    def rows(self, order: npt.NDArray[np.intp]) -> Int8Rows:
        """The same weight with its rows taken in `order` (each row carries its own scale)."""
        return Int8Rows(
            q=np.ascontiguousarray(self.q[order]),
            scales=np.ascontiguousarray(self.scales[order]),
            relative_rms_error=self.relative_rms_error,
        )


def int8_rows(values: npt.NDArray[np.float32]) -> Int8Rows:
    """`values` (rows, columns) as symmetric int8 per row: scale max|w| / 127, q rounded to the
    nearest; an all-zero row gets scale 1 (TFLite wants every scale positive)."""
    peak = np.abs(values).max(axis=1)
    scales = np.where(peak > 0, peak / np.float32(127), np.float32(1)).astype(np.float32)
    q = np.clip(np.rint(values / scales[:, None]), -127, 127).astype(np.int8)
    relative = _relative_rms(q.astype(np.float32) * scales[:, None], values)
    return Int8Rows(q=q, scales=scales, relative_rms_error=relative)


def _relative_rms(approximation: npt.NDArray[np.float32], values: npt.NDArray[np.float32]) -> float:
    """The RMS of `approximation - values` over the RMS of `values` (0 for an all-zero one)."""
    norm = float(np.sqrt(np.mean(np.square(values, dtype=np.float64))))
    error = approximation - values
    return float(np.sqrt(np.mean(np.square(error, dtype=np.float64)))) / norm if norm else 0.0
