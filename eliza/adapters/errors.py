"""The root of the outside world's failures: a tool that is missing, crashed or said
something unexpected. Verify turns any of them into error evidence for the checks they
prevented (eliza.app.services.run.RUN_ERRORS), never a traceback that loses other cells."""

from __future__ import annotations


class ToolError(RuntimeError):
    """A program, library or service this project drives failed; the message says which."""
