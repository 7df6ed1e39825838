"""Idle CPUs kept awake while a wall-time window measures: a PM QoS request of 0 µs on
/dev/cpu_dma_latency, held for as long as the file stays open (the kernel drops it when the
file is closed, or the process dies). The cpuidle governor then keeps an idle CPU in its
polling state instead of halting it.

Why: a runtime that hands work between threads (MLX's CPU build gives each evaluation to a
stream thread; LiteRT-LM runs two threads a side) pays a CPU's wake-up at each handoff, and
on a virtual machine a halted vCPU is woken by the hypervisor. Measured on a 2-core VM: an
MLX evaluation's round trip took 47 µs with the CPUs halting and 8 µs with them polling;
LiteRT-LM's first token on the tiny bundle 0.65-0.71 ms against 0.55-0.59 ms, while
llama.cpp's single decode thread read the same either way. The hypervisor's wake-up is the
host's cost, not the runtime's, and a window should not measure it. (It is not what makes
MLX decode the tiny bundle at half its speed through spells on such a VM: those came with
the CPUs kept awake too; docs/perf.md.) Without the file (not Linux) or the right to write
it (not root), nothing is held and the window measures as before."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

DMA_LATENCY = Path("/dev/cpu_dma_latency")


@contextmanager
def cpus_kept_awake(device: Path = DMA_LATENCY) -> Iterator[str]:
    """Within the block, idle CPUs poll where this process may ask it. Yields what holds, in
    words: "kept awake", or "not kept awake (<device>: <the system's error>)"."""
    try:
        fd = os.open(device, os.O_WRONLY)
    except OSError as exc:
        yield f"not kept awake ({device}: {exc.strerror or exc})"
        return
    try:
        try:
            os.write(fd, struct.pack("=i", 0))  # the request: 0 µs, a native 32-bit integer
        except OSError as exc:
            yield f"not kept awake ({device}: {exc.strerror or exc})"
            return
        yield "kept awake"
    finally:
        os.close(fd)
