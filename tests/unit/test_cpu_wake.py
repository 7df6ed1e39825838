"""The idle CPUs kept awake through a wall-time window: the PM QoS request is written as a
0 µs native integer and held exactly as long as the block (the kernel drops it when the
file closes); where the device cannot be opened, the block runs all the same and says why.
A regular file stands in for /dev/cpu_dma_latency, which only root may write."""

from __future__ import annotations

import contextlib
import os
import struct
from pathlib import Path

from eliza.adapters.cpu_wake import cpus_kept_awake


def opened(path: Path) -> int:
    """How many of this process's file descriptors are open on `path`."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            count += os.readlink(f"/proc/self/fd/{fd}") == str(path)
    return count


def test_the_request_is_zero_and_held_only_within_the_block(tmp_path: Path) -> None:
    device = tmp_path / "cpu_dma_latency"
    device.write_bytes(b"")
    with cpus_kept_awake(device) as held:
        assert held == "kept awake"
        assert device.read_bytes() == struct.pack("=i", 0)
        assert opened(device) == 1
    assert opened(device) == 0


def test_a_device_it_cannot_open_leaves_the_block_running_and_says_why(tmp_path: Path) -> None:
    ran = False
    with cpus_kept_awake(tmp_path / "absent") as held:
        ran = True
    assert ran and held.startswith("not kept awake (") and "absent" in held and "No such file" in held
