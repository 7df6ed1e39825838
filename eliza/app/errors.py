"""The errors a use case reports to the person who ran it, under one root.

Every error a session raises on purpose is an `ElizaError`; its class says what it means
and which exit status it ends with, and the noxfile and the CLI catch the root only:

- UsageError (exit 2): their input is wrong (an option, a path, an environment variable,
  the matrix); the message says what and how to fix it, raised before any work starts, so
  their results stay as they were.
- NotHere (a skip, or exit 3 under --strict): this host cannot do what was asked (a
  platform it cannot build or run).
- Failed (exit 1): the work ran and what it checked failed (a check, a build, a CI job).

A tool or a build that breaks in the middle of verify is neither: it becomes error
evidence for the checks it prevented (see eliza.app.executor), and verify ends Failed.
"""

from __future__ import annotations


class ElizaError(Exception):
    """The root: str() is the one line the person sees; `exit_code` is the status."""

    exit_code = 1


class UsageError(ElizaError):
    """Bad input from the user."""

    exit_code = 2


class NotHere(ElizaError):
    """This host lacks what a platform needs; the message says what and why."""

    exit_code = 3


class Failed(ElizaError):
    """What ran failed: checks, a build, a CI job, a refused rewrite, fuzz findings."""

    exit_code = 1


class ChecksFailed(Failed):
    pass


class BuildFailed(Failed):
    """A build ran and failed; the message names the cell, the log and its first errors."""


class CiFailed(Failed):
    """A CI job could not do its work; the message says which and why."""


class BundleUnusable(Failed):
    """A bundle's pinned model cannot be had (a chunk missing or not its sha256): nothing
    ran, no evidence was written; the message names the file, its pin and the repair."""
