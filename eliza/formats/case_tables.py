"""The selector, seam and gate fall-through case tables (native/cases/*.cases): parsing,
the judgement of a seam step, the expansion of the gate table for one cell, the plan the
native case runner executes, and what the runner prints.

The same tables are read by the host's pytest suites (through ctypes) and by
native/tools/case_runner.cpp on a target, so a case exists once. See the comments at the
top of each table for its columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from eliza.core.matrix import Cell, Gate
from eliza.core.outcome import CaseResult

SELECTOR_TABLE = Path("native") / "cases" / "selector.cases"
GATE_TABLE = Path("native") / "cases" / "gate-fallthrough.cases"
# case_runner's selector mode reads it beside SELECTOR_TABLE, so the target check that
# names only the selector table runs both.
SEAM_TABLE = Path("native") / "cases" / "seam.cases"
_SEP = " | "
_KINDS = ("generates", "create-error", "open-error", "tokenize-error")


class CaseTableError(ValueError):
    """A table line that cannot be read; the message names the file and line."""


@dataclass(frozen=True, kw_only=True)
class Fake:
    name: str
    available: bool
    can_serve: bool
    rank: int


@dataclass(frozen=True, kw_only=True)
class SelectorCase:
    name: str
    fakes: tuple[Fake, ...]
    env: str | None  # None: unset
    bundle: str
    expect: str  # "in-tree" | "chosen <name>" | "error <text> && ..."

    def judge(self, rc: int, chosen: str | None, error: str | None, invalid_arg: int) -> str:
        """ "" when the selector's answer is what the case expects, else why not."""
        got = f"rc {rc}, chosen {chosen!r}, error {error!r}"
        if self.expect == "in-tree":
            ok = rc == 0 and not chosen and not error
        elif self.expect.startswith("chosen "):
            ok = rc == 1 and chosen == self.expect.removeprefix("chosen ").strip() and not error
        else:
            texts = _texts(self.expect.removeprefix("error "))
            ok = rc == invalid_arg and not chosen and error is not None and all(t in error for t in texts)
        return "" if ok else f"want {self.expect}; got {got}"


@dataclass(frozen=True, kw_only=True)
class GateCase:
    """One gate fall-through case for one cell, placeholders expanded."""

    name: str
    bundle: str  # "gguf" | "only-<gate id>" | "corrupt-gguf"
    env: str | None
    kind: str  # one of _KINDS
    texts: tuple[str, ...]


def _texts(field: str) -> tuple[str, ...]:
    return tuple(t.strip() for t in field.split("&&") if t.strip())


def _rows(text: str, source: str, width: int) -> list[tuple[int, list[str]]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = [f.strip() for f in line.split(_SEP)]
        if len(fields) != width:
            raise CaseTableError(
                f"{source}:{number}: {len(fields)} fields, want {width} separated by {_SEP!r}: "
                f"{stripped[:120]}"
            )
        rows.append((number, fields))
    return rows


def parse_env(field: str, where: str) -> str | None:
    """- (unset) or a double-quoted value with \\t, \\n, \\\\ and \\" escapes."""
    if field == "-":
        return None
    if len(field) < 2 or not (field.startswith('"') and field.endswith('"')):
        raise CaseTableError(f"{where}: env {field!r} must be - or a value in double quotes")
    out: list[str] = []
    body = field[1:-1]
    i = 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            i += 1
            c = {"t": "\t", "n": "\n"}.get(body[i], body[i])
        out.append(c)
        i += 1
    return "".join(out)


def parse_selector_table(text: str, source: str) -> tuple[SelectorCase, ...]:
    cases = []
    for number, (name, fakes, env, bundle, expect) in _rows(text, source, 5):
        where = f"{source}:{number}"
        if not (expect == "in-tree" or expect.startswith(("chosen ", "error "))):
            raise CaseTableError(f"{where}: expect {expect!r}: use in-tree, chosen <name> or error <text>")
        cases.append(
            SelectorCase(
                name=name,
                fakes=_parse_fakes(fakes, where),
                env=parse_env(env, where),
                bundle=bundle,
                expect=expect,
            )
        )
    _unique([c.name for c in cases], source)
    return tuple(cases)


# --- the seam table -------------------------------------------------------------------------

# The header's ELIZA_ERR_* names without the prefix, as a seam step spells a failure.
ERROR_NAMES = (
    "NOT_IMPLEMENTED",
    "INVALID_ARG",
    "BUNDLE_INVALID",
    "FFI_FAULT",
    "OOM",
    "ABI_MISMATCH",
    "CANCELLED",
)
# The calls a seam step can make; those with a message (an out_error) may expect texts.
WITH_MESSAGE = frozenset({"prefill", "next", "cancel-during-next", "save_slot", "restore_slot"})
_STATUS_ONLY = frozenset({"cancel", "reset", "reset_keep"})
SEAM_CALLS = WITH_MESSAGE | _STATUS_ONLY | {"held", "close"}
_NEXT_KEYS = ("tokens", "text", "drafted", "accepted")
# The session words the test kit's fake reads (native/testkit/testkit.cpp parses them too,
# and refuses what it does not know; here a typo is named before anything runs).
SESSION_WORDS: Mapping[str, tuple[str, ...]] = {
    "keep": ("prefix", "none", "fail", "overcount"),
    "reset": ("ok", "fail"),
    "slots": ("default", "file"),
    "next": ("step", "block"),
    "errors": ("said", "quiet"),
}


def _int(word: str) -> int | None:
    body = word.removeprefix("-")
    return int(word) if body.isdigit() else None


def _ids_of(words: Sequence[str]) -> tuple[int, ...] | None:
    """Ids >= 0, or None when a word is not one."""
    ids = [_int(w) for w in words]
    return None if any(i is None or i < 0 for i in ids) else tuple(i for i in ids if i is not None)


@dataclass(frozen=True, kw_only=True)
class StepResult:
    """What one seam step observed: the call's status and message (next: what it wrote),
    or the fake's held tokens, or whether a close freed the session and the context."""

    rc: int = 0
    message: str = ""
    tokens: tuple[int, ...] = ()
    text: str = ""
    drafted: int = 0
    accepted: int = 0
    held: tuple[int, ...] | None = None  # None: no fake session open
    closed: bool = False


@dataclass(frozen=True, kw_only=True)
class SeamStep:
    call: str
    args: tuple[int, ...]
    expect: str  # as written, for messages
    status: int | str | None  # a count >= 0, an ERROR_NAMES name; None for held and close
    texts: tuple[str, ...] = ()
    tokens: tuple[int, ...] = ()  # next: what it must write; held: what the fake must hold
    text: str | None = None
    drafted: int = 0
    accepted: int = 0

    def judge(self, got: StepResult, status_names: Mapping[int, str]) -> str:
        """ "" when the step observed what it expects, else why not. status_names: the
        binding's code -> ELIZA_ERR_* name table (the header's codes are not repeated here)."""
        want = f"want {self.call} -> {self.expect}"
        if self.call == "held":
            return "" if got.held == self.tokens else f"{want}; the fake holds {_ids(got.held)}"
        if self.call == "close":
            return "" if got.closed else f"{want}; the session or the context's hold outlived the close"
        name = status_names.get(got.rc, str(got.rc)).removeprefix("ELIZA_ERR_")
        said = f"; got {got.rc if got.rc >= 0 else name}" + (f" {got.message!r}" if got.message else "")
        if isinstance(self.status, str):
            missing = [t for t in self.texts if t not in got.message]
            if name != self.status or got.rc >= 0:
                return want + said
            if self.call in WITH_MESSAGE and not got.message:
                return f"{want}; the failure carries no message"
            return f"{want}; the message lacks {missing[0]!r}{said}" if missing else ""
        if got.rc != self.status or got.message:
            return want + said
        if self.call in ("next", "cancel-during-next"):
            seen = (got.tokens, got.drafted, got.accepted)
            if seen != (self.tokens, self.drafted, self.accepted) or (
                self.text is not None and got.text != self.text
            ):
                return (
                    f"{want}; got tokens {_ids(got.tokens)} text {got.text!r} drafted {got.drafted} "
                    f"accepted {got.accepted}"
                )
        return ""


def _ids(ids: tuple[int, ...] | None) -> str:
    if ids is None:
        return "nothing (no fake session open)"
    return " ".join(map(str, ids)) or "none"


@dataclass(frozen=True, kw_only=True)
class SeamCase:
    name: str
    fakes: tuple[Fake, ...]
    env: str | None
    session: str  # passed to the test kit verbatim; "-" is every default
    steps: tuple[SeamStep, ...]


def _parse_fakes(field: str, where: str) -> tuple[Fake, ...]:
    parsed: list[Fake] = []
    for item in [] if field == "-" else field.split(","):
        parts = item.strip().split("/")
        if len(parts) != 4 or not parts[3].lstrip("-").isdigit():
            raise CaseTableError(f"{where}: fake {item.strip()!r} is not name/available/can_serve/rank")
        parsed.append(
            Fake(name=parts[0], available=parts[1] == "1", can_serve=parts[2] == "1", rank=int(parts[3]))
        )
    return tuple(parsed)


def _parse_session(field: str, where: str) -> str:
    for word in field.split():
        key, _, value = word.partition("=")
        drafted, _, accepted = value.partition(":")
        if word == "-" or value in SESSION_WORDS.get(key, ()):
            continue
        if key == "draft" and drafted.isdigit() and accepted.isdigit() and int(accepted) <= int(drafted):
            continue
        words = ", ".join(f"{k}={'|'.join(v)}" for k, v in SESSION_WORDS.items())
        raise CaseTableError(f"{where}: session word {word!r}: use - or draft=D:A (A <= D), {words}")
    return field


def _parse_step(text: str, where: str) -> SeamStep:
    step = text.strip()

    def bad(why: str) -> CaseTableError:
        return CaseTableError(f"{where}: step {step!r}: {why}")

    call_part, arrow, expect = step.partition("->")
    words = call_part.split()
    expect = expect.strip()
    if not arrow or not words or not expect:
        raise bad("not 'call -> expect'")
    call = words[0]
    if call not in SEAM_CALLS:
        raise bad(f"unknown call {call!r}; use {', '.join(sorted(SEAM_CALLS))}")
    args = tuple(_int(w) for w in words[1:])
    arity = {"prefill": len(args), "reset_keep": 1}.get(call, 0)
    if len(args) != arity or any(a is None for a in args):
        raise bad(f"{call} takes {arity} integer argument(s)" if call != "prefill" else "prefill takes ids")
    ints = tuple(a for a in args if a is not None)
    if call == "held":
        held = () if expect == "none" else _ids_of(expect.split())
        if held is None:
            raise bad("held -> ids >= 0, or none")
        return SeamStep(call=call, args=ints, expect=expect, status=None, tokens=held)
    if call == "close":
        if expect != "closed":
            raise bad("close -> closed")
        return SeamStep(call=call, args=ints, expect=expect, status=None)
    head, _, rest = expect.partition(" ")
    if head in ERROR_NAMES:
        texts = _texts(rest)
        if texts and call not in WITH_MESSAGE:
            raise bad(f"{call} has no message to hold texts")
        return SeamStep(call=call, args=ints, expect=expect, status=head, texts=texts)
    status = _int(head)
    if status is None or status < 0:
        raise bad(f"expect a count >= 0 or one of {', '.join(ERROR_NAMES)}")
    fields: dict[str, list[str]] = {}
    key = ""
    for word in rest.split():
        if word in _NEXT_KEYS and call in ("next", "cancel-during-next") and word not in fields:
            key = word
            fields[key] = []
        elif key:
            fields[key].append(word)
        else:
            raise bad(f"{word!r} after the status; only next takes {', '.join(_NEXT_KEYS)}, once each")
    tokens = _ids_of(fields.get("tokens", []))
    counts = {k: _ids_of(fields[k]) for k in ("drafted", "accepted") if k in fields}
    if (
        tokens is None
        or any(c is None or len(c) != 1 for c in counts.values())
        or len(fields.get("text", "-")) != 1
    ):
        raise bad("tokens take ids >= 0; text, drafted and accepted one word each")
    return SeamStep(
        call=call,
        args=ints,
        expect=expect,
        status=status,
        tokens=tokens,
        text=fields["text"][0] if "text" in fields else None,
        drafted=(counts.get("drafted") or (0,))[0],
        accepted=(counts.get("accepted") or (0,))[0],
    )


def parse_seam_table(text: str, source: str) -> tuple[SeamCase, ...]:
    cases = []
    for number, (name, fakes, env, session, steps) in _rows(text, source, 5):
        where = f"{source}:{number}"
        parsed = tuple(_parse_step(step, where) for step in steps.split(";"))
        cases.append(
            SeamCase(
                name=name,
                fakes=_parse_fakes(fakes, where),
                env=parse_env(env, where),
                session=_parse_session(session, where),
                steps=parsed,
            )
        )
        if not cases[-1].fakes:
            raise CaseTableError(f"{where}: a seam case needs a fake to serve its stream")
    _unique([c.name for c in cases], source)
    return tuple(cases)


@dataclass(frozen=True, kw_only=True)
class GateTemplate:
    name: str
    bundle: str
    env: str
    if_compiled_in: str
    otherwise: str
    where: str


def parse_gate_table(text: str, source: str) -> tuple[GateTemplate, ...]:
    rows = []
    for number, (name, bundle, env, if_in, otherwise) in _rows(text, source, 5):
        where = f"{source}:{number}"
        for expect in (if_in, otherwise):
            if expect.split(" ", 1)[0] not in _KINDS:
                raise CaseTableError(f"{where}: expect {expect!r}: use one of {', '.join(_KINDS)}")
        if bundle not in ("gguf", "corrupt-gguf", "only-{gate}"):
            raise CaseTableError(f"{where}: bundle {bundle!r}: use gguf, corrupt-gguf or only-{{gate}}")
        per_gate = "{gate}" in name
        if not per_gate and ("{gate}" in bundle + env or "{factory}" in env + if_in + otherwise):
            raise CaseTableError(f"{where}: {{gate}} / {{factory}} need {{gate}} in the case name")
        if env != "-" and env != "{factory}":
            parse_env(env, where)
        rows.append(
            GateTemplate(
                name=name, bundle=bundle, env=env, if_compiled_in=if_in, otherwise=otherwise, where=where
            )
        )
    _unique([r.name for r in rows], source)
    return tuple(rows)


def expand_gate_cases(
    templates: Sequence[GateTemplate], gates: Sequence[Gate], cell: Cell
) -> tuple[GateCase, ...]:
    """The cases of one cell: each {gate} template once per gate of the matrix."""
    out: list[GateCase] = []
    for t in templates:
        if "{gate}" not in t.name:
            out.append(_case(t, t.name, bundle=t.bundle, compiled_in=bool(cell.gates), factory=""))
            continue
        for gate in gates:
            out.append(
                _case(
                    t,
                    t.name.replace("{gate}", gate.id),
                    bundle=t.bundle.replace("{gate}", gate.id),
                    compiled_in=gate in cell.gates,
                    factory=gate.factory,
                )
            )
    return tuple(out)


def _case(t: GateTemplate, name: str, *, bundle: str, compiled_in: bool, factory: str) -> GateCase:
    expect = (t.if_compiled_in if compiled_in else t.otherwise).replace("{factory}", factory)
    kind, _, texts = expect.partition(" ")
    env = factory if t.env == "{factory}" else parse_env(t.env, t.where)
    return GateCase(name=name, bundle=bundle, env=env, kind=kind, texts=_texts(texts))


def _unique(names: Sequence[str], source: str) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise CaseTableError(f"{source}: case {name!r} appears twice")
        seen.add(name)


def plan_text(cases: Sequence[GateCase], bundles: Mapping[str, Path]) -> str:
    """The plan case_runner executes: name, bundle path, env (- or value), kind, texts;
    tab-separated, one case a line."""
    lines = ["# Written by eliza.formats.case_tables for case_runner fallthrough; one case a line."]
    for c in cases:
        fields = [
            c.name,
            str(bundles[c.bundle]),
            "-" if c.env is None else c.env,
            c.kind,
            " && ".join(c.texts),
        ]
        if any("\t" in f or "\n" in f for f in fields):
            raise CaseTableError(f"case {c.name}: a tab or newline cannot travel in a plan field")
        lines.append("\t".join(fields))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, kw_only=True)
class RunnerReport:
    """What case_runner printed: each case's result and the greedy outputs."""

    cases: tuple[CaseResult, ...]
    outputs: Mapping[str, tuple[str, ...]]  # case name -> "<ids> | <hex text>" per prompt
    summary: tuple[int, int] | None  # (ran, passed) as the runner counted; None: it never finished


def parse_runner_output(stdout: str, prefix: str = "") -> RunnerReport:
    """Lines "ok <case>", "FAIL <case>: <why>", "output <case> <i> <ids> | <hex>",
    "summary <ran> <passed>"; anything else (llama.cpp's log) is ignored."""
    cases: list[CaseResult] = []
    outputs: dict[str, list[str]] = {}
    summary: tuple[int, int] | None = None
    for line in stdout.splitlines():
        if line.startswith("ok "):
            cases.append(CaseResult(name=prefix + line[3:].strip(), passed=True, skipped=False, message=""))
        elif line.startswith("FAIL "):
            name, _, why = line[5:].partition(": ")
            cases.append(CaseResult(name=prefix + name.strip(), passed=False, skipped=False, message=why))
        elif line.startswith("output "):
            parts = line.split(" ", 3)
            if len(parts) == 4:
                outputs.setdefault(parts[1], []).append(parts[3])
        elif line.startswith("summary "):
            numbers = line.split()[1:3]
            if len(numbers) == 2 and all(n.isdigit() for n in numbers):
                summary = (int(numbers[0]), int(numbers[1]))
    return RunnerReport(
        cases=tuple(cases), outputs={k: tuple(v) for k, v in outputs.items()}, summary=summary
    )
