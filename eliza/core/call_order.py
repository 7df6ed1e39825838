"""The order a verify starts its runner calls in: the longest first, by what each took the
last time (the shareable part: its seconds less the wall-time windows it measured alone).

Why: checks run side by side, and a measurement alone waits until no call runs, so the
windows run last, one after another. Started in plan order, a long call of the last
platform (linux-arm64's identity runs under qemu, a minute in one call) ran by itself after
the others were done, with a core idle. Started longest first, the short calls fill the
cores at the end instead (longest processing time first). A call never timed starts first,
in plan order: it may be the longest. Output and evidence keep the plan's order whatever
the start order (eliza.app.executor).

Pure: the seconds come in, nothing is read here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def start_order(calls: Sequence[str], seconds: Mapping[str, float]) -> list[str]:
    """`calls` (in plan order) in the order to start them: those `seconds` does not know
    first, in plan order, then the known ones longest first (a tie in plan order)."""
    unknown = [c for c in calls if c not in seconds]
    known = sorted((c for c in calls if c in seconds), key=lambda c: -seconds[c])
    return [*unknown, *known]


def remembered(before: Mapping[str, float], now: Mapping[str, float]) -> dict[str, float]:
    """What to remember for the next verify: this one's seconds, and the earlier ones of
    calls it did not run (a verify of one cell forgets nothing of the others)."""
    return {**before, **{call: round(s, 1) for call, s in now.items()}}
