"""Argument parsing shared by every session and command: a mistake is a UsageError (one
line, exit 2), help shows defaults, and every session that can skip takes --strict."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import NoReturn

from eliza.app.errors import UsageError

_TRUE_WORDS = frozenset({"1", "true", "yes", "on"})


class Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of printing usage and exiting."""

    def __init__(self, prog: str, description: str | None = None, *, skippable: bool = False) -> None:
        # No abbreviations: a mistyped option ("--max-token") must be an error, not a guess.
        super().__init__(
            prog=prog,
            description=description,
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
            allow_abbrev=False,
        )
        if skippable:
            self.add_argument(
                "--strict",
                action="store_true",
                help="fail instead of skipping when this host cannot build or run what was asked "
                "(also ELIZA_STRICT=1/true/yes/on)",
            )
        self.add_argument("-v", "--verbose", action="store_true", help="show tool output as it runs")

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see `{self.prog} --help`)")


def strict_requested(argv: Sequence[str], env: Mapping[str, str]) -> bool:
    """--strict among the arguments, or ELIZA_STRICT set to a true word."""
    return "--strict" in argv or env.get("ELIZA_STRICT", "").strip().lower() in _TRUE_WORDS


def positive(name: str, value: int) -> int:
    if value < 1:
        raise UsageError(f"{name} {value}: must be at least 1")
    return value
