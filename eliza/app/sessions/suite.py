"""`nox -s tests`: pytest over the tiers asked for, in as many processes as the host and
the tiers allow (eliza.core.suite)."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence

from eliza.core.suite import pytest_argv, pytest_env


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def pytest_command(posargs: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The pytest command line, and what it adds to this process's environment."""
    xdist = importlib.util.find_spec("xdist") is not None
    cpus = usable_cpus()
    argv = pytest_argv(posargs, cpus=cpus, xdist_installed=xdist)
    return [sys.executable, "-m", "pytest", *argv], pytest_env(
        posargs, os.environ, cpus=cpus, xdist_installed=xdist
    )
