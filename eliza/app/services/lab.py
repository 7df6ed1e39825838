"""The device lab of a session: the lab file named by --devices or ELIZA_DEVICES, loaded
and validated before anything runs, its devices probed once, and the targets that run a
platform's checks on its device."""

from __future__ import annotations

import hashlib
import platform as host_platform
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

from eliza.adapters.devices import DeviceTarget
from eliza.adapters.devices import probe as probe
from eliza.adapters.targets import Target
from eliza.app.context import Context
from eliza.app.errors import NotHere, UsageError
from eliza.app.options import Parser
from eliza.core.lab import DeviceState, Lab
from eliza.core.matrix import Matrix
from eliza.formats.lab_yaml import LabError, load_lab

VARIABLE = "ELIZA_DEVICES"


def add_option(parser: Parser) -> None:
    parser.add_argument(
        "--devices",
        metavar="PATH",
        type=Path,
        default=None,
        help=f"a lab file: these devices run their platforms' checks (default: ${VARIABLE}, else none)",
    )


def lab_from(
    value: Path | None, env: Mapping[str, str], matrix: Matrix, cwd: Path | None = None
) -> Lab | None:
    """The lab --devices (else ELIZA_DEVICES) names, validated against the matrix; a mistake
    is a UsageError naming file, line and key."""
    path = value if value is not None else (Path(env[VARIABLE]) if env.get(VARIABLE, "").strip() else None)
    if path is None:
        return None
    if not path.is_file():
        said = "--devices" if value is not None else VARIABLE
        raise UsageError(f"{said} {path}: no such lab file (see docs/devices.md)")
    try:
        return load_lab(path, matrix)
    except LabError as exc:
        raise UsageError(str(exc)) from None


def probe_lab(lab: Lab, log: Callable[[str], None] | None = None) -> dict[str, DeviceState]:
    """platform id -> its device (the first the lab declares for it), probed."""
    states: dict[str, DeviceState] = {}
    for device in lab.devices:
        if device.platform in states:
            continue
        state = probe(device)
        states[device.platform] = state
        if log is not None:
            log(f"{device.platform}: {state.describe()}")
    return states


def with_lab(ctx: Context, lab: Lab | None, *, strict: bool = False) -> Context:
    """The context whose capabilities take the lab's devices into account; under --strict an
    unreachable declared device is NotHere (exit 3)."""
    if lab is None:
        return ctx
    states = probe_lab(lab, ctx.log)
    down = [s for s in states.values() if not s.reachable]
    if strict and down:
        raise NotHere("; ".join(s.describe() for s in down))
    return replace(ctx, devices=states)


def run_key(repo: Path) -> str:
    """One run directory per checkout and host on a device: a run replaces its own, never another's."""
    return hashlib.sha256(f"{host_platform.node()}:{repo.resolve()}".encode()).hexdigest()[:16]


def device_targets(ctx: Context) -> dict[str, Callable[[], Target]]:
    """platform id -> how to open a target on its reachable device."""
    key = run_key(ctx.project.repo)

    def opener(state: DeviceState) -> Callable[[], Target]:
        return lambda: DeviceTarget(state, key)

    return {pid: opener(state) for pid, state in ctx.devices.items() if state.reachable}


def device_facts(ctx: Context) -> dict[str, dict[str, str]]:
    """platform id -> the identity facts its evidence records carry."""
    return {pid: state.details() for pid, state in ctx.devices.items() if state.reachable}
