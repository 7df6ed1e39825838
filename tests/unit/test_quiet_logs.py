"""A session's output: nox's lines and ours pass, a third-party logger's only from warnings
up (the gguf writer's "Writing the following files" is not for a person)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from eliza.app.logs import quiet_third_party


@pytest.fixture()
def handler() -> Iterator[logging.Handler]:
    root = logging.getLogger()
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(f"{record.name}:{record.getMessage()}")

    collect = Collect()
    collect.seen = seen  # type: ignore[attr-defined]
    root.addHandler(collect)
    saved = root.level
    root.setLevel(logging.DEBUG)
    yield collect
    root.removeHandler(collect)
    root.setLevel(saved)


def test_third_party_info_is_dropped_and_ours_and_warnings_pass(handler: logging.Handler) -> None:
    quiet_third_party()
    quiet_third_party()  # idempotent: one filter per handler
    logging.getLogger("gguf.gguf_writer").info("Writing the following files:")
    logging.getLogger("matplotlib").debug("CONFIGDIR=/root/.config/matplotlib")
    logging.getLogger("gguf.gguf_writer").warning("a warning a person needs")
    logging.getLogger("nox").info("Running session verify")
    logging.getLogger("eliza.app").info("ours")
    assert handler.seen == [  # type: ignore[attr-defined]
        "gguf.gguf_writer:a warning a person needs",
        "nox:Running session verify",
        "eliza.app:ours",
    ]
    assert len(handler.filters) == 1
