"""The llama.cpp sdist is taken only with the sha256 the recipe pins: a cached file that
does not hash as pinned is fetched again, and a fetched one that does not is refused,
naming the archive and the pin, and never put in the cache. pip is faked: no network."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from eliza.adapters import pip_fetch, proc
from eliza.adapters.llama_source import LlamaSourcePin, SourceError, ensure_sdist

GOOD = b"the pinned sdist"


def pin() -> LlamaSourcePin:
    return LlamaSourcePin(
        version="0.0.1",
        pip_requirement="llama-cpp-python==0.0.1",
        archive="llama_cpp_python-0.0.1.tar.gz",
        sha256=hashlib.sha256(GOOD).hexdigest(),
        subdir="vendor/llama.cpp",
        upstream_commit="0" * 40,
    )


def fake_pip(monkeypatch: pytest.MonkeyPatch, served: bytes) -> list[list[str]]:
    calls: list[list[str]] = []

    def run(argv: Sequence[str | Path], **_: object) -> proc.Completed:
        words = [str(a) for a in argv]
        calls.append(words)
        dest = Path(words[words.index("-d") + 1])
        (dest / pin().archive).write_bytes(served)
        return proc.Completed(argv=tuple(words), returncode=0, stdout="", stderr="")

    monkeypatch.setattr(pip_fetch.proc, "run", run)
    return calls


def test_a_fetched_sdist_that_does_not_match_the_pin_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_pip(monkeypatch, b"something else")
    with pytest.raises(
        SourceError, match=r"llama_cpp_python-0\.0\.1\.tar\.gz: sha256 [0-9a-f]{64} does not match"
    ):
        ensure_sdist(tmp_path, pin())
    assert not (tmp_path / "sources" / pin().archive).exists()
    assert [p.name for p in (tmp_path / "sources").iterdir()] == []  # no temporary left


def test_a_cached_sdist_is_used_only_while_it_hashes_as_pinned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = fake_pip(monkeypatch, GOOD)
    cached = tmp_path / "sources" / pin().archive
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"tampered")
    assert ensure_sdist(tmp_path, pin()).read_bytes() == GOOD  # fetched again
    assert len(calls) == 1
    assert ensure_sdist(tmp_path, pin()) == cached  # now it hashes as pinned: no fetch
    assert len(calls) == 1


def test_a_runtime_wheel_is_fetched_for_its_target_and_checked_against_its_recipes_pin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eliza.adapters.runtime_wheels import RuntimeWheelError, ensure_wheel, wheel_pin
    from eliza.app.project import load_project_matrix

    matrix = load_project_matrix()
    pins = {
        p: wheel_pin("mlx/0.32.4", matrix.platform(p)) for p in ("linux-cpu", "linux-arm64", "macos-arm64")
    }
    assert pins["linux-cpu"].pip_platform.endswith("x86_64") and pins["linux-arm64"].pip_platform.endswith(
        "aarch64"
    )
    assert pins["macos-arm64"].pip_requirement.startswith("mlx-metal==")
    with pytest.raises(RuntimeWheelError, match="pins no wheel for android-arm64"):
        wheel_pin("mlx/0.32.4", matrix.platform("android-arm64"))
    calls: list[list[str]] = []

    def run(argv: Sequence[str | Path], **_: object) -> proc.Completed:
        words = [str(a) for a in argv]
        calls.append(words)
        (Path(words[words.index("-d") + 1]) / pins["linux-arm64"].wheel).write_bytes(b"not the wheel")
        return proc.Completed(argv=tuple(words), returncode=0, stdout="", stderr="")

    monkeypatch.setattr(pip_fetch.proc, "run", run)
    with pytest.raises(RuntimeWheelError, match="does not match the pin"):
        ensure_wheel(tmp_path, pins["linux-arm64"])
    assert "--platform" in calls[0] and pins["linux-arm64"].pip_platform in calls[0]
    assert list((tmp_path / "runtime-wheels").iterdir()) == []  # nothing half-fetched is kept
