"""Where a session's time went, in a few lines (like `cargo build --timings`, in text):
builds (llama.cpp per platform, the library), checks by kind, the report, and the rest.

Pure: the caller adds each measured span with its phase and label; `lines` renders them,
longest first within a phase, and what no span covers as "other". A phase whose spans ran
side by side also has its own wall time, which its line shows beside the spans' sum and
their ratio (how many steps ran at once on average), and the CPU time its processes took
with what that is in cores (how busy the cores were: a step may run two processes at once);
the checks' windows that measured wall
time with nothing else running (alone) are listed under them, the longest first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The order phases are shown in.
PHASES = ("bundles", "builds", "checks", "report")


@dataclass
class Timings:
    # (phase, label) -> [seconds, how many spans]
    spans: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    # phase -> (wall seconds, jobs) of a phase whose spans ran side by side
    walls: dict[str, tuple[float, int]] = field(default_factory=dict)
    # phase -> CPU seconds its processes took (this one and every tool it ran), all cores
    cpu: dict[str, float] = field(default_factory=dict)
    # the windows a step measured wall time in with nothing else running: (label, seconds)
    alone_windows: list[tuple[str, float]] = field(default_factory=list)
    # what the windows held of the idle CPUs, in words ("kept awake", or why not); "" unsaid
    alone_cpus: str = ""

    def alone(self, label: str, seconds: float) -> None:
        """A window in which one step measured wall time and the other cores idled."""
        self.alone_windows.append((label, max(0.0, seconds)))

    def wall(self, phase: str, seconds: float, jobs: int, cpu_seconds: float | None = None) -> None:
        """The phase's own wall time, when its spans overlapped (`jobs` at once), and the CPU
        time its processes took meanwhile."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r} (one of {', '.join(PHASES)})")
        self.walls[phase] = (max(0.0, seconds), jobs)
        if cpu_seconds is not None:
            self.cpu[phase] = max(0.0, cpu_seconds)

    def add(self, phase: str, label: str, seconds: float) -> None:
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r} (one of {', '.join(PHASES)})")
        entry = self.spans.setdefault((phase, label), [0.0, 0.0])
        entry[0] += max(0.0, seconds)
        entry[1] += 1

    def summed_seconds(self, phase: str) -> float:
        return sum(v[0] for (p, _), v in self.spans.items() if p == phase)

    def phase_seconds(self, phase: str) -> float:
        """The phase's wall time: its own where its spans overlapped, else their sum."""
        if phase in self.walls:
            return self.walls[phase][0]
        return self.summed_seconds(phase)

    def lines(self, total_s: float, *, min_s: float = 0.5) -> list[str]:
        """The table: one line per phase with its total, then its largest parts (those of
        at least `min_s` seconds; the smaller ones summed into one line), then "other"."""
        out = [f"where the time went ({_clock(total_s)} in all):"]
        for phase in PHASES:
            parts = sorted(
                ((label, v[0], int(v[1])) for (p, label), v in self.spans.items() if p == phase),
                key=lambda part: (-part[1], part[0]),
            )
            if not parts:
                continue
            shown = [p for p in parts if p[1] >= min_s]
            rest = [p for p in parts if p[1] < min_s]
            words = [f"{label} {_clock(s)}" + (f" ({n}x)" if n > 1 else "") for label, s, n in shown]
            if rest:
                words.append(f"{len(rest)} more {_clock(sum(p[1] for p in rest))}")
            if phase in self.walls:
                wall, jobs = self.walls[phase]
                summed = self.summed_seconds(phase)
                busy = f", {summed / wall:.2f} busy" if wall > 0 else ""
                cpu = self.cpu.get(phase)
                if cpu is not None and wall > 0:
                    busy += f"; CPU {_clock(cpu)}, {cpu / wall:.2f} cores"
                words.insert(0, f"[steps summed {_clock(summed)}, {jobs} at once{busy}]")
            out.append(f"  {phase:<8} {_clock(self.phase_seconds(phase)):>7}  " + ", ".join(words))
            if phase == "checks" and self.alone_windows:
                out.append("  " + " " * 17 + self.alone_line())
        covered = sum(self.phase_seconds(p) for p in PHASES)
        out.append(f"  {'other':<8} {_clock(max(0.0, total_s - covered)):>7}  planning, evidence, the sample")
        return out

    def alone_line(self, shown: int = 3) -> str:
        """The wall-time windows in which nothing else ran: how many, their sum, the longest."""
        longest = sorted(self.alone_windows, key=lambda w: (-w[1], w[0]))[:shown]
        total = sum(seconds for _, seconds in self.alone_windows)
        named = ", ".join(f"{label} {_clock(seconds)}" for label, seconds in longest)
        cpus = f", idle CPUs {self.alone_cpus}" if self.alone_cpus else ""
        return f"[alone: {len(self.alone_windows)} windows, {_clock(total)}{cpus}; longest {named}]"


def _clock(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds + 0.5), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
