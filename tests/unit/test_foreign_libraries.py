"""A library this process cannot load never reaches ctypes unless the planner says the
host runs its platform natively, and one that fails to load anyway ends in one line that
names it: the verify sample, `nox -s generate`, the binding. No compiler is needed: the
libraries here are files that only look like libraries."""

from __future__ import annotations

import platform
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from eliza.adapters.ffi import Library, LibraryLoadError
from eliza.app import verification
from eliza.app.context import Context
from eliza.app.project import current, host_facts, load_project_matrix
from eliza.core.cell_id import CellId
from eliza.core.lab import Device, DeviceState, Transport
from eliza.core.matrix import Cell

ARM64 = CellId.parse("linux-arm64.none")
CPU = CellId.parse("linux-cpu.none")


def elf_header(machine: int) -> bytes:
    """A 64-bit little-endian ELF shared object header for `machine`, with nothing after it."""
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    return ident + struct.pack("<HHI", 3, machine, 1) + bytes(64 - 20)


class NothingKept:
    """A builder with no library of any cell (nothing built, nothing in an artifact)."""

    def locate(self, cell: Cell) -> Path:
        raise OSError(f"{cell.id} not built")


def context(lines: list[str], *, qemu: bool, lab_down: bool) -> Context:
    host = host_facts()
    if not qemu:  # a host that can cross-build linux-arm64 but has no emulator to run it
        host = replace(host, programs={k: v for k, v in host.programs.items() if not k.startswith("qemu")})
    devices = {}
    if lab_down:
        device = Device(name="pi", platform="linux-arm64", transport=Transport.SSH, address="pi@10.0.0.9")
        devices["linux-arm64"] = DeviceState(device=device, reachable=False, error="connection refused")
    return Context(
        project=current(), matrix=load_project_matrix(), host=host, log=lines.append, devices=devices
    )


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the foreign platform here is aarch64 on x86-64")
@pytest.mark.parametrize(("qemu", "lab_down"), [(True, False), (False, False), (True, True)])
def test_a_foreign_only_cell_gets_no_sample_and_one_line(tmp_path: Path, qemu: bool, lab_down: bool) -> None:
    foreign = tmp_path / "libelizainference.so"
    foreign.write_bytes(elf_header(183))  # aarch64
    lines: list[str] = []
    ctx = context(lines, qemu=qemu, lab_down=lab_down)
    assert not ctx.capability(ctx.matrix.platform("linux-arm64")).loads_in_process
    verification._generate_sample(ctx, NothingKept(), {ARM64: foreign}, tmp_path, "tiny")  # type: ignore[arg-type]
    (line,) = lines
    assert line.startswith("generated through the C ABI: nothing: no reference cell this host runs natively")


def test_a_library_that_does_not_load_is_one_line_naming_it(tmp_path: Path) -> None:
    broken = tmp_path / "libelizainference.so"
    broken.write_text("not a library, only text renamed .so\n" * 8)
    lines: list[str] = []
    ctx = context(lines, qemu=True, lab_down=False)
    verification._generate_sample(ctx, NothingKept(), {CPU: broken}, tmp_path, "tiny")  # type: ignore[arg-type]
    (line,) = lines
    assert line.startswith(
        f"generated through the C ABI: nothing: {broken}: cannot be loaded into this process"
    )
    assert "\n" not in line


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not a library, only text renamed .so\n" * 8, "invalid ELF header"),
        (elf_header(183 if platform.machine() != "aarch64" else 62), "code and this process is"),
        (None, "No such file"),
    ],
)
def test_the_binding_names_the_file_and_the_reason(tmp_path: Path, content: bytes | None, why: str) -> None:
    path = tmp_path / "libelizainference.so"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(LibraryLoadError) as caught:
        Library(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: cannot be loaded into this process: ") and why in message, message
    assert "\n" not in message


def test_a_shared_library_that_is_not_ours_is_refused_by_name() -> None:
    candidates = sorted(Path("/lib").glob("*/libm.so.6")) + sorted(Path("/usr/lib").glob("*/libm.so.6"))
    if not candidates:
        pytest.skip("no libm.so.6 under /lib or /usr/lib")
    with pytest.raises(LibraryLoadError, match="not a libelizainference of this binding: it lacks eliza_"):
        Library(candidates[0])
