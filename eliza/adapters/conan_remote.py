"""The shared binary cache on a Conan remote: fetch the exact llama.cpp binary a cell's
build needs before it runs, upload the one a build made.

The remote is added to the project's Conan home only for the duration of one download or
upload, then removed: builds resolve recipes from the local recipe index alone, so a
recipe on the remote can never stand in for the project's own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters import proc
from eliza.adapters.conan import BuildError, LlamaSource, conan_argv, conan_env, conan_program
from eliza.core.binary_remote import REMOTE_NAME, BinaryRemote
from eliza.core.build_plan import LLAMA_PACKAGE, CellBuildPlan


@dataclass(frozen=True, kw_only=True)
class LlamaBinary:
    ref: str  # llama-cpp/<version>#<recipe revision>
    package_id: str
    binary: str  # Conan's status before a build: Cache, Missing, Build, Download, ...

    @property
    def pattern(self) -> str:
        return f"{self.ref}:{self.package_id}"


def _conan(
    cache: Path, remote: BinaryRemote, *args: str, env: dict[str, str] | None = None
) -> proc.Completed:
    return proc.run([*conan_program(), *args], env=conan_env(cache, {**remote.login_env(), **(env or {})}))


@contextmanager
def _remote_added(cache: Path, remote: BinaryRemote) -> Iterator[None]:
    added = _conan(cache, remote, "remote", "add", REMOTE_NAME, remote.url, "--force")
    if not added.ok:
        raise BuildError(f"conan remote add {REMOTE_NAME} {remote.url} failed: {added.stderr.strip()[-800:]}")
    try:
        yield
    finally:
        _conan(cache, remote, "remote", "remove", REMOTE_NAME)


def llama_binary(plan: CellBuildPlan, source: LlamaSource, cache: Path) -> LlamaBinary:
    """What the cell's build would use of llama.cpp: `conan graph info` with the build's
    own arguments (recipes from the local index)."""
    argv = list(plan.argv)
    assert argv[:2] == ["conan", "build"], argv
    for flag in ("--output-folder", "--build"):  # no build: the status says Missing, not Build
        at = argv.index(flag)
        del argv[at : at + 2]
    info = ["conan", "graph", "info", *argv[2:]]
    done = proc.run(conan_argv(info), env=conan_env(cache, {**source.env, **plan.env}))
    if not done.ok:
        raise BuildError(
            f"{plan.cell_id}: conan graph info failed ({done.returncode}): {done.stderr[-2000:]}"
        )
    nodes = json.loads(done.stdout)["graph"]["nodes"].values()
    node = next(n for n in nodes if str(n.get("ref", "")).startswith(LLAMA_PACKAGE + "/"))
    return LlamaBinary(
        ref=str(node["ref"]), package_id=str(node["package_id"]), binary=str(node.get("binary"))
    )


def fetch_llama(plan: CellBuildPlan, source: LlamaSource, cache: Path, remote: BinaryRemote) -> str:
    """Downloads the llama.cpp binary the cell needs when the Conan cache lacks it and the
    remote has it; says what happened, in a few words."""
    wanted = llama_binary(plan, source, cache)
    if wanted.binary not in ("Missing", "Build"):
        return f"llama.cpp {wanted.package_id[:12]} already in the Conan cache"
    with _remote_added(cache, remote):
        done = _conan(cache, remote, "download", wanted.pattern, "--remote", REMOTE_NAME, "--format", "json")
    if done.ok:
        return f"llama.cpp {wanted.package_id[:12]} downloaded from {remote.url}"
    if "not found" in done.stderr.lower() or "unable to find" in done.stderr.lower():
        return f"llama.cpp {wanted.package_id[:12]} is not on {remote.url} yet: it is built here"
    raise BuildError(
        f"conan download {wanted.pattern} from {remote.url} failed: {done.stderr.strip()[-1500:]}"
    )


def upload_llama(binary: LlamaBinary, cache: Path, remote: BinaryRemote) -> str:
    """Uploads the recipe revision and the one binary (a no-op for what the remote has)."""
    with _remote_added(cache, remote):
        done = _conan(cache, remote, "upload", binary.pattern, "--remote", REMOTE_NAME, "--confirm")
    if not done.ok:
        raise BuildError(
            f"conan upload {binary.pattern} to {remote.url} failed: {done.stderr.strip()[-1500:]}"
        )
    return f"llama.cpp {binary.package_id[:12]} uploaded to {remote.url}"


def built_llama(output_dir: Path) -> LlamaBinary:
    """The llama.cpp binary a finished cell build used (from its conan-graph.json)."""
    graph = json.loads((output_dir / "conan-graph.json").read_text())
    node = next(
        n for n in graph["graph"]["nodes"].values() if str(n.get("ref", "")).startswith(LLAMA_PACKAGE + "/")
    )
    return LlamaBinary(
        ref=str(node["ref"]), package_id=str(node["package_id"]), binary=str(node.get("binary"))
    )
