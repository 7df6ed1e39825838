"""The project as the sessions see it: the repository, the environment, the matrix and the
facts of this host, each read once, when first asked for, never at import.

This module is the one place the process environment is read; everything below the use
cases takes the values it needs as arguments.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from eliza.core import layout
from eliza.core.host import Capability, HostFacts, decide
from eliza.core.matrix import Matrix, Platform


@dataclass(frozen=True, kw_only=True)
class Project:
    repo: Path
    env: Mapping[str, str]
    cache: Path  # ELIZA_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache, /eliza-inference
    matrix_path: Path  # ELIZA_MATRIX, else matrix.yaml of the repository

    @classmethod
    def from_environment(cls, env: Mapping[str, str], repo: Path = layout.REPO_ROOT) -> Project:
        frozen = MappingProxyType(dict(env))
        return cls(
            repo=repo,
            env=frozen,
            cache=layout.cache_dir(frozen, Path.home(), repo),
            matrix_path=_matrix_path(env, repo),
        )

    @property
    def build_root(self) -> Path:
        return layout.build_root(self.repo)

    @property
    def evidence_dir(self) -> Path:
        return layout.evidence_dir(self.repo)

    @property
    def report_dir(self) -> Path:
        return layout.report_dir(self.repo)

    @property
    def imported_evidence_dir(self) -> Path:
        return layout.imported_evidence_dir(self.repo)

    def default_evidence_dirs(self) -> list[Path]:
        """What a report reads unless told otherwise: this checkout's evidence, and the
        imported evidence when there is any."""
        imported = self.imported_evidence_dir
        return [self.evidence_dir, *([imported] if imported.is_dir() else [])]


def _matrix_path(env: Mapping[str, str], repo: Path) -> Path:
    """ELIZA_MATRIX, relative to where the command was typed (nox changes into the
    repository, but PWD keeps the shell's directory), else the repository's matrix.yaml."""
    given = env.get("ELIZA_MATRIX")
    if not given:
        return repo / "matrix.yaml"
    return Path(env.get("PWD") or Path.cwd()) / given


@functools.cache
def current() -> Project:
    """This process's project, from os.environ at the first call."""
    project = Project.from_environment(os.environ)
    if os.environ.get("ELIZA_CACHE_DIR"):
        # A relative ELIZA_CACHE_DIR names a folder of this checkout: the programs this
        # process starts (in other folders, and not all of them Python) get its full path.
        os.environ["ELIZA_CACHE_DIR"] = str(project.cache)
    return project


@functools.cache
def load_project_matrix(path: Path | None = None) -> Matrix:
    """The matrix file of the project (ELIZA_MATRIX or matrix.yaml), validated; MatrixError
    names the file, line and key of every problem."""
    from eliza.formats.matrix_yaml import load_matrix

    project = current()
    return load_matrix(path or project.matrix_path, memo=project.cache / "matrix-schema-valid.json")


@functools.cache
def host_facts() -> HostFacts:
    from eliza.adapters.host_probe import probe_host
    from eliza.adapters.tool_versions import ToolVersions
    from eliza.core.target import probe_targets

    # The cross compilers and emulators the matrix names are looked for too.
    programs, dirs = probe_targets(load_project_matrix())
    project = current()
    versions = ToolVersions(layout.tool_versions_path(project.cache))
    return probe_host(project.env, programs, dirs, versions=versions)


def capability(platform: Platform) -> Capability:
    return decide(host_facts(), platform)
