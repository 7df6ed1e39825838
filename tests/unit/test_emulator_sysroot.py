"""The emulator's sysroot overlay: qemu-user looks a path up under its -L prefix first, so
an arm64 program that reads /proc/cpuinfo finds an arm64 one instead of the host's."""

from __future__ import annotations

from pathlib import Path

from eliza.adapters.targets import arm64_cpuinfo, sysroot_overlay, with_sysroot_overlay
from eliza.core.target import TargetRunner


def test_the_overlay_links_the_sysroot_and_holds_an_arm64_cpuinfo(tmp_path: Path) -> None:
    sysroot = tmp_path / "aarch64-linux-gnu"
    (sysroot / "lib").mkdir(parents=True)
    (sysroot / "lib" / "libc.so.6").write_text("libc")
    out = sysroot_overlay(sysroot, tmp_path / "overlays")
    assert (out / "lib").is_symlink() and (out / "lib" / "libc.so.6").read_text() == "libc"
    cpuinfo = (out / "proc" / "cpuinfo").read_text()
    assert "CPU implementer\t: 0x41" in cpuinfo and "asimddp" in cpuinfo and "GenuineIntel" not in cpuinfo
    assert sysroot_overlay(sysroot, tmp_path / "overlays") == out  # made once
    assert [p.name for p in (tmp_path / "overlays").iterdir()] == [out.name]  # no temporaries left


def test_only_qemu_aarch64_with_a_sysroot_gets_the_overlay(tmp_path: Path) -> None:
    sysroot = tmp_path / "sysroot"
    sysroot.mkdir()
    qemu = TargetRunner(prefix=("qemu-aarch64", "-L", str(sysroot)), words="emulated: qemu")
    swapped = with_sysroot_overlay(qemu, tmp_path / "o")
    assert swapped.prefix[:2] == ("qemu-aarch64", "-L") and swapped.prefix[2] != str(sysroot)
    assert (Path(swapped.prefix[2]) / "proc" / "cpuinfo").is_file() and swapped.words == qemu.words
    with_cpu = TargetRunner(prefix=("qemu-aarch64", "-cpu", "neoverse-n1", "-L", str(sysroot)))
    # the CPU model before -L: the sysroot still becomes the same overlay
    assert with_sysroot_overlay(with_cpu, tmp_path / "o").prefix == (
        "qemu-aarch64",
        "-cpu",
        "neoverse-n1",
        "-L",
        swapped.prefix[2],
    )
    native = TargetRunner()
    assert with_sysroot_overlay(native, tmp_path / "o") is native
    other = TargetRunner(prefix=("qemu-riscv64", "-L", str(sysroot)))
    assert with_sysroot_overlay(other, tmp_path / "o") is other


def test_cpuinfo_lists_one_processor_per_host_cpu() -> None:
    text = arm64_cpuinfo(3)
    assert [line for line in text.splitlines() if line.startswith("processor")] == [
        "processor\t: 0",
        "processor\t: 1",
        "processor\t: 2",
    ]
