"""What every session runs in, built once per nox invocation (or CLI call): the project,
the matrix, this host's facts and the log. Sessions take it as a value; nothing below them
reads the environment or writes it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from eliza.app import project as project_module
from eliza.app.project import Project
from eliza.core.host import Capability, HostFacts, decide
from eliza.core.lab import DeviceState
from eliza.core.matrix import Matrix, Platform

Log = Callable[[str], None]


@dataclass(frozen=True, kw_only=True)
class Context:
    project: Project
    matrix: Matrix
    host: HostFacts
    log: Log
    # Added to the environment of the processes a session starts (the suites verify runs):
    # a CI check job says there that cells come from its artifact.
    child_env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # platform id -> the lab device that runs its checks, as probed (eliza.app.services.lab)
    devices: Mapping[str, DeviceState] = field(default_factory=lambda: MappingProxyType({}))

    def capability(self, platform: Platform) -> Capability:
        return decide(self.host, platform, self.devices.get(platform.id))

    def capabilities(self) -> dict[str, Capability]:
        return {p.id: self.capability(p) for p in self.matrix.platforms}

    @property
    def strict_env(self) -> bool:
        return self.project.env.get("ELIZA_STRICT", "").strip().lower() in {"1", "true", "yes", "on"}


def current_context(log: Log, matrix: Matrix | None = None) -> Context:
    """This process's context: the project and host facts are read once (cached)."""
    return Context(
        project=project_module.current(),
        matrix=matrix if matrix is not None else project_module.load_project_matrix(),
        host=project_module.host_facts(),
        log=log,
    )
