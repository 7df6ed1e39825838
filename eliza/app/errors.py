"""The errors a use case reports to the person who ran it.

UsageError: their input is wrong (an option, a path, an environment variable, the matrix);
the message says what and how to fix it, the command exits 2 before any work starts and
leaves their results as they were. NotHere: this host cannot do what was asked (a
platform it cannot build or run); a skip, or an error under --strict.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user; str() is the one line they see."""


class NotHere(RuntimeError):
    """This host lacks what a platform needs; the message says what and why."""
