"""What the runtimes' own runners share: reading the prompts as the bench tools do, and
writing their runs in the bench tools' record format (eliza-bench/1), so that one parser and
one set of metric definitions read the body's runs and the own runner's alike."""

from __future__ import annotations

import json
import resource
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


def read_prompts(path: Path) -> list[str]:
    """One prompt per line; "\\n", "\\t" and "\\\\" are escapes; lines starting with # are
    skipped (the bench tools' prompt files, read as native/tools/bench_common.cpp reads them)."""
    prompts = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        out, escaped = [], False
        for ch in line:
            if escaped:
                out.append("\n" if ch == "n" else "\t" if ch == "t" else ch)
                escaped = False
            elif ch == "\\":
                escaped = True
            else:
                out.append(ch)
        prompts.append("".join(out))
    return prompts


@dataclass
class Timing:
    """One prompt's clock, in the bench tools' terms: prefill returns at t_prefill, the first
    token comes at t_first, the last at t_end (all from t0, in seconds)."""

    t0: float = field(default_factory=time.perf_counter)
    t_prefill: float = 0.0
    t_first: float = 0.0
    t_end: float = 0.0
    # after the first token, each token's step: the time since the previous token
    steps: list[float] = field(default_factory=list)
    _count: int = 0

    def prefilled(self) -> None:
        self.t_prefill = time.perf_counter()

    def token(self, count: int) -> None:
        """`count` tokens have come so far (the first at 1)."""
        now = time.perf_counter()
        if self._count == 0:
            self.t_first = now
        elif count > self._count:
            self.steps.extend([(now - self.t_end) / (count - self._count)] * (count - self._count))
        if count > self._count:
            self._count = count
            self.t_end = now

    def step_ms(self) -> float | None:
        """The median step of one token after the first, in ms (the bench tools' decode_step_ms)."""
        return statistics.median(self.steps) * 1000 if self.steps else None


def write_header(
    out: IO[str], tool: str, cell: str, runtime: str, max_tokens: int, threads: int, repeats: int = 1
) -> None:
    out.write(
        json.dumps(
            {
                "type": "header",
                "format": "eliza-bench/1",
                "tool": tool,
                "cell": cell,
                "max_tokens": max_tokens,
                "repeats": repeats,
                "threads": threads,
                "peak_rss_source": "getrusage-maxrss",
                "build": {"llm_backend": runtime, "own_runner": True},
            }
        )
        + "\n"
    )


def write_prompt(
    out: IO[str],
    index: int,
    prompt: str,
    prompt_tokens: Sequence[int],
    tokens: Sequence[int],
    text: bytes,
    timings: Sequence[Timing],
) -> None:
    """One prompt's record: its first repeat's tokens and text, every repeat's timings."""
    later = len(tokens) - 1

    def decode(t: Timing) -> float:
        return later / (t.t_end - t.t_first) if later > 0 and t.t_end > t.t_first else 0.0

    out.write(
        json.dumps(
            {
                "type": "prompt",
                "index": index,
                "prompt": prompt,
                "prompt_tokens": list(prompt_tokens),
                "tokens": list(tokens),
                "text_hex": text.hex(),
                "final_status": 1,
                "repeats_identical": True,
                "drafter": [],
                "prefill_ms": [round((t.t_prefill - t.t0) * 1000, 4) for t in timings],
                "first_token_ms": [round((t.t_first - t.t0) * 1000, 4) for t in timings],
                "decode_tok_s": [round(decode(t), 4) for t in timings],
                "decode_step_ms": [round(ms, 6) for t in timings if (ms := t.step_ms()) is not None],
                "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            }
        )
        + "\n"
    )
