"""Shared by the native tests: model variants of the tiny GGUF, the slot file format
(native/src/llama_stream.cpp) with its XXH64 checksum, and child processes that run the
library under resource limits and must print nothing."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from eliza.core.layout import REPO_ROOT
from tests.quantized_gguf import copy_keys, write_out

# --- XXH64 ----------------------------------------------------------------------------

_M = (1 << 64) - 1
_P1, _P2, _P3, _P4, _P5 = (
    11400714785074694791,
    14029467366897019727,
    1609587929392839161,
    9650029242287828579,
    2870177450012600261,
)


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def xxh64(data: bytes, seed: int = 0) -> int:
    """XXH64, as native/src/xxh64.h computes it (checked against published vectors)."""
    n = len(data)
    p = 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed, (seed - _P1) & _M]
        lanes = np.frombuffer(data, dtype="<u8", count=(n // 32) * 4).reshape(-1, 4)
        for row in lanes.tolist():
            v = [_round(v[i], row[i]) for i in range(4)]
        p = (n // 32) * 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while p + 8 <= n:
        h = (_rotl(h ^ _round(0, struct.unpack_from("<Q", data, p)[0]), 27) * _P1 + _P4) & _M
        p += 8
    if p + 4 <= n:
        h = (_rotl(h ^ ((struct.unpack_from("<I", data, p)[0] * _P1) & _M), 23) * _P2 + _P3) & _M
        p += 4
    while p < n:
        h = (_rotl(h ^ ((data[p] * _P5) & _M), 11) * _P1) & _M
        p += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    h ^= h >> 32
    return h


# --- slot files -----------------------------------------------------------------------

SLOT_HEADER = struct.Struct("<8sQIIIIiIIIQ")  # 56 bytes
assert SLOT_HEADER.size == 56


@dataclass
class Slot:
    """A slot file split into its parts; bytes() packs it again with a valid checksum."""

    magic: bytes
    model_id: int
    n_vocab: int
    n_ctx: int
    n_history: int
    n_accepted: int
    generated: int
    n_pending: int
    flags: int
    reserved: int
    n_state: int
    body: bytes  # history, accepted, pending, logits, state

    @classmethod
    def parse(cls, data: bytes) -> Slot:
        fields = SLOT_HEADER.unpack_from(data)
        assert xxh64(data[:-8]) == struct.unpack_from("<Q", data, len(data) - 8)[0]
        return cls(*fields, body=data[SLOT_HEADER.size : -8])

    def bytes(self) -> bytes:
        head = SLOT_HEADER.pack(
            self.magic, self.model_id, self.n_vocab, self.n_ctx, self.n_history, self.n_accepted,
            self.generated, self.n_pending, self.flags, self.reserved, self.n_state,
        )  # fmt: skip
        payload = head + self.body
        return payload + struct.pack("<Q", xxh64(payload))

    @property
    def history(self) -> list[int]:
        return list(struct.unpack_from(f"<{self.n_history}i", self.body))

    @property
    def state(self) -> bytes:
        return self.body[len(self.body) - self.n_state :]

    def with_history(self, tokens: list[int]) -> Slot:
        """The same file listing other tokens (the cache state is left as it is)."""
        rest = self.body[4 * self.n_history :]
        return Slot(
            **{
                **self.__dict__,
                "n_history": len(tokens),
                "body": struct.pack(f"<{len(tokens)}i", *tokens) + rest,
            }
        )


# --- model variants -------------------------------------------------------------------


def model_file(bundle: Path) -> Path:
    return next((bundle / "text").glob("*.gguf"))


def bundle_with(model_bytes: bytes, bundle: Path) -> Path:
    (bundle / "text").mkdir(parents=True, exist_ok=True)
    (bundle / "text" / "model.gguf").write_bytes(model_bytes)
    return bundle


def scaled_blocks_bundle(tiny_bundle: Path, out: Path, factor: float = -2.0) -> Path:
    """The tiny model with every blk.* tensor multiplied by factor: same metadata, same
    shapes, same first and last bytes of the file, other weights."""
    src = model_file(tiny_bundle)
    data = bytearray(src.read_bytes())
    for t in GGUFReader(src).tensors:
        if t.name.startswith("blk."):
            start, end = int(t.data_offset), int(t.data_offset) + int(t.n_bytes)
            values = np.frombuffer(bytes(data[start:end]), dtype="<f4") * np.float32(factor)
            data[start:end] = values.astype("<f4").tobytes()
    return bundle_with(bytes(data), out)


def rewritten_bundle(
    tiny_bundle: Path,
    out: Path,
    extra_kv: Mapping[str, tuple[Any, GGUFValueType]] = (),  # type: ignore[assignment]
    tensors: Callable[[str, np.ndarray], np.ndarray] = lambda name, a: a,
) -> Path:
    """The tiny model written again with added metadata and tensors transformed."""
    src = model_file(tiny_bundle)
    reader = GGUFReader(src)
    (out / "text").mkdir(parents=True, exist_ok=True)
    writer = GGUFWriter(
        str(out / "text" / "model.gguf"), arch=str(reader.fields["general.architecture"].contents())
    )
    copy_keys(reader, writer)
    for name, (value, vtype) in dict(extra_kv).items():
        writer.add_key_value(name, value, vtype)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.ascontiguousarray(tensors(t.name, np.array(t.data))))
    write_out(writer)
    return out


# --- child processes ------------------------------------------------------------------

CHILD_PRELUDE = """
import json, os, resource, sys
from pathlib import Path
from eliza.adapters.ffi import ElizaError, Library, greedy_config
LIB, BUNDLE, OUT = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
ARGS = json.loads(sys.argv[4])
def vm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize")
def limit_address_space(extra):
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (vm_bytes() + extra, hard))
    return soft
def unlimit_address_space(soft):
    resource.setrlimit(resource.RLIMIT_AS, (soft, resource.getrlimit(resource.RLIMIT_AS)[1]))
def error_of(fn):
    try:
        fn()
        return None
    except ElizaError as e:
        return [e.code, e.message]
result = {}
"""

CHILD_EPILOGUE = """
OUT.write_text(json.dumps(result))
"""


@dataclass(frozen=True)
class ChildRun:
    returncode: int
    stdout: bytes
    stderr: bytes
    result: dict[str, Any] | None


def run_child(
    body: str,
    library: Path,
    bundle: Path,
    tmp: Path,
    args: Any = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> ChildRun:
    """Runs body (Python, after CHILD_PRELUDE) in a fresh interpreter that loads the library;
    body fills `result`, which comes back through a file so stdout stays the library's."""
    out = tmp / "child-result.json"
    out.unlink(missing_ok=True)
    script = CHILD_PRELUDE + body + CHILD_EPILOGUE
    child_env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-c", script, str(library), str(bundle), str(out), json.dumps(args)],
        capture_output=True,
        env=child_env,
        timeout=timeout,
        check=False,
    )
    result = json.loads(out.read_text()) if out.exists() else None
    return ChildRun(proc.returncode, proc.stdout, proc.stderr, result)


def copy_bundle(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
