"""backend-agreement: a gate's runtime, hard-selected through ELIZA_LLM_BACKEND, against
the llama.cpp path of the same cell and bundle, greedy, on the same prompts.

Across runtimes only greedy output is comparable, and two correct implementations may round
a near-tie either way: each prompt is compared position by position up to its first
divergence, which is allowed only where llama.cpp's two highest logits were within the
gate's `tie_margin` (the reference runner records that gap at every position). After a
divergence the two continue from different text, so the rest of that prompt counts as not
agreeing. The check passes when every divergence is such a tie and the share of agreeing
positions reaches `min_token_agreement`. A runtime that gives text only (`compare: text`)
is compared on the generated text, character by character, as a text API can give it back
(each byte that is not part of a whole UTF-8 character, such as a lone byte token or the
start of a character cut off by max_tokens, counts as one U+FFFD on both sides): its
divergence is the first differing character, judged by the margin of the llama.cpp token
whose text holds it (the reference runner records where each token's text ends), and
agreement is the share of agreeing characters.

Pure: bench records in, a verdict out."""

from __future__ import annotations

from dataclasses import dataclass, replace

from eliza.core.bench_records import BenchRun, PromptRecord
from eliza.core.matrix import BackendAgreement


class AgreementInputError(ValueError):
    """The runs cannot be compared (other prompts, a run without margins)."""


@dataclass(frozen=True, kw_only=True)
class PromptVerdict:
    index: int
    prompt: str
    positions: int  # the reference's generated positions (tokens, or bytes for text)
    agreed: int  # positions equal before the first divergence
    divergence: int | None  # the first differing position, None when equal throughout
    margin: float | None  # llama.cpp's top-two gap at the divergence (tokens only)
    allowed: bool  # equal, or a first divergence at a tie within the margin

    def words(self) -> str:
        if self.divergence is None:
            return f"prompt {self.index}: equal ({self.positions} positions)"
        at = f"diverges at position {self.divergence} of {self.positions}"
        if self.margin is None:
            return f"prompt {self.index}: {at}"
        tie = "a tie within the margin" if self.allowed else "not a tie"
        return f"prompt {self.index}: {at}, llama.cpp's top-two gap {self.margin:.4g} ({tie})"


@dataclass(frozen=True, kw_only=True)
class AgreementVerdict:
    backend: str
    compare: str
    prompts: tuple[PromptVerdict, ...]
    rule: BackendAgreement
    against: str = "llama.cpp"  # what the reference run is, in summaries

    @property
    def positions(self) -> int:
        return sum(p.positions for p in self.prompts)

    @property
    def agreement(self) -> float:
        return sum(p.agreed for p in self.prompts) / self.positions if self.positions else 0.0

    @property
    def passed(self) -> bool:
        return (
            bool(self.prompts)
            and self.positions > 0
            and all(p.allowed for p in self.prompts)
            and self.agreement >= self.rule.min_token_agreement
        )

    def reason(self) -> str:
        """One line: why it failed ("" when it passed)."""
        if self.passed:
            return ""
        if not self.prompts or self.positions == 0:
            return f"{self.backend}: nothing was generated to compare"
        bad = [p for p in self.prompts if not p.allowed]
        if bad:
            return f"{self.backend}: " + "; ".join(p.words() for p in bad[:3])
        return (
            f"{self.backend}: {self.compare} agreement {self.agreement:.4f} is below the floor "
            f"{self.rule.min_token_agreement}"
        )

    def summary(self) -> str:
        exact = sum(1 for p in self.prompts if p.divergence is None)
        return (
            f"{self.backend} vs {self.against}, greedy: {self.compare} agreement {self.agreement:.4f} "
            f"({sum(p.agreed for p in self.prompts)}/{self.positions} positions, {exact}/{len(self.prompts)} "
            f"prompts equal; floor {self.rule.min_token_agreement}, tie margin {self.rule.tie_margin})"
        )


def _first_difference(a: str | tuple[int, ...], b: str | tuple[int, ...]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _chars(raw: bytes) -> list[tuple[str, int]]:
    """(character, the byte it starts at) of the text a text API gives back for these bytes:
    each byte that is not part of a whole UTF-8 character is one U+FFFD, as when a runtime
    renders each byte token on its own (a plain "replace" decode makes one U+FFFD of a
    cut-off character's 3 bytes)."""
    out: list[tuple[str, int]] = []
    at = 0
    while at < len(raw):
        lead = raw[at]
        size = (
            1
            if lead < 0x80
            else 2
            if lead >> 5 == 0b110
            else 3
            if lead >> 4 == 0b1110
            else 4
            if lead >> 3 == 0b11110
            else 0
        )
        try:
            char = raw[at : at + size].decode("utf-8") if size else ""
        except UnicodeDecodeError:
            char = ""
        if len(char) == 1:
            out.append((char, at))
            at += size
        else:
            out.append(("\ufffd", at))
            at += 1
    return out


def as_text(raw: bytes) -> str:
    """The generated bytes as text, as a text API gives them back (_chars)."""
    return "".join(c for c, _ in _chars(raw))


def _byte_of_char(raw: bytes, char: int) -> int:
    """Where character `char` of as_text(raw) begins in `raw` (past the end: its last byte,
    the text's end being where the last token's text is)."""
    chars = _chars(raw)
    return chars[char][1] if 0 <= char < len(chars) else max(0, len(raw) - 1)


def _token_at_byte(margins: PromptRecord, at: int) -> int:
    """The index of the generated token whose text holds byte `at` (the reference
    runner's token_text_ends); past the text: the position after its last token."""
    ends = margins.token_text_ends
    if not ends and margins.tokens:
        raise AgreementInputError(
            f"prompt {margins.index}: the reference runner recorded no token_text_ends: text cannot be "
            "mapped to positions (rebuild the bench tools)"
        )
    return next((i for i, end in enumerate(ends) if end > at), len(ends))


def _judge_prompt(
    reference: PromptRecord, margins: PromptRecord, backend: PromptRecord, rule: BackendAgreement
) -> PromptVerdict:
    if rule.compare == "text":
        # as a text-only API can give text back: bytes that are not UTF-8 (a lone byte
        # token) are U+FFFD on both sides; compared character by character
        ref_seq: str | tuple[int, ...] = as_text(reference.text)
        got: str | tuple[int, ...] = as_text(backend.text)
    else:
        ref_seq, got = reference.tokens, backend.tokens
    at = _first_difference(ref_seq, got)
    if at is None:
        return PromptVerdict(
            index=reference.index,
            prompt=reference.prompt,
            positions=len(ref_seq),
            agreed=len(ref_seq),
            divergence=None,
            margin=None,
            allowed=True,
        )
    margin = None
    allowed = False
    # the generated position the first difference belongs to: the token itself, or the
    # token whose text holds the first differing byte
    position = at if rule.compare == "tokens" else _token_at_byte(margins, _byte_of_char(reference.text, at))
    if position >= len(margins.logit_margins):
        raise AgreementInputError(
            f"prompt {reference.index}: the reference runner recorded {len(margins.logit_margins)} logit "
            f"margins, the divergence is at position {position}"
        )
    margin = margins.logit_margins[position]
    allowed = margin <= rule.tie_margin
    return PromptVerdict(
        index=reference.index,
        prompt=reference.prompt,
        positions=max(len(ref_seq), 1),
        agreed=at,
        divergence=at,
        margin=margin,
        allowed=allowed,
    )


def judge(
    backend_name: str,
    reference: BenchRun,
    margins: BenchRun,
    backend: BenchRun,
    rule: BackendAgreement,
    *,
    against: str = "llama.cpp",
) -> AgreementVerdict:
    """reference: the llama.cpp path's output (the reference runner's: plain llama.h, which
    byte-identity-reference holds byte-identical to the library's llama.cpp path); margins:
    a run with each position's top-two gap (the same reference runner run); backend: the
    library with the backend hard-selected."""
    runs = (reference, margins, backend)
    prompts = [tuple(p.prompt for p in run.prompts) for run in runs]
    if len(set(prompts)) != 1:
        counts = ", ".join(f"{r.label} ({len(p)})" for r, p in zip(runs, prompts, strict=True))
        raise AgreementInputError(f"the runs hold other prompts: {counts}")
    if rule.compare == "tokens":
        for ref, mar in zip(reference.prompts, margins.prompts, strict=True):
            if ref.tokens != mar.tokens:
                raise AgreementInputError(
                    f"prompt {ref.index}: the reference runner's tokens differ from the llama.cpp path's; "
                    "byte-identity-reference is the check that judges that"
                )
    verdicts = tuple(
        _judge_prompt(ref, mar, got, rule)
        for ref, mar, got in zip(reference.prompts, margins.prompts, backend.prompts, strict=True)
    )
    return AgreementVerdict(
        backend=backend_name, compare=rule.compare, prompts=verdicts, rule=rule, against=against
    )


def past_the_window(rule: BackendAgreement) -> BackendAgreement:
    """The tolerance of a case whose prompts run past the model's sliding window: the first
    divergence must still be a near-tie (`tie_margin`), but no floor applies: a long
    prompt's share of agreeing positions is only where its first near-tie falls, everything
    after it counting as disagreeing."""
    return replace(rule, min_token_agreement=0.0)
