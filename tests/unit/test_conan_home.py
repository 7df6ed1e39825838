"""Preparing the project's Conan home: the remotes are read from the home's remotes.json
(no Conan process) and set with Conan only when they are not the repository's index alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eliza.adapters import conan, proc


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    """Every Conan command prepare_conan_home runs, answered as an empty home would."""
    seen: list[tuple[str, ...]] = []

    def fake(cache: Path, *args: str, **_: object) -> proc.Completed:
        seen.append(args)
        return proc.Completed(argv=("conan", *args), returncode=0, stdout="[]", stderr="")

    monkeypatch.setattr(conan, "_conan", fake)
    return seen


def home_with(tmp_path: Path, remotes_json: str | None) -> Path:
    home = conan.conan_home(tmp_path / "cache")
    (home / "profiles").mkdir(parents=True)
    (home / "profiles" / "default").write_text("[settings]\n")
    if remotes_json is not None:
        (home / "remotes.json").write_text(remotes_json)
    return tmp_path / "cache"


def index_remote(repo: Path, **extra: object) -> dict[str, object]:
    return {
        "name": conan.INDEX_REMOTE,
        "url": str(repo / "conan" / "index"),
        "verify_ssl": True,
        "remote_type": "local-recipes-index",
        **extra,
    }


def remotes(*entries: dict[str, object]) -> str:
    return json.dumps({"remotes": list(entries)})


REPO = Path("/work/repo")  # where the checkout is: only its path matters here


def test_a_home_whose_remotes_json_names_the_index_alone_starts_no_conan(
    tmp_path: Path, calls: list[tuple[str, ...]]
) -> None:
    cache = home_with(tmp_path, remotes(index_remote(REPO)))
    conan.prepare_conan_home(cache, REPO, {"eliza-linux-cpu": "[settings]\nos=Linux\n"})
    assert calls == []
    assert (conan.conan_home(cache) / "profiles" / "eliza-linux-cpu").read_text() == "[settings]\nos=Linux\n"


@pytest.mark.parametrize(
    "remotes_json",
    [
        pytest.param(None, id="a new home"),
        pytest.param("{broken", id="broken"),
        pytest.param(remotes(), id="no remote"),
        pytest.param(
            remotes({"name": "conancenter", "url": "https://center2.example", "verify_ssl": True}),
            id="conancenter",
        ),
        pytest.param(remotes(index_remote(Path("/elsewhere"))), id="another checkout's index"),
        pytest.param(remotes(index_remote(REPO, disabled=True)), id="the index, disabled"),
        pytest.param(remotes(index_remote(REPO, remote_type="")), id="the index as another type"),
        pytest.param(
            remotes(index_remote(REPO), {"name": "x", "url": "https://x.example", "verify_ssl": True}),
            id="the index and another",
        ),
    ],
)
def test_any_other_remotes_are_set_through_conan(
    tmp_path: Path, calls: list[tuple[str, ...]], remotes_json: str | None
) -> None:
    conan.prepare_conan_home(home_with(tmp_path, remotes_json), REPO, {})
    assert calls[0] == ("remote", "list", "--format", "json")
    assert calls[-1][:4] == ("remote", "add", conan.INDEX_REMOTE, str(REPO / "conan" / "index"))


def test_conan_is_this_interpreters_and_the_probe_says_its_version_without_starting_it() -> None:
    import subprocess
    import sys

    from eliza.adapters.host_probe import probe_host

    assert conan.conan_argv(["conan", "build", "."]) == [sys.executable, "-m", "conans.conan", "build", "."]
    with pytest.raises(conan.BuildError, match="not a Conan command: cmake --build"):
        conan.conan_argv(["cmake", "--build"])
    probed = probe_host({"PATH": ""}).conan  # no conan on PATH at all: still this one
    assert probed is not None and probed.path == f"{sys.executable} -m conans.conan"
    said = subprocess.run(
        [*conan.conan_program(), "--version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert probed.version and said.split()[-1] == probed.version


def test_the_llama_builds_of_a_conan_home_are_its_build_folders(tmp_path: Path) -> None:
    from eliza.adapters.conan import conan_home, llama_build_folders

    assert llama_build_folders(tmp_path) == 0  # no Conan home yet
    builds = conan_home(tmp_path) / "p" / "b"
    for name in ("llama1a2b3c", "llama9f8e7d", "zlib0a1b2c"):
        (builds / name).mkdir(parents=True)
    (conan_home(tmp_path) / "p" / "llama5d6e7f").mkdir()  # a downloaded package: no build folder
    assert llama_build_folders(tmp_path) == 2
