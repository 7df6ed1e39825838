"""Callgrind's output file (valgrind's `--tool=callgrind`, format version 1) read into the
totals of each event and the inclusive cost of every call that crosses from one object
into another (a program calling into a shared library it loaded).

The perf check's simulated instrument writes these files with `--compress-strings=no` and
`--compress-pos=no`, so names stand in full on every line; the reader also accepts the
compressed forms ("(3) name" defines id 3, "(3)" refers to it) and relative positions, so
a file written with valgrind's defaults reads the same.

Format: valgrind's docs/callgrind-format ("Callgrind Format Specification"). What matters
here: `events:` names the cost columns; `ob=`/`fn=` set the current object and function;
`cob=`/`cfn=` name the callee of the next `calls=` line, whose following cost line is the
call's inclusive cost (not the caller's own); `summary:`/`totals:` give the totals.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["CallgrindError", "CallgrindProfile", "load_profile", "parse_profile"]


class CallgrindError(ValueError):
    """A file that is not callgrind output, or that this reader cannot follow."""


@dataclass(frozen=True, kw_only=True)
class CallgrindProfile:
    events: tuple[str, ...]  # "Ir", "Dr", "Dw", "I1mr", ... as the file names them
    totals: Mapping[str, int]  # event -> the whole run's count
    # callee function -> event -> summed inclusive cost of the calls into it that come from
    # another object (the program calling the library), and how many such calls there were
    crossing: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    crossing_calls: Mapping[str, int] = field(default_factory=dict)
    creator: str = ""  # "callgrind-3.19.0"

    def inclusive(self, function: str) -> dict[str, int]:
        """The inclusive cost of every call into `function` from another object (zeros when
        it was never called so)."""
        got = self.crossing.get(function, {})
        return {e: int(got.get(e, 0)) for e in self.events}


class _Names:
    """Callgrind's name compression: "(id) name" defines, "(id)" refers (id a number), else a
    plain name."""

    def __init__(self) -> None:
        self.by_id: dict[str, str] = {}

    def resolve(self, value: str, where: str) -> str:
        value = value.strip()
        close = value.find(")")
        key = value[1:close] if value.startswith("(") and close > 1 else ""
        if not key.isdigit():  # a plain name, "(below main)" among them
            return value
        rest = value[close + 1 :].strip()
        if rest:
            self.by_id[key] = rest
            return rest
        if key not in self.by_id:
            raise CallgrindError(f"{where}: name id ({key}) used before it was defined")
        return self.by_id[key]


def _costs(fields: list[str], positions: int, n_events: int, where: str) -> list[int]:
    """A cost line's event counts (the leading position columns skipped; missing trailing
    counts are zero, as the format allows)."""
    values = fields[positions:]
    if len(values) > n_events:
        raise CallgrindError(f"{where}: {len(values)} counts for {n_events} events")
    try:
        counts = [int(v) for v in values]
    except ValueError as exc:
        raise CallgrindError(f"{where}: a cost line that is not numbers: {' '.join(fields)!r}") from exc
    return counts + [0] * (n_events - len(counts))


def parse_profile(lines: Iterable[str], source: str) -> CallgrindProfile:
    events: list[str] = []
    positions = 1
    totals: list[int] | None = None
    summed: list[int] | None = None  # the self costs, when the file gives no totals line
    creator = ""
    objects, files, functions = _Names(), _Names(), _Names()
    ob = ""
    callee_ob: str | None = None
    callee_fn: str | None = None
    pending_call: tuple[str, str, int] | None = None  # (callee, callee object, calls)
    crossing: dict[str, list[int]] = {}
    crossing_calls: dict[str, int] = {}
    seen_header = False
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\n")
        where = f"{source}:{number}"
        if not line or line.startswith("#"):
            seen_header = seen_header or line.startswith("# callgrind format")
            continue
        head, sep, value = line.partition("=")
        if sep and head in ("ob", "fl", "fi", "fe", "fn", "cob", "cfi", "cfl", "cfn", "jump", "jcnd"):
            if head == "ob":
                ob = objects.resolve(value, where)
            elif head in ("fl", "fi", "fe", "cfi", "cfl"):
                files.resolve(value, where)
            elif head == "fn":
                functions.resolve(value, where)
                callee_ob = callee_fn = None
            elif head == "cob":
                callee_ob = objects.resolve(value, where)
            elif head == "cfn":
                callee_fn = functions.resolve(value, where)
            continue
        if sep and head == "calls":
            if callee_fn is None:
                raise CallgrindError(f"{where}: calls= without a cfn= naming the callee")
            try:
                count = int(value.split()[0])
            except (ValueError, IndexError) as exc:
                raise CallgrindError(f"{where}: calls= without a count: {line!r}") from exc
            pending_call = (callee_fn, callee_ob if callee_ob is not None else ob, count)
            continue
        key, colon, rest = line.partition(":")
        if colon and key in ("version", "creator", "pid", "cmd", "part", "desc", "positions", "events",
                             "summary", "totals", "thread", "event"):  # fmt: skip
            seen_header = True
            if key == "creator":
                creator = rest.strip()
            elif key == "positions":
                positions = len(rest.split())
            elif key == "events":
                events = rest.split()
            elif key in ("summary", "totals"):
                counts = _costs(rest.split(), 0, len(events), where)
                totals = counts if totals is None or key == "totals" else totals
            continue
        if not events:
            raise CallgrindError(
                f"{where}: a cost line before any 'events:' line"
                + ("" if seen_header else " (is this a callgrind output file?)")
            )
        counts = _costs(line.split(), positions, len(events), where)
        if pending_call is not None:
            callee, callee_object, count = pending_call
            pending_call = None
            if callee_object != ob:
                into = crossing.setdefault(callee, [0] * len(events))
                for i, c in enumerate(counts):
                    into[i] += c
                crossing_calls[callee] = crossing_calls.get(callee, 0) + count
            callee_ob = callee_fn = None
            continue
        summed = [a + b for a, b in zip(summed, counts, strict=True)] if summed else counts
    if not events:
        raise CallgrindError(f"{source}: no 'events:' line: not a callgrind output file")
    whole = totals if totals is not None else (summed or [0] * len(events))
    return CallgrindProfile(
        events=tuple(events),
        totals=dict(zip(events, whole, strict=True)),
        crossing={fn: dict(zip(events, c, strict=True)) for fn, c in crossing.items()},
        crossing_calls=crossing_calls,
        creator=creator,
    )


def load_profile(path: Path) -> CallgrindProfile:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return parse_profile(f, str(path))
    except OSError as exc:
        raise CallgrindError(f"{path}: cannot read the callgrind output ({exc.strerror})") from exc
