"""The timing table: a phase that ran side by side shows its steps' sum, how many ran at
once and how busy the cores were on average; the checks' alone windows are listed, the
longest first."""

from __future__ import annotations

from eliza.core.timings import Timings


def test_the_checks_line_gives_the_busy_ratio_and_the_longest_alone_windows() -> None:
    t = Timings()
    t.add("checks", "perf", 300.0)
    t.add("checks", "byte-identity", 150.0)
    t.wall("checks", 300.0, 2, 540.0)  # 450 s of steps in 300 s on 2 cores, 540 s of CPU
    t.alone("perf (gemma3-270m) linux-cpu.mlx", 130.0)
    t.alone("perf linux-cpu.none", 20.0)
    t.alone("backend-perf (gemma3-270m) linux-cpu.litert", 45.0)
    t.alone("byte-identity linux-cpu.none", 5.0)
    lines = t.lines(400.0)
    checks = next(line for line in lines if line.strip().startswith("checks"))
    assert "[steps summed 7m30s, 2 at once, 1.50 busy; CPU 9m00s, 1.80 cores]" in checks
    alone = lines[lines.index(checks) + 1]
    assert alone.strip() == (
        "[alone: 4 windows, 3m20s; longest perf (gemma3-270m) linux-cpu.mlx 2m10s, "
        "backend-perf (gemma3-270m) linux-cpu.litert 45s, perf linux-cpu.none 20s]"
    )


def test_the_windows_line_says_what_they_held_of_the_idle_cpus() -> None:
    t = Timings()
    t.add("checks", "perf", 60.0)
    t.wall("checks", 60.0, 2)
    t.alone("perf linux-cpu.none", 20.0)
    t.alone_cpus = "not kept awake (/dev/cpu_dma_latency: Permission denied)"
    assert t.alone_line() == (
        "[alone: 1 windows, 20s, idle CPUs not kept awake (/dev/cpu_dma_latency: Permission denied); "
        "longest perf linux-cpu.none 20s]"
    )


def test_a_phase_that_ran_alone_has_no_ratio_and_no_windows_line() -> None:
    t = Timings()
    t.add("checks", "perf", 60.0)
    lines = t.lines(60.0)
    assert not any("busy" in line or "alone:" in line for line in lines)


def test_the_cpu_a_phase_took_is_counted_from_this_process_and_the_tools_it_ran() -> None:
    """A child process's CPU time reaches the watch once it has been waited for."""
    import subprocess
    import sys

    from eliza.app.services.clock import Stopwatch

    watch = Stopwatch()
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    assert watch.cpu_seconds() >= 0.3
