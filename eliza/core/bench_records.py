"""The bench record format (JSON lines, "eliza-bench/1"): one header, one record per prompt.

Written by native/tools/e2e_loop_bench and native/tools/reference_runner; parsed here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

FORMAT = "eliza-bench/1"

# What the records' measured figures mean. It is a part of the fingerprint of every check
# that records them, so evidence measured under an older definition is never fresh: until
# the tools read VmHWM, peak_rss_kb was getrusage's ru_maxrss, which Linux carries over
# from the process that started the tool (the orchestrator's own size); until /3 the
# library's pages were mapped as the page cache held them (a copy of the same bytes read
# 1.7 MB less than the linker's output).
METRIC_DEFINITIONS = "peak_rss_kb=own-process-high-water-mark,library-page-cache-dropped/3"


class BenchFormatError(ValueError):
    pass


@dataclass(frozen=True, kw_only=True)
class PromptRecord:
    index: int
    prompt: str
    prompt_tokens: tuple[int, ...]
    tokens: tuple[int, ...]
    text: bytes
    final_status: int
    repeats_identical: bool
    drafter: tuple[tuple[int, int], ...]
    prefill_ms: tuple[float, ...]
    first_token_ms: tuple[float, ...]
    decode_tok_s: tuple[float, ...]
    peak_rss_kb: int
    # reference_runner: the gap between the two highest logits at each generated position,
    # and where each generated token's text ends in `text` (bytes)
    logit_margins: tuple[float, ...] = ()
    token_text_ends: tuple[int, ...] = ()
    # per repeat, the median time of one token's step after the first (ms): the decode's
    # steady rate, which a burst of another process's work does not move
    decode_step_ms: tuple[float, ...] = ()


@dataclass(frozen=True, kw_only=True)
class BenchRun:
    source: str
    header: Mapping[str, Any]
    prompts: tuple[PromptRecord, ...]

    @property
    def tool(self) -> str:
        return str(self.header.get("tool", "?"))

    @property
    def label(self) -> str:
        return f"{self.header.get('cell', '?')}:{self.tool}"

    @property
    def settings(self) -> dict[str, Any]:
        """What of the header decides the generated tokens: token budget and sampling."""
        return {"max_tokens": self.header.get("max_tokens"), "sampling": self.header.get("sampling")}

    @property
    def peak_rss_source(self) -> str:
        """Where the tool read its peak RSS ("proc-status-vmhwm" on Linux); "unrecorded"
        for a record of a tool older than the field."""
        return str(self.header.get("peak_rss_source", "unrecorded"))

    @property
    def generated_tokens(self) -> int:
        return sum(len(p.tokens) for p in self.prompts)


def _prompt(data: Mapping[str, Any], where: str) -> PromptRecord:
    try:
        return PromptRecord(
            index=int(data["index"]),
            prompt=str(data["prompt"]),
            prompt_tokens=tuple(int(t) for t in data["prompt_tokens"]),
            tokens=tuple(int(t) for t in data["tokens"]),
            text=bytes.fromhex(str(data["text_hex"])),
            final_status=int(data["final_status"]),
            repeats_identical=bool(data["repeats_identical"]),
            drafter=tuple((int(d), int(a)) for d, a in data["drafter"]),
            prefill_ms=tuple(float(v) for v in data["prefill_ms"]),
            first_token_ms=tuple(float(v) for v in data["first_token_ms"]),
            decode_tok_s=tuple(float(v) for v in data["decode_tok_s"]),
            peak_rss_kb=int(data["peak_rss_kb"]),
            logit_margins=tuple(float(v) for v in data.get("logit_margins", ())),
            token_text_ends=tuple(int(v) for v in data.get("token_text_ends", ())),
            decode_step_ms=tuple(float(v) for v in data.get("decode_step_ms", ())),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BenchFormatError(f"{where}: malformed prompt record ({exc!r})") from exc


def parse_run(text: str, source: str) -> BenchRun:
    lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
    if not lines:
        raise BenchFormatError(f"{source}: empty bench output (no header)")
    records: list[tuple[str, dict[str, Any]]] = []
    for n, line in lines:
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchFormatError(
                f"{source}:{n}: not JSON lines ({exc.msg}): a bench file holds one JSON object per line, "
                "as e2e_loop_bench and reference_runner write it"
            ) from exc
        if not isinstance(value, dict):
            raise BenchFormatError(f"{source}:{n}: expected a JSON object")
        records.append((f"{source}:{n}", value))
    where, header = records[0]
    if header.get("type") != "header" or header.get("format") != FORMAT:
        raise BenchFormatError(f"{where}: first record must be a {FORMAT} header")
    prompts = tuple(_prompt(data, w) for w, data in records[1:] if data.get("type") == "prompt")
    return BenchRun(source=source, header=header, prompts=prompts)
