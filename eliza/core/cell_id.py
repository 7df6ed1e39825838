"""A cell's identity as a value: platform, gate set and build variant.

Inside `eliza` a cell travels as a `CellId` (or as the matrix's `Cell`, whose `ref` is
one); the string form "<platform>.<gates>[@<variant>]" appears only at the edges: argv,
evidence JSON, file names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CellId", "CellIdError"]

_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")


class CellIdError(ValueError):
    """A string that is not a cell id; the message says which part is wrong."""


@dataclass(frozen=True, order=True)
class CellId:
    platform: str
    gates: tuple[str, ...] = ()  # sorted gate ids; () is the no-gate cell
    variant: str | None = None  # None: the default (release) variant

    def __post_init__(self) -> None:
        if tuple(sorted(set(self.gates))) != self.gates:
            raise CellIdError(f"gates {self.gates!r}: must be sorted and unique")

    @classmethod
    def parse(cls, text: str) -> CellId:
        """ "linux-cpu.litert+mlx", "linux-cpu.none@asan-ubsan" -> CellId."""
        platform, dot, rest = text.partition(".")
        if not dot or not platform:
            raise CellIdError(f"{text!r}: a cell id is <platform>.<gates>[@<variant>], e.g. linux-cpu.none")
        key, at, variant = rest.partition("@")
        if at and not variant:
            raise CellIdError(f"{text!r}: nothing after '@' (the build variant)")
        gates = () if key == "none" else tuple(key.split("+"))
        for part in (platform, *gates, *([variant] if at else [])):
            if not _NAME.match(part):
                raise CellIdError(f"{text!r}: {part!r} is not a platform, gate or variant name")
        if tuple(sorted(gates)) != gates:
            raise CellIdError(f"{text!r}: gates must be in sorted order ({'+'.join(sorted(gates))})")
        return cls(platform=platform, gates=gates, variant=variant if at else None)

    @property
    def gate_key(self) -> str:
        return "+".join(self.gates) or "none"

    @property
    def key(self) -> str:
        """The cell within its platform: "<gates>[@<variant>]"."""
        return self.gate_key + (f"@{self.variant}" if self.variant is not None else "")

    @property
    def is_reference(self) -> bool:
        """The platform's reference cell: no gate, the default variant."""
        return not self.gates and self.variant is None

    def __str__(self) -> str:
        return f"{self.platform}.{self.key}"
