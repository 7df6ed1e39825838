"""The logit error of one build against another: how far apart their arithmetic is.

Two builds of the same model on other backends (llama.cpp on Vulkan against the CPU) are not
bit for bit alike: their shaders and kernels sum in another order. Greedy tokens hide how
far apart they are until a near-tie flips; the logits show it at every step. At each step
whose prefix both builds share (every step up to and including a prompt's first divergence),
the candidate's logits x are compared with the reference's r. The figure judged is the
normalized mean squared error of all those steps' logits pooled, as llama.cpp's own backend
tests compute it over a tensor:

    NMSE = sum((x - r)^2) / sum(r^2).

Each step's own NMSE is kept too: the worst and the median say where the error sits. The two
sums of each step come from the logits files (eliza.formats.logits); pure here."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


class LogitsFormatError(ValueError):
    """Logits that cannot be compared: a file that is not what the reference runner writes,
    a step one run lacks, another vocabulary, nothing to compare."""


@dataclass(frozen=True, kw_only=True)
class StepError:
    """One compared step: sum((x - r)^2) and sum(r^2) over its logits."""

    prompt: int
    step: int
    squared: float
    scale: float

    @property
    def nmse(self) -> float:
        return nmse(self.squared, self.scale)


def nmse(squared: float, scale: float) -> float:
    """squared / scale; 0 for nothing against nothing, inf for an error against nothing or a
    sum that is not finite."""
    if not (math.isfinite(squared) and math.isfinite(scale)):
        return math.inf
    if scale == 0.0:
        return 0.0 if squared == 0.0 else math.inf
    return squared / scale


@dataclass(frozen=True, kw_only=True)
class LogitError:
    """The pooled NMSE of the compared steps, and the steps' own: the worst, where it was,
    and the median."""

    steps: int
    pooled: float
    worst: float
    worst_at: tuple[int, int]  # (prompt, step)
    median: float

    def words(self) -> str:
        prompt, step = self.worst_at
        return (
            f"logit NMSE {self.pooled:.3g} over {self.steps} steps (a step's worst {self.worst:.3g} at "
            f"prompt {prompt} step {step}, median {self.median:.3g})"
        )


def logit_error(steps: Sequence[StepError]) -> LogitError:
    """The figures of the compared steps; at least one is needed."""
    if not steps:
        raise LogitsFormatError("no step to compare: the runs generated nothing")
    worst = max(steps, key=lambda s: s.nmse)
    return LogitError(
        steps=len(steps),
        pooled=nmse(sum(s.squared for s in steps), sum(s.scale for s in steps)),
        worst=worst.nmse,
        worst_at=(worst.prompt, worst.step),
        median=statistics.median(s.nmse for s in steps),
    )
