"""How many processes `nox -s tests` runs pytest in (eliza.core.suite)."""

from __future__ import annotations

import pytest

from eliza.adapters import proc
from eliza.core.suite import (
    MAX_PROCESSES,
    bytecode_env,
    chosen_tiers,
    processes,
    pytest_argv,
    pytest_env,
    side_by_side_env,
)


@pytest.mark.parametrize(
    ("argv", "tiers"),
    [
        ([], {"unit", "cell", "e2e"}),
        (["--tier", "slow"], {"slow"}),
        (["--tier=unit", "-x"], {"unit"}),
        (["--tier", "unit", "--tier", "e2e"], {"unit", "e2e"}),
        (["--tier", "all"], {"unit", "cell", "e2e", "slow"}),
    ],
)
def test_the_tiers_named_or_the_default_ones(argv: list[str], tiers: set[str]) -> None:
    assert chosen_tiers(argv) == tiers


def test_the_default_tiers_run_in_a_process_per_cpu_up_to_the_cap() -> None:
    assert processes([], cpus=2, xdist_installed=True) == 2
    assert processes(["-k", "abi"], cpus=64, xdist_installed=True) == MAX_PROCESSES
    assert pytest_argv([], cpus=2, xdist_installed=True)[:5] == [
        "-n",
        "2",
        "--dist",
        "loadgroup",
        "--no-loadscope-reorder",
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--tier", "slow"],
        ["--tier", "all"],
        ["--tier", "unit", "--tier=slow"],
        ["-n", "3"],
        ["-n0"],
        ["--numprocesses=2"],
        ["--dist", "load"],
        ["-p", "no:xdist"],
    ],
)
def test_the_slow_tier_or_an_explicit_choice_is_left_alone(argv: list[str]) -> None:
    assert processes(argv, cpus=8, xdist_installed=True) == 1
    assert pytest_argv(argv, cpus=8, xdist_installed=True)[1:] == argv  # only --durations added


def test_one_cpu_or_no_xdist_is_plain_pytest() -> None:
    assert processes([], cpus=1, xdist_installed=True) == 1
    assert processes([], cpus=8, xdist_installed=False) == 1
    assert pytest_argv(["-x"], cpus=8, xdist_installed=False) == ["--durations=15", "-x"]


def test_processes_side_by_side_decode_with_one_thread_unless_the_caller_chose() -> None:
    assert pytest_env([], {}, cpus=2, xdist_installed=True) == {"ELIZA_N_THREADS": "1"}
    assert pytest_env([], {"ELIZA_N_THREADS": "4"}, cpus=2, xdist_installed=True) == {}
    assert pytest_env(["--tier", "slow"], {}, cpus=2, xdist_installed=True) == {}
    assert pytest_env([], {}, cpus=1, xdist_installed=True) == {}


def test_the_suite_writes_bytecode_where_the_environment_says_not_to() -> None:
    assert bytecode_env({"PYTHONDONTWRITEBYTECODE": "1"}) == {"PYTHONDONTWRITEBYTECODE": ""}
    assert bytecode_env({}) == {}
    quiet = {"ELIZA_N_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    assert pytest_env([], quiet, cpus=2, xdist_installed=True) == {"PYTHONDONTWRITEBYTECODE": ""}
    assert pytest_env([], {**quiet, "PYTHONDONTWRITEBYTECODE": ""}, cpus=2, xdist_installed=True) == {}
    assert pytest_env(["--tier", "slow"], {"PYTHONDONTWRITEBYTECODE": "x"}, cpus=1, xdist_installed=True) == {
        "PYTHONDONTWRITEBYTECODE": ""
    }


def test_checks_side_by_side_decode_with_their_share_of_the_cores() -> None:
    # verify's checks: `--jobs N` processes on the host's cores, each its share
    assert side_by_side_env(2, {}, cpus=2) == {"ELIZA_N_THREADS": "1"}
    assert side_by_side_env(4, {}, cpus=16) == {"ELIZA_N_THREADS": "4"}
    assert side_by_side_env(8, {}, cpus=2) == {"ELIZA_N_THREADS": "1"}
    # alone, a process keeps the library's default; the caller's budget always wins
    assert side_by_side_env(1, {}, cpus=16) == {}
    assert side_by_side_env(2, {"ELIZA_N_THREADS": "2"}, cpus=2) == {}


def test_the_children_of_a_verify_get_the_overlay_under_their_callers_own_values() -> None:
    show = ["sh", "-c", 'echo "${ELIZA_N_THREADS:-unset}"']
    with proc.children_environment({"ELIZA_N_THREADS": "1"}):
        assert proc.run(show).stdout.strip() == "1"
        # a wall-time round names its own threads
        assert proc.run(show, extra_env={"ELIZA_N_THREADS": "3"}).stdout.strip() == "3"
    assert proc.run(show, env={}).stdout.strip() == "unset"  # gone after the block
