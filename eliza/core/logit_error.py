"""The logit error of one build against another: how far apart their arithmetic is.

Two builds of the same model on other backends (llama.cpp on Vulkan against the CPU) are not
bit for bit alike: their shaders and kernels sum in another order. Greedy tokens hide how
far apart they are until a near-tie flips; the logits show it at every step. At each step
whose prefix both builds share (every step up to and including a prompt's first divergence),
the candidate's logits x are compared with the reference's r. The figure judged is the
normalized mean squared error of all those steps' logits pooled, as llama.cpp's own backend
tests compute it over a tensor:

    NMSE = sum((x - r)^2) / sum(r^2).

Each step's own NMSE is kept too: the worst and the median say where the error sits.

The logits come from the reference runner's --logits-out (native/tools/reference_runner.cpp):
the magic "ELZLGT01", int32 n_vocab, then per step int32 prompt, int32 step and
float32[n_vocab], little-endian. Pure: bytes in, figures out.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

MAGIC = b"ELZLGT01"
_HEADER = len(MAGIC) + 4

Logits = npt.NDArray[np.float32]


class LogitsFormatError(ValueError):
    """A logits file that is not what the reference runner writes."""


@dataclass(frozen=True, kw_only=True)
class LogitRows:
    """One run's logits: (prompt index, step) -> the row of n_vocab logits."""

    n_vocab: int
    rows: Mapping[tuple[int, int], Logits]

    def steps(self, prompt: int) -> int:
        """How many consecutive steps of `prompt` are recorded from step 0."""
        count = 0
        while (prompt, count) in self.rows:
            count += 1
        return count


def parse_logits(data: bytes, source: str) -> LogitRows:
    """The rows of a --logits-out file; `source` names it in errors."""
    if len(data) < _HEADER or data[: len(MAGIC)] != MAGIC:
        raise LogitsFormatError(
            f"{source}: not a logits file of the reference runner (no {MAGIC.decode()} header)"
        )
    n_vocab = int(np.frombuffer(data, dtype="<i4", count=1, offset=len(MAGIC))[0])
    if n_vocab < 1:
        raise LogitsFormatError(
            f"{source}: n_vocab {n_vocab} in the header (a step holds at least one logit)"
        )
    row_bytes = 8 + 4 * n_vocab
    body = len(data) - _HEADER
    if body % row_bytes:
        raise LogitsFormatError(
            f"{source}: {body} bytes after the header is not a whole number of {row_bytes}-byte rows"
        )
    rows: dict[tuple[int, int], Logits] = {}
    for at in range(_HEADER, len(data), row_bytes):
        prompt, step = (int(v) for v in np.frombuffer(data, dtype="<i4", count=2, offset=at))
        rows[(prompt, step)] = np.frombuffer(data, dtype="<f4", count=n_vocab, offset=at + 8)
    return LogitRows(n_vocab=n_vocab, rows=rows)


def nmse(candidate: Logits, reference: Logits) -> float:
    """sum((x - r)^2) / sum(r^2), in float64; inf where the reference is all zeros and the
    candidate is not, or where either holds a NaN or an infinity."""
    x = candidate.astype(np.float64)
    r = reference.astype(np.float64)
    if not (np.isfinite(x).all() and np.isfinite(r).all()):
        return float("inf")
    error = float(np.sum((x - r) ** 2))
    scale = float(np.sum(r**2))
    if scale == 0.0:
        return 0.0 if error == 0.0 else float("inf")
    return error / scale


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


def logit_error(candidate: LogitRows, reference: LogitRows, shared_steps: Mapping[int, int]) -> LogitError:
    """The NMSE of `candidate` against `reference` at the first shared_steps[prompt] steps of
    each prompt (those whose prefix the two builds share). A step either run lacks is an
    error: the runs would not say what they were asked."""
    if candidate.n_vocab != reference.n_vocab:
        raise LogitsFormatError(
            f"the runs have other vocabularies: {candidate.n_vocab} and {reference.n_vocab} logits"
        )
    errors: list[tuple[float, tuple[int, int]]] = []
    squared = scale = 0.0
    for prompt, count in sorted(shared_steps.items()):
        for step in range(count):
            key = (prompt, step)
            if key not in candidate.rows or key not in reference.rows:
                side = "candidate" if key not in candidate.rows else "reference"
                raise LogitsFormatError(f"the {side} run has no logits for prompt {prompt}, step {step}")
            x, r = candidate.rows[key].astype(np.float64), reference.rows[key].astype(np.float64)
            squared += float(np.sum((x - r) ** 2))
            scale += float(np.sum(r**2))
            errors.append((nmse(candidate.rows[key], reference.rows[key]), key))
    if not errors:
        raise LogitsFormatError("no step to compare: the runs generated nothing")
    worst, at = max(errors, key=lambda e: e[0])
    finite = np.isfinite(squared) and np.isfinite(scale)
    pooled = squared / scale if finite and scale > 0 else (0.0 if finite and squared == 0 else float("inf"))
    return LogitError(
        steps=len(errors),
        pooled=pooled,
        worst=worst,
        worst_at=at,
        median=statistics.median(e for e, _ in errors),
    )
