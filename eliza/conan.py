"""Conan adapter: the project's own Conan home, its local recipe index, host profiles,
and running a cell's build plan.

The Conan home lives in the user cache (eliza.paths.cache_dir()/conan2), so llama.cpp
packages survive fresh clones. Its only remote is the recipe index inside this repo:
nothing reaches for ConanCenter.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from eliza.build import LLAMA_PACKAGE, CellBuildPlan
from eliza.matrix.model import Platform
from eliza.paths import REPO_ROOT, cache_dir
from eliza.sources import PINNED_VERSION, RECIPE_DIR, ensure_sdist

INDEX_REMOTE = "eliza-index"


class BuildError(RuntimeError):
    pass


def conan_home() -> Path:
    return cache_dir() / "conan2"


def conan_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["CONAN_HOME"] = str(conan_home())
    env.update(extra or {})
    return env


def _conan(
    *args: str, env: Mapping[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["conan", *args], env=conan_env(env), capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise BuildError(f"conan {' '.join(args)} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result


def _profile_text(os_family: str) -> str:
    return (
        "\n".join(
            [
                "# Written by eliza.conan.prepare_conan_home; host settings from `conan profile detect`.",
                "include(default)",
                "[settings]",
                "build_type=Release",
                "compiler.cppstd=17",
                "[conf]",
                "tools.cmake.cmaketoolchain:generator=Ninja",
                f"tools.build:jobs={os.cpu_count() or 2}",
                "",
            ]
        )
        if os_family == "linux"
        else ""
    )


def prepare_conan_home(repo: Path = REPO_ROOT) -> Path:
    """Idempotent: remotes = the repo's recipe index only; a detected default profile;
    one eliza-<os> profile per buildable OS family (here: linux)."""
    home = conan_home()
    (home / "profiles").mkdir(parents=True, exist_ok=True)
    remotes = json.loads(_conan("remote", "list", "--format", "json").stdout or "[]")
    index = str(repo / "conan" / "index")
    if [(r["name"], r["url"]) for r in remotes] != [(INDEX_REMOTE, index)]:
        for r in remotes:
            _conan("remote", "remove", r["name"])
        _conan("remote", "add", INDEX_REMOTE, index, "--type", "local-recipes-index")
    if not (home / "profiles" / "default").is_file():
        _conan("profile", "detect", "--name", "default")
    profile = home / "profiles" / "eliza-linux"
    text = _profile_text("linux")
    if not profile.is_file() or profile.read_text() != text:
        profile.write_text(text)
    return home


def fork_version(tree: Path) -> str:
    """Content hash of a local llama.cpp checkout's build inputs, as a recipe version."""
    digest = hashlib.sha256()
    roots = [
        tree / "CMakeLists.txt",
        tree / "include",
        tree / "src",
        tree / "ggml",
        tree / "cmake",
        tree / "vendor",
    ]
    for root in roots:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            digest.update(str(f.relative_to(tree)).encode() + b"\0" + f.read_bytes() + b"\0")
    return f"fork.{digest.hexdigest()[:16]}"


def llama_source_version(env: Mapping[str, str] | None = None) -> str:
    """The llama.cpp recipe version a build would use, without exporting anything."""
    env = os.environ if env is None else env
    checkout = env.get("ELIZA_LLAMA_CPP_DIR")
    if checkout and (Path(checkout) / "include" / "llama.h").is_file():
        return fork_version(Path(checkout).resolve())
    return PINNED_VERSION


@dataclass(frozen=True, kw_only=True)
class LlamaSource:
    version: str
    env: Mapping[str, str]


def resolve_llama_source(env: Mapping[str, str] | None = None) -> LlamaSource:
    """The pinned sdist, or a local checkout named by ELIZA_LLAMA_CPP_DIR (exported as a
    fork.<hash> version of the same recipe, so the cache tells them apart)."""
    env = os.environ if env is None else env
    checkout = env.get("ELIZA_LLAMA_CPP_DIR")
    if checkout:
        tree = Path(checkout).resolve()
        if not (tree / "include" / "llama.h").is_file():
            raise BuildError(
                f"ELIZA_LLAMA_CPP_DIR={checkout!r} is not a llama.cpp checkout (no include/llama.h)"
            )
        version = fork_version(tree)
        source_env = {"ELIZA_LLAMA_CPP_DIR": str(tree)}
        _conan("export", str(RECIPE_DIR), "--version", version, env=source_env)
        return LlamaSource(version=version, env=source_env)
    return LlamaSource(version=PINNED_VERSION, env={"ELIZA_LLAMA_SDIST": str(ensure_sdist())})


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    cell_id: str
    library: Path
    llama_binary: str  # "Build" (built now) or "Cache" (reused)
    llama_package_folder: Path
    llama_package_id: str
    seconds: float
    log: Path


def run_build(plan: CellBuildPlan, source: LlamaSource, *, echo: bool = True) -> BuildResult:
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    log = plan.output_dir / "conan-build.log"
    graph_file = plan.output_dir / "conan-graph.json"
    started = time.monotonic()
    with log.open("w") as log_f, graph_file.open("w") as graph_f:
        proc = subprocess.Popen(
            plan.argv,
            env=conan_env({**source.env, **plan.env}),
            stdout=graph_f,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        for line in proc.stderr:
            log_f.write(line)
            if echo:
                sys.stderr.write(line)
        rc = proc.wait()
    seconds = time.monotonic() - started
    if rc != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-40:])
        raise BuildError(f"{plan.cell_id}: conan build failed ({rc}); log: {log}\n{tail}")
    graph = json.loads(graph_file.read_text())
    llama = next(
        n for n in graph["graph"]["nodes"].values() if str(n.get("ref", "")).startswith(LLAMA_PACKAGE + "/")
    )
    if not plan.library.is_file():
        raise BuildError(f"{plan.cell_id}: build finished but {plan.library} is missing; log: {log}")
    return BuildResult(
        cell_id=plan.cell_id,
        library=plan.library,
        llama_binary=str(llama.get("binary")),
        llama_package_folder=Path(llama["package_folder"]),
        llama_package_id=str(llama.get("package_id")),
        seconds=seconds,
        log=log,
    )


def package_cached(platform: Platform) -> bool:
    """Whether the Conan cache already holds llama.cpp built with this platform's options."""
    from eliza.build import llama_option_args

    if not conan_home().is_dir():
        return False
    args = ["list", f"{LLAMA_PACKAGE}/{llama_source_version()}:*", "--format", "json"]
    result = _conan(*args, check=False)
    if result.returncode != 0:
        return False
    wanted = dict(a.split(":", 1)[1].split("=", 1) for a in llama_option_args(platform) if a != "-o")
    for ref in json.loads(result.stdout).get("Local Cache", {}).values():
        for rev in ref.get("revisions", {}).values():
            for pkg in rev.get("packages", {}).values():
                options = pkg.get("info", {}).get("options", {})
                if all(options.get(k) == v for k, v in wanted.items()):
                    return True
    return False
