"""The simulated CPU's counts kept across verifies, in the cache (`<cache>/simulated-counts`).

A side's counts are a deterministic function of what its key names (eliza.app.checks.perf
.simulated_key: the bench tool's and the library's bytes, the bundle's and the prompts'
contents, the settings, the environment, the instrument, and the code that runs and reads
the simulator). The library builds byte for byte the same in every checkout, so the same
key in another verify, or in a fresh clone on the same cache, is the same run: it is read
back instead of running callgrind again (a Gemma side is about a minute). Only the
simulated CPU is kept: wall-time rounds are never reused.

Each entry is `<key>.json` (the counts and the token counts) beside `<key>.callgrind.out`
and `<key>.jsonl` (the profile and the bench records it was read from), which a hit copies
to where the run would have written them, so `callgrind_annotate` still finds them in
build/bench. An entry that cannot be read is a miss, said in one line, and is written
again; nothing here is trusted that the run could not have measured itself: delete the
folder to count again.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from eliza.core.simulated_cpu import PhaseCost, SimulatedRun
from eliza.formats.files import atomic_write_text, atomic_write_with

_log = logging.getLogger("eliza.cache")

FOLDER = "simulated-counts"
FORMAT = 1
_PHASES = ("total", "prefill", "decode")


@dataclass(frozen=True)
class CountsCache:
    folder: Path

    def load(self, key: str, out: Path, name: str) -> SimulatedRun | None:
        """The counts kept under `key`, their profile and records copied to
        `out/<name>.callgrind.out` and `out/<name>.jsonl`; None when there are none."""
        entry = self.folder / f"{key}.json"
        profile, records = self.folder / f"{key}.callgrind.out", self.folder / f"{key}.jsonl"
        if not entry.exists():
            return None
        try:
            data = json.loads(entry.read_text(encoding="utf-8"))
            if data.get("format") != FORMAT or data.get("key") != key:
                _repairing(entry, f"of format {data.get('format')!r} and key {data.get('key')!r}")
                return None
            run = SimulatedRun(
                **{phase: PhaseCost(**{k: int(v) for k, v in data[phase].items()}) for phase in _PHASES},
                prompt_tokens=int(data["prompt_tokens"]),
                decoded_tokens=int(data["decoded_tokens"]),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            _repairing(entry, f"unreadable ({type(exc).__name__}: {exc})")
            return None
        missing = [p.name for p in (profile, records) if not p.is_file()]
        if missing:
            _repairing(entry, f"without its {' and '.join(missing)}")
            return None
        _copy(profile, out / f"{name}.callgrind.out")
        _copy(records, out / f"{name}.jsonl")
        return run

    def save(self, key: str, run: SimulatedRun, profile: Path, records: Path) -> None:
        """Keeps `run` under `key` with the files it was read from; the entry's json is
        written last, so an interrupted save leaves no entry that a load would take."""
        _copy(profile, self.folder / f"{key}.callgrind.out")
        _copy(records, self.folder / f"{key}.jsonl")
        data = {"format": FORMAT, "key": key, **asdict(run)}
        atomic_write_text(self.folder / f"{key}.json", json.dumps(data, indent=2) + "\n")


def _repairing(entry: Path, what: str) -> None:
    """A damaged entry is a miss that the run writes again: said in one line."""
    _log.warning("%s: %s; the simulated CPU counts again and the entry is written anew", entry, what)


def _copy(source: Path, target: Path) -> None:
    """Whole or not at all, as every file the project writes: another verify sharing the
    cache reads the old file or the new one, never half of one."""

    def fill(part: Path) -> None:
        shutil.copyfile(source, part)

    atomic_write_with(target, fill)
