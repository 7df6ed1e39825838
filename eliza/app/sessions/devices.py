"""`nox -s devices`: the lab file's devices, each probed: reachable (with its identity) or
why not, its platform, what it provides, and the cells whose run-time checks it would run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from eliza.app.context import Context
from eliza.app.errors import NotHere, UsageError
from eliza.app.options import Parser, strict_requested
from eliza.app.services import lab as lab_service
from eliza.core.host import on_device
from eliza.core.lab import DeviceState, Lab
from eliza.core.matrix import Matrix


@dataclass(frozen=True, kw_only=True)
class DevicesOptions:
    lab: Lab
    strict: bool = False


def parse_options(argv: Sequence[str], env: Mapping[str, str], matrix: Matrix) -> DevicesOptions:
    p = Parser("nox -s devices --", skippable=True)
    lab_service.add_option(p)
    args = p.parse_args(list(argv))
    lab = lab_service.lab_from(args.devices, env, matrix)
    if lab is None:
        raise UsageError(
            f"nox -s devices: no lab file: pass --devices PATH or set {lab_service.VARIABLE} "
            "(see docs/devices.md)"
        )
    return DevicesOptions(lab=lab, strict=strict_requested(argv, env))


def describe(state: DeviceState, matrix: Matrix, ctx: Context) -> list[str]:
    device = state.device
    platform = matrix.platform(device.platform)
    can = on_device(ctx.capability(platform), platform, state)
    cells = [c.id for c in matrix.cells_of(platform.id) if any(k.needs_run for k in c.checks)]
    lines = [f"{device.name}: {device.transport.value} {device.address} (lab line {device.line})"]
    if state.reachable:
        lines.append(f"  reachable: {state.identity.get('uname', '')}")
        lines += [f"  {k}: {v}" for k, v in state.identity.items() if k != "uname"]
    else:
        lines.append(f"  unreachable: {state.error}")
    lines.append(
        f"  platform: {platform.id} (run_requires: {', '.join(r.value for r in platform.run_requires)})"
    )
    lines.append(f"  provides: {', '.join(r.value for r in device.provides) or 'nothing declared'}")
    if device.command_prefix:
        lines.append(f"  command prefix: {' '.join(device.command_prefix)}")
    if can.can_run:
        lines.append(f"  would run the run-time checks of: {', '.join(cells) or 'no cell'}")
    else:
        lines.append(f"  runs nothing now: {can.run_reason}")
    return lines


def run(options: DevicesOptions, ctx: Context) -> str:
    states = [lab_service.probe(device) for device in options.lab.devices]
    lines = [f"lab {options.lab.source}: {len(states)} device(s)"]
    for state in states:
        lines += describe(state, ctx.matrix, ctx)
    print("\n".join(lines))
    down = [s for s in states if not s.reachable]
    if options.strict and down:
        raise NotHere("; ".join(s.describe() for s in down))
    return "\n".join(lines)
