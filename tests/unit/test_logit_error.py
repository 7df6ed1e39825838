"""The logit error of one build against another: the reference runner's --logits-out layout
(eliza.formats.logits), the pooled NMSE (eliza.core.logit_error), and that a change the size
of one layer's output scaled by 1.01 stands far above sums taken in another order."""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest

from eliza.core.logit_error import LogitsFormatError, StepError, logit_error, nmse
from eliza.formats.logits import MAGIC, LogitRows, parse_logits, step_errors


def logits_file(n_vocab: int, rows: dict[tuple[int, int], np.ndarray]) -> bytes:
    """The bytes reference_runner.cpp's LogitsFile writes."""
    out = bytearray(MAGIC + struct.pack("<i", n_vocab))
    for (prompt, step), row in rows.items():
        out += struct.pack("<ii", prompt, step) + row.astype("<f4").tobytes()
    return bytes(out)


def rows_of(matrix: np.ndarray) -> LogitRows:
    rows = {(0, s): matrix[s].astype(np.float32) for s in range(len(matrix))}
    return LogitRows(n_vocab=matrix.shape[1], rows=rows)


def error_of(candidate: np.ndarray, reference: np.ndarray, steps: int) -> float:
    return logit_error(step_errors(rows_of(candidate), rows_of(reference), {0: steps})).pooled


def test_the_file_reads_back_as_written() -> None:
    rng = np.random.default_rng(1)
    rows = {(0, 0): rng.normal(size=5), (0, 1): rng.normal(size=5), (1, 0): rng.normal(size=5)}
    got = parse_logits(logits_file(5, rows), "a.logits")
    assert got.n_vocab == 5 and set(got.rows) == set(rows)
    assert np.array_equal(got.rows[(0, 1)], rows[(0, 1)].astype(np.float32))
    assert got.steps(0) == 2 and got.steps(1) == 1 and got.steps(2) == 0


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"not a logits file", "no ELZLGT01 header"),
        (MAGIC + struct.pack("<i", 0), "n_vocab 0 in the header"),
        (MAGIC + struct.pack("<i", 4) + b"\0" * 9, "9 bytes after the header are not whole 24-byte rows"),
    ],
)
def test_a_file_of_another_layout_is_refused_naming_it(data: bytes, words: str) -> None:
    with pytest.raises(LogitsFormatError, match=words) as raised:
        parse_logits(data, "x.logits")
    assert str(raised.value).startswith("x.logits: ")


def test_nmse_is_the_squared_error_over_the_references_energy() -> None:
    assert nmse(1.0, 25.0) == pytest.approx(0.04)
    assert nmse(0.0, 0.0) == 0.0
    assert nmse(1.0, 0.0) == math.inf and nmse(math.inf, 25.0) == math.inf
    r = np.array([[3.0, 4.0]])
    assert error_of(np.array([[3.0, 5.0]]), r, 1) == pytest.approx(1 / 25)
    assert error_of(np.array([[np.nan, 4.0]]), r, 1) == math.inf


def test_the_pooled_error_weighs_every_logit_and_the_worst_step_is_named() -> None:
    reference = np.array([[1.0, 0.0], [0.0, 10.0]])
    candidate = np.array([[1.0, 1.0], [0.0, 10.0]])  # step 0 off by 1, step 1 exact
    error = logit_error(step_errors(rows_of(candidate), rows_of(reference), {0: 2}))
    assert error.pooled == pytest.approx(1 / 101)  # one squared error over 1 + 100
    assert error.worst == pytest.approx(1.0) and error.worst_at == (0, 0)
    assert error.steps == 2 and error.median == pytest.approx(0.5)
    assert "logit NMSE 0.0099 over 2 steps" in error.words()


def test_only_the_shared_steps_are_compared() -> None:
    reference = np.array([[1.0, 0.0], [0.0, 10.0]])
    candidate = np.array([[1.0, 0.0], [50.0, -3.0]])  # step 1 followed another prefix
    assert error_of(candidate, reference, 1) == 0.0


def test_a_missing_step_another_vocabulary_or_nothing_is_an_error() -> None:
    one = rows_of(np.ones((1, 3)))
    with pytest.raises(LogitsFormatError, match="the candidate run has no logits for prompt 0, step 1"):
        step_errors(one, rows_of(np.ones((2, 3))), {0: 2})
    with pytest.raises(LogitsFormatError, match="other vocabularies: 3 and 4 logits"):
        step_errors(one, rows_of(np.ones((1, 4))), {0: 1})
    with pytest.raises(LogitsFormatError, match="no step to compare"):
        logit_error([])
    assert logit_error([StepError(prompt=0, step=0, squared=0.0, scale=1.0)]).pooled == 0.0


def test_a_one_percent_change_stands_far_above_reordered_float32_sums() -> None:
    # The shape of what the check separates: the same logits summed in another order
    # (float32 rounding, as another backend's shaders give) against a 1 % change to part
    # of them (one layer's output scaled by 1.01).
    rng = np.random.default_rng(7)
    parts = rng.normal(size=(16, 8, 512)).astype(np.float32)  # steps x layers' contributions x vocab
    reference = parts.sum(axis=1, dtype=np.float32)
    reordered = parts[:, ::-1, :].sum(axis=1, dtype=np.float32)
    planted = parts.copy()
    planted[:, 3, :] *= 1.01
    noise = error_of(reordered, reference, 16)
    plant = error_of(planted.sum(axis=1, dtype=np.float32), reference, 16)
    assert noise < 1e-12 and plant > 1e-6
