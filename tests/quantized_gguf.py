"""Tensors of every GGUF type for the converters' tests: the types gguf can quantize
through its own quantizer, the K-quants (which it can only read) as random blocks whose
scale fields are finite float16 values, so every block is a valid one of its type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import quantize

Q = GGMLQuantizationType
# byte offsets of a K-quant block's float16 fields (d, and dmin where it has one)
_K_HALF_FIELDS = {Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,), Q.Q2_K: (80, 82), Q.Q3_K: (108,)}


def stored(
    values: np.ndarray[Any, Any], qtype: GGMLQuantizationType, rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    """What GGUFWriter.add_tensor takes for `values` (rows, columns) stored as `qtype`
    (with raw_dtype=qtype unless F32/F16). A K-quant's blocks are random, of the scale of
    `values`; its values are whatever those blocks hold."""
    if qtype == Q.F32:
        return np.asarray(values, dtype=np.float32)
    if qtype == Q.F16:
        return np.asarray(values, dtype=np.float16)
    if qtype not in _K_HALF_FIELDS:
        return quantize(np.asarray(values, dtype=np.float32), qtype)
    block_values, block_bytes = GGML_QUANT_SIZES[qtype]
    rows, columns = values.shape
    if columns % block_values:
        raise ValueError(f"{qtype.name} needs rows a multiple of {block_values} long, not {columns}")
    blocks = rng.integers(0, 256, size=(rows * columns // block_values, block_bytes), dtype=np.uint8)
    spread = float(np.std(values)) or 1.0
    for offset in _K_HALF_FIELDS[qtype]:
        half = (rng.uniform(0.5, 1.5, size=len(blocks)) * spread / 32).astype(np.float16)
        blocks[:, offset : offset + 2] = half.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, columns // block_values * block_bytes)


def quantized_copy(src: Path, dst: Path, qtype: GGMLQuantizationType, seed: int = 0) -> Path:
    """The GGUF at `src` (a float model) written again with every matrix whose rows `qtype`'s
    blocks divide stored as `qtype`: the same keys, the vectors and other matrices as they were."""
    reader = GGUFReader(src)
    rng = np.random.default_rng(seed)
    dst.parent.mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(str(dst), arch=str(reader.fields["general.architecture"].contents()))
    copy_keys(reader, writer)
    for t in reader.tensors:
        values = np.asarray(t.data, dtype=np.float32).reshape(tuple(reversed(t.shape.tolist())))
        if values.ndim == 2 and values.shape[1] % GGML_QUANT_SIZES[qtype][0] == 0:
            writer.add_tensor(t.name, stored(values, qtype, rng), raw_dtype=qtype)
        else:
            writer.add_tensor(t.name, values)
    write_out(writer)
    return dst


def copy_keys(reader: GGUFReader, writer: GGUFWriter) -> None:
    """Every key of `reader`'s file but the ones the writer writes itself."""
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)


def write_out(writer: GGUFWriter) -> None:
    """The header, the keys and the tensors added to `writer`, then the file closed."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
