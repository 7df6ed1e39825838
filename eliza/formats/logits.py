"""The reference runner's logits files (`reference_runner --logits-out`), read, and the two
sums a logit error is made of, computed per step.

Layout, little-endian: the magic "ELZLGT01", int32 n_vocab, then per step int32 prompt
index, int32 step and float32[n_vocab] (native/tools/reference_runner.cpp, LogitsFile).
What the sums mean and how they are judged: eliza.core.logit_error."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from eliza.core.logit_error import LogitsFormatError, StepError

MAGIC = b"ELZLGT01"
_HEADER = len(MAGIC) + 4

Logits = npt.NDArray[np.float32]


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
            f"{source}: not a reference runner's logits file (no {MAGIC.decode()} header)"
        )
    n_vocab = int(np.frombuffer(data, dtype="<i4", count=1, offset=len(MAGIC))[0])
    if n_vocab < 1:
        raise LogitsFormatError(f"{source}: n_vocab {n_vocab} in the header (a step has at least one logit)")
    row_bytes = 8 + 4 * n_vocab
    body = len(data) - _HEADER
    if body % row_bytes:
        raise LogitsFormatError(
            f"{source}: {body} bytes after the header are not whole {row_bytes}-byte rows"
        )
    rows: dict[tuple[int, int], Logits] = {}
    for at in range(_HEADER, len(data), row_bytes):
        prompt, step = (int(v) for v in np.frombuffer(data, dtype="<i4", count=2, offset=at))
        rows[(prompt, step)] = np.frombuffer(data, dtype="<f4", count=n_vocab, offset=at + 8)
    return LogitRows(n_vocab=n_vocab, rows=rows)


def step_errors(
    candidate: LogitRows, reference: LogitRows, shared_steps: Mapping[int, int]
) -> list[StepError]:
    """sum((x - r)^2) and sum(r^2), in float64, at the first shared_steps[prompt] steps of each
    prompt. A step either run lacks is an error: the runs would not say what they were asked.
    A NaN or an infinity in either row makes that step's error infinite."""
    if candidate.n_vocab != reference.n_vocab:
        raise LogitsFormatError(
            f"the runs have other vocabularies: {candidate.n_vocab} and {reference.n_vocab} logits"
        )
    found: list[StepError] = []
    for prompt, count in sorted(shared_steps.items()):
        for step in range(count):
            key = (prompt, step)
            if key not in candidate.rows or key not in reference.rows:
                side = "candidate" if key not in candidate.rows else "reference"
                raise LogitsFormatError(f"the {side} run has no logits for prompt {prompt}, step {step}")
            x = candidate.rows[key].astype(np.float64)
            r = reference.rows[key].astype(np.float64)
            finite = bool(np.isfinite(x).all() and np.isfinite(r).all())
            squared = float(np.sum((x - r) ** 2)) if finite else float("inf")
            found.append(StepError(prompt=prompt, step=step, squared=squared, scale=float(np.sum(r**2))))
    return found
