"""A GGUF's header as the runtimes' converters read it (the MLX-LM weights, the .litertlm):
the file opened and its architecture checked, and its keys read with errors that name the
file, the key and what would fix it. Each converter raises its own error type, so its
callers keep catching one class."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gguf import GGUFReader

REEXPORT = "(re-export the model with llama.cpp's convert_hf_to_gguf.py)"


def field(reader: GGUFReader, key: str) -> Any:
    """The value of a header key, None when absent."""
    entry = reader.fields.get(key)
    return None if entry is None else entry.contents()


def open_model(
    gguf_path: Path, error: type[ValueError], purpose: str, architectures: tuple[str, ...]
) -> tuple[GGUFReader, str]:
    """The reader of a GGUF of one of `architectures`, and that architecture; `error` naming
    the file otherwise. `purpose` ends the refusal of another one ("convert to MLX-LM
    weights")."""
    if not gguf_path.is_file():
        raise error(f"{gguf_path}: no such GGUF file; name an existing .gguf file")
    try:
        reader = GGUFReader(gguf_path)
    except (ValueError, IndexError, OSError) as exc:
        raise error(f"{gguf_path}: not a readable GGUF file ({exc}); name a .gguf model file") from exc
    arch = field(reader, "general.architecture")
    if arch not in architectures:
        known = " or ".join(repr(a) for a in architectures)
        raise error(f"{gguf_path}: architecture {arch!r}, not {known}; only {known} GGUFs {purpose}")
    return reader, str(arch)


def open_llama(gguf_path: Path, error: type[ValueError], purpose: str) -> GGUFReader:
    """The reader of a llama-architecture GGUF; `error` naming the file otherwise."""
    return open_model(gguf_path, error, purpose, ("llama",))[0]


def positive_int(
    reader: GGUFReader,
    path: Path,
    key: str,
    error: type[ValueError],
    default: int | None = None,
    *,
    need: str = "",
) -> int:
    """A positive integer key; a per-layer array whose values are all the same counts as
    that value (some converters write head counts so). `need` says why it must be one."""
    value = field(reader, key)
    if isinstance(value, list) and value and all(v == value[0] for v in value):
        value = value[0]
    if value is None and default is not None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        found = "missing" if value is None else f"{value!r}"
        raise error(f"{path}: {key} is {found}, not a positive integer{need} {REEXPORT}")
    return value


def number(
    reader: GGUFReader, path: Path, key: str, error: type[ValueError], default: float | None = None
) -> float:
    value = field(reader, key)
    if value is None and default is not None:
        return default
    if not isinstance(value, int | float) or isinstance(value, bool):
        found = "missing" if value is None else f"{value!r}"
        raise error(f"{path}: {key} is {found}, not a number {REEXPORT}")
    return float(value)


def vocabulary_rows(reader: GGUFReader, path: Path, error: type[ValueError], architecture: str) -> int:
    """The vocabulary's size, as token_embd.weight's rows (ggml ne = (n_embd, n_vocab))."""
    embed = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    if embed is None:
        raise error(f"{path}: no token_embd.weight tensor; not a complete {architecture} model")
    return int(embed.shape[-1])


def check_head_groups(path: Path, error: type[ValueError], n_head: int, n_head_kv: int) -> None:
    """Grouped-query attention needs the heads to split evenly over the key/value heads."""
    if n_head % n_head_kv != 0:
        raise error(f"{path}: {n_head} attention heads do not group over {n_head_kv} key/value heads")
