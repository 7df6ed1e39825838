"""A GGUF as an MLX-LM weights directory (config.json, model.safetensors): llama and Gemma 3.

The MLX runtime computes from the same model the llama.cpp runtime loads, so its byte-identity
comparisons mean something only when both read one set of weights. The directory is derived
from the GGUF, never shipped beside it, and carries a record (eliza-conversion.json) of the
GGUF and converter it came from, so a stale directory is noticed instead of silently loaded.

One module per architecture (`llama`, `gemma3`) maps its tensors and config.json, chosen by
the GGUF's `general.architecture`; this module and `common` hold what they share: the
record, the staleness check, the output directory and the safetensors writer. A new
architecture is one more module and one more entry in ARCHITECTURES.

GGUFReader gives a 2-D tensor the numpy shape of ggml's `ne` reversed, which is the
(out_features, in_features) shape of an MLX-LM linear weight: no transpose. A quantized
matrix is written as MLX affine groups (`<module>.weight` packed in uint32, `.scales`,
`.biases`, float32) that hold the GGUF's own blocks, exactly where the type allows
(eliza.formats.gguf_models.affine), and config.json's `quantization` says each module's
bits as MLX-LM reads them; float tensors stay float32. `dense=True` (the command's
`--dense`, for debugging) writes every tensor as float32 instead. The safetensors file is
written here by hand: tensors in name order, a fixed header, so a conversion is
byte-deterministic and needs no dependency besides numpy and gguf.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from gguf import GGUFReader

from eliza import __version__ as ELIZA_VERSION
from eliza.formats.files import atomic_write_directory, atomic_write_text, sha256_file
from eliza.formats.gguf_models import header
from eliza.formats.gguf_models.affine import GROUP_SIZE
from eliza.formats.gguf_models.llama import unpermute_rope_rows
from eliza.formats.mlx_weights import gemma3, llama
from eliza.formats.mlx_weights.common import (
    MlxWeightsError,
    ModelConfig,
    ModuleQuantization,
    Plan,
    PlannedTensor,
    write_safetensors,
)
from eliza.formats.mlx_weights.gemma3 import Gemma3Config
from eliza.formats.mlx_weights.llama import LlamaConfig

__all__ = [
    "ARCHITECTURES",
    "CONFIG_NAME",
    "CONVERTER_VERSION",
    "DEFAULT_DIR_NAME",
    "FORMAT",
    "RECORD_NAME",
    "WEIGHTS_NAME",
    "ConversionRecord",
    "Gemma3Config",
    "LlamaConfig",
    "MlxWeightsError",
    "ModelConfig",
    "ModuleQuantization",
    "Plan",
    "PlannedTensor",
    "config_json",
    "convert",
    "default_out_dir",
    "repair_command",
    "stale_reason",
    "unpermute_rope_rows",
    "write_safetensors",
]

# Bump when the bytes a conversion writes change for the same GGUF: every directory written
# by an older converter is then stale and rewritten.
CONVERTER_VERSION = "2"
FORMAT = "eliza-mlx-weights/1"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
RECORD_NAME = "eliza-conversion.json"
DEFAULT_DIR_NAME = "mlx"


class PlanFunction(Protocol):
    def __call__(self, reader: GGUFReader, path: Path, *, dense: bool) -> Plan: ...


# general.architecture -> the module's plan of the conversion.
ARCHITECTURES: Mapping[str, PlanFunction] = MappingProxyType(
    {llama.ARCHITECTURE: llama.plan, gemma3.ARCHITECTURE: gemma3.plan}
)


@dataclass(frozen=True, kw_only=True)
class ConversionRecord:
    """What one conversion wrote and from what: eliza-conversion.json, plus the directory
    and the tensor count for whoever ran it."""

    out_dir: Path
    source_gguf: str
    source_sha256: str
    files: Mapping[str, str]
    tensor_count: int
    config: ModelConfig
    dense: bool
    quantization: Mapping[str, ModuleQuantization]
    added_error: Mapping[str, float]
    converter_version: str = CONVERTER_VERSION
    eliza_version: str = ELIZA_VERSION
    format: str = FORMAT

    def to_json(self) -> dict[str, object]:
        return {
            "format": self.format,
            "converter_version": self.converter_version,
            "eliza_version": self.eliza_version,
            "source_gguf": self.source_gguf,
            "source_sha256": self.source_sha256,
            "files": dict(sorted(self.files.items())),
            "dense": self.dense,
            # what was not carried over exactly: module -> GGUF type, bits, relative RMS error
            "requantized": {
                module: {
                    "source_type": self.quantization[module].source_type,
                    "bits": self.quantization[module].bits,
                    "relative_rms_error": round(error, 6),
                }
                for module, error in sorted(self.added_error.items())
            },
        }


def default_out_dir(gguf_path: Path) -> Path:
    """`<GGUF's folder>/mlx`: in a bundle, `<bundle>/text/mlx` beside `text/<model>.gguf`."""
    return gguf_path.parent / DEFAULT_DIR_NAME


def repair_command(gguf_path: Path, out_dir: Path, *, dense: bool = False) -> str:
    command = f"eliza mlx-weights {shlex.quote(str(gguf_path))}"
    if out_dir != default_out_dir(gguf_path):
        command += f" --out {shlex.quote(str(out_dir))}"
    return command + (" --dense" if dense else "")


def config_json(plan: Plan) -> dict[str, object]:
    """config.json: the architecture's keys, and MLX-LM's `quantization` when any module is
    quantized: the most common bits as the default, and every module whose bits differ."""
    config = plan.config.to_json()
    if plan.quantization:
        widths = Counter(q.bits for q in plan.quantization.values())
        bits = max(sorted(widths), key=lambda b: widths[b])
        quantization: dict[str, object] = {"group_size": GROUP_SIZE, "bits": bits, "mode": "affine"}
        for module, q in sorted(plan.quantization.items()):
            if q.bits != bits:
                quantization[module] = {"group_size": q.group_size, "bits": q.bits}
        config["quantization"] = quantization
    return config


def convert(gguf_path: Path, out_dir: Path, *, dense: bool = False) -> ConversionRecord:
    """Writes the MLX-LM directory of a GGUF of one of ARCHITECTURES into `out_dir`,
    replacing it whole: quantized as the GGUF is, or every tensor float32 when `dense`."""
    reader, architecture = header.open_model(
        gguf_path, MlxWeightsError, "convert to MLX-LM weights", tuple(ARCHITECTURES)
    )
    plan = ARCHITECTURES[architecture](reader, gguf_path, dense=dense)
    _check_out_dir(gguf_path, out_dir)
    source_sha256 = sha256_file(gguf_path)
    written: list[ConversionRecord] = []

    def fill(tmp: Path) -> None:
        config_text = json.dumps(config_json(plan), indent=2, sort_keys=True) + "\n"
        atomic_write_text(tmp / CONFIG_NAME, config_text)
        files = {
            CONFIG_NAME: hashlib.sha256(config_text.encode("utf-8")).hexdigest(),
            WEIGHTS_NAME: write_safetensors(tmp / WEIGHTS_NAME, plan.tensors),
        }
        record = ConversionRecord(
            out_dir=out_dir,
            source_gguf=gguf_path.name,
            source_sha256=source_sha256,
            files=files,
            tensor_count=len(plan.tensors),
            config=plan.config,
            dense=dense,
            quantization=plan.quantization,
            added_error=plan.added_error,
        )
        atomic_write_text(tmp / RECORD_NAME, json.dumps(record.to_json(), indent=2, sort_keys=True) + "\n")
        written.append(record)

    atomic_write_directory(out_dir, fill)
    return written[0]


def stale_reason(gguf_path: Path, weights_dir: Path, *, dense: bool = False) -> str | None:
    """None when `weights_dir` is this converter's conversion of exactly this GGUF (dense or
    not, as asked), with every file as written; otherwise one line naming the directory,
    why, and the repair."""
    if not gguf_path.is_file():
        raise MlxWeightsError(f"{gguf_path}: no such GGUF file; name an existing .gguf file")
    repair = f"; rewrite it: {repair_command(gguf_path, weights_dir, dense=dense)}"
    record_path = weights_dir / RECORD_NAME
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{weights_dir}: no {RECORD_NAME} (never converted, or the conversion was interrupted){repair}"
    except (OSError, ValueError) as exc:
        return f"{weights_dir}: {RECORD_NAME} is unreadable ({exc}){repair}"
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        found = record.get("format") if isinstance(record, dict) else type(record).__name__
        return f"{weights_dir}: {RECORD_NAME} is of format {found!r}, not {FORMAT!r}{repair}"
    version = record.get("converter_version")
    if version != CONVERTER_VERSION:
        return (
            f"{weights_dir}: written by converter version {version!r}, this is version "
            f"{CONVERTER_VERSION!r}{repair}"
        )
    if record.get("dense", False) != dense:
        written, wanted = ("float32", "quantized") if record.get("dense") else ("quantized", "float32")
        return f"{weights_dir}: written {written}, {wanted} wanted{repair}"
    source = sha256_file(gguf_path)
    recorded_source = str(record.get("source_sha256"))
    if recorded_source != source:
        return (
            f"{weights_dir}: converted from {record.get('source_gguf')} (sha256 {recorded_source[:12]}), "
            f"not from {gguf_path.name} (sha256 {source[:12]}){repair}"
        )
    recorded_files = record.get("files")
    if not isinstance(recorded_files, dict):
        return f"{weights_dir}: {RECORD_NAME} lists no files{repair}"
    for name in (CONFIG_NAME, WEIGHTS_NAME):
        expected = recorded_files.get(name)
        path = weights_dir / name
        if expected is None:
            return f"{weights_dir}: {RECORD_NAME} does not record {name}{repair}"
        if not path.is_file():
            return f"{weights_dir}: {name} is missing{repair}"
        actual = sha256_file(path)
        if actual != expected:
            return (
                f"{weights_dir}: {name} changed since the conversion (sha256 {actual[:12]}, "
                f"recorded {str(expected)[:12]}){repair}"
            )
    return None


def _check_out_dir(gguf_path: Path, out_dir: Path) -> None:
    if out_dir.exists() and (out_dir.is_symlink() or not out_dir.is_dir()):
        raise MlxWeightsError(
            f"{out_dir}: exists and is not a directory; name a directory for the MLX weights"
        )
    source = gguf_path.resolve()
    target = out_dir.resolve()
    if source.is_relative_to(target):
        raise MlxWeightsError(
            f"{out_dir}: contains {gguf_path} and would be replaced whole; name another directory "
            f"(default: {default_out_dir(gguf_path)})"
        )
