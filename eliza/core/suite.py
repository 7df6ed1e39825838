"""How `nox -s tests` runs pytest: the default tiers (unit, cell, e2e) in several processes
(pytest-xdist) handing out whole groups (tests/conftest.py says which), the slow tier in one.

The slow tier stays serial: its tests are cold builds and measurements (reproducibility,
the sanitizer cell, fuzzing budgets), which processes side by side would only slow down and
make meaningless. An explicit `-n`, `--dist` or `-p no:xdist` among the arguments wins.

Processes side by side decode with one thread each (ELIZA_N_THREADS=1, unless the caller
set it): ggml's decode threads spin at barriers, so two processes that each start a thread
per CPU wait on each other's descheduled threads, and a bench of seconds takes a minute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eliza.core.host import HostFacts, chosen_vulkan_device, vulkan_environment

PARALLEL_TIERS = frozenset({"unit", "cell", "e2e"})
MAX_PROCESSES = 4  # beyond this the e2e tests queue on the checkout's and the Conan home's locks
SLOWEST_SHOWN = 15  # so a suite that grows toward CI's time limit shows where


def chosen_tiers(argv: Sequence[str]) -> frozenset[str]:
    """The tiers `--tier` names in pytest's arguments (none named: the default ones)."""
    named: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--tier" and i + 1 < len(argv):
            named.append(argv[i + 1])
        elif arg.startswith("--tier="):
            named.append(arg.split("=", 1)[1])
    if "all" in named:
        return PARALLEL_TIERS | {"slow"}
    return frozenset(named) or PARALLEL_TIERS


def _chooses_processes(argv: Sequence[str]) -> bool:
    for i, arg in enumerate(argv):
        if arg in ("-n", "--numprocesses", "--dist") or arg.startswith(("--numprocesses=", "--dist=")):
            return True
        if arg.startswith("-n") and arg[2:].isdigit():
            return True
        if arg == "-p" and i + 1 < len(argv) and argv[i + 1] == "no:xdist":
            return True
    return False


def processes(argv: Sequence[str], *, cpus: int, xdist_installed: bool) -> int:
    """How many pytest processes the suite runs in (1: pytest alone, no xdist)."""
    if not xdist_installed or cpus < 2 or _chooses_processes(argv):
        return 1
    if not chosen_tiers(argv) <= PARALLEL_TIERS:
        return 1
    return min(cpus, MAX_PROCESSES)


def pytest_argv(argv: Sequence[str], *, cpus: int, xdist_installed: bool) -> list[str]:
    """pytest's arguments for `nox -s tests -- ARGV`."""
    n = processes(argv, cpus=cpus, xdist_installed=xdist_installed)
    # The groups go out in the order the suite's conftest sorts them (its heaviest first),
    # not xdist's own order by number of tests, which leaves a one-test end-to-end group of
    # a minute for last while the other processes have run out of work.
    parallel = ["-n", str(n), "--dist", "loadgroup", "--no-loadscope-reorder"] if n > 1 else []
    return [*parallel, f"--durations={SLOWEST_SHOWN}", *argv]


def side_by_side_env(processes: int, env: Mapping[str, str], *, cpus: int) -> dict[str, str]:
    """What the environment of `processes` decoding side by side on `cpus` adds to `env`:
    each its share of the cores as decode threads (at least one), unless the caller chose a
    thread budget. A process left ggml's default, a thread per CPU, spins at its barriers
    while its threads wait for cores the others hold: a tiny model's bench of 1 s took 16 s
    beside one other process on 2 cores."""
    if processes < 2 or "ELIZA_N_THREADS" in env:
        return {}
    return {"ELIZA_N_THREADS": str(max(1, cpus // processes))}


def device_environment(host: HostFacts, shares: Mapping[str, str]) -> dict[str, str]:
    """What the children of a run are told about the host's accelerator: the Vulkan device
    the linux-vulkan cells run on (eliza.core.host.vulkan_environment), with each process's
    share of the cores (`shares`: side_by_side_env's) for a software device's threads."""
    threads = shares.get("ELIZA_N_THREADS")
    return vulkan_environment(chosen_vulkan_device(host.vulkan_devices), int(threads) if threads else None)


def pytest_env(
    argv: Sequence[str], env: Mapping[str, str], *, cpus: int, xdist_installed: bool
) -> dict[str, str]:
    """What the suite's environment adds to `env`: one decode thread per process when there
    are several processes and the caller chose no thread budget, and bytecode written
    (bytecode_env)."""
    several = processes(argv, cpus=cpus, xdist_installed=xdist_installed)
    return side_by_side_env(several, env, cpus=min(cpus, several)) | bytecode_env(env)


def bytecode_env(env: Mapping[str, str]) -> dict[str, str]:
    """Python's bytecode written where `env` says not to (PYTHONDONTWRITEBYTECODE, which
    Python reads as unset when empty). The suite starts Python some hundreds of times
    (sessions, tools, the runtimes' runners) and a verify some tens, each compiling the
    project's modules again without it, and each pytest process rewrites every test
    module's asserts: 2-3 s a process, and 14 to 19 s of the suite's 4 minutes on 2 cores
    (measured at 7027ece)."""
    return {"PYTHONDONTWRITEBYTECODE": ""} if env.get("PYTHONDONTWRITEBYTECODE") else {}
