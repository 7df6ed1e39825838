"""What reaches the person from Python's logging: nox's own lines and ours, and from any
other library only warnings and errors. A session prints what a person needs; the gguf
writer's "Writing the following files" or matplotlib's CONFIGDIR are not that."""

from __future__ import annotations

import logging

OWN_LOGGERS = ("nox", "eliza")


def _ours_or_serious(record: logging.LogRecord) -> bool:
    own = any(record.name == n or record.name.startswith(f"{n}.") for n in OWN_LOGGERS)
    return own or record.levelno >= logging.WARNING


def quiet_third_party() -> None:
    """Filters every handler of the root logger (nox's stream handler, set up before the
    noxfile is read): a third-party logger's info and debug lines are dropped."""
    for handler in logging.getLogger().handlers:
        if _ours_or_serious not in handler.filters:
            handler.addFilter(_ours_or_serious)
