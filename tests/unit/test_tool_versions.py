"""The memo of `--version` answers: one question per executable file, across sessions;
asked again when the file changes; never remembered for a script, a program called by
another name, or a failed answer."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from eliza.adapters.tool_versions import FORMAT, ToolVersions

ELF = shutil.which("true") or "/bin/true"


class Program:
    """The injected way of running a program: counts the questions, answers what it is told."""

    def __init__(self, answer: str = "tool 1.0\n", status: int = 0) -> None:
        self.answer, self.status, self.asked = answer, status, 0

    def __call__(self, argv: list[str]) -> tuple[int, str]:
        self.asked += 1
        return self.status, self.answer


@pytest.fixture()
def tool(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "tool"
    path.parent.mkdir()
    shutil.copy2(os.path.realpath(ELF), path)
    return path


def test_a_native_program_is_asked_once_and_a_later_session_reads_the_answer(
    tool: Path, tmp_path: Path
) -> None:
    memo, program = ToolVersions(tmp_path / "memo.json"), Program()
    assert memo.ask([str(tool), "--version"], program) == (0, "tool 1.0\n")
    assert memo.ask([str(tool), "--version"], program) == (0, "tool 1.0\n")
    assert program.asked == 1
    memo.save()
    later = Program("never heard\n")
    assert ToolVersions(tmp_path / "memo.json").ask([str(tool), "--version"], later) == (0, "tool 1.0\n")
    assert later.asked == 0
    # Other arguments are another question.
    assert ToolVersions(tmp_path / "memo.json").ask([str(tool), "-v"], later) == (0, "never heard\n")


def test_a_changed_program_is_asked_again(tool: Path, tmp_path: Path) -> None:
    memo = ToolVersions(tmp_path / "memo.json")
    memo.ask([str(tool), "--version"], Program("tool 1.0\n"))
    memo.save()
    tool.write_bytes(tool.read_bytes() + b"\0upgraded")  # an upgrade in place: new size and times
    upgraded = Program("tool 2.0\n")
    assert ToolVersions(tmp_path / "memo.json").ask([str(tool), "--version"], upgraded) == (0, "tool 2.0\n")
    assert upgraded.asked == 1


def test_scripts_other_names_and_failures_are_always_asked(tool: Path, tmp_path: Path) -> None:
    script = tmp_path / "bin" / "shim"
    script.write_text('#!/bin/sh\nexec real-tool "$@"\n')
    script.chmod(0o755)
    masquerade = tmp_path / "bin" / "c++"
    masquerade.symlink_to(tool)  # a ccache-style link: the binary decides by its name
    memo = ToolVersions(tmp_path / "memo.json")
    for argv, program in (
        ([str(script), "--version"], Program()),
        ([str(masquerade), "--version"], Program()),
        ([str(tool), "--version"], Program("no such option\n", status=1)),
        ([str(tmp_path / "bin" / "missing"), "--version"], Program()),
    ):
        memo.ask(argv, program)
        memo.ask(argv, program)
        assert program.asked == 2, argv
    memo.save()
    assert not (tmp_path / "memo.json").exists()  # nothing was worth remembering


def test_a_link_of_the_same_name_is_remembered_under_the_file_it_resolves_to(
    tool: Path, tmp_path: Path
) -> None:
    alternatives = tmp_path / "usr-bin"
    alternatives.mkdir()
    (alternatives / "tool").symlink_to(tool)  # /usr/bin/javac -> /usr/lib/jvm/.../bin/javac
    memo, program = ToolVersions(tmp_path / "memo.json"), Program()
    memo.ask([str(alternatives / "tool"), "--version"], program)
    memo.ask([str(alternatives / "tool"), "--version"], program)
    assert program.asked == 1


def test_a_broken_or_foreign_memo_is_empty_and_the_next_save_repairs_it(tool: Path, tmp_path: Path) -> None:
    path = tmp_path / "memo.json"
    for text in ("{not json", json.dumps({"format": "other/1", "answers": {}}), json.dumps([1, 2])):
        path.write_text(text)
        program = Program()
        memo = ToolVersions(path)
        assert memo.ask([str(tool), "--version"], program) == (0, "tool 1.0\n")
        assert program.asked == 1
    memo.save()
    data = json.loads(path.read_text())
    assert data["format"] == FORMAT and list(data["answers"].values()) == ["tool 1.0\n"]


def test_save_keeps_what_another_session_saved_and_drops_answers_of_files_now_gone(
    tool: Path, tmp_path: Path
) -> None:
    other = tmp_path / "bin" / "other"
    shutil.copy2(tool, other)
    path = tmp_path / "memo.json"
    mine, theirs = ToolVersions(path), ToolVersions(path)
    mine.ask([str(tool), "--version"], Program("tool 1.0\n"))
    theirs.ask([str(other), "--version"], Program("other 3.1\n"))
    theirs.save()
    mine.save()
    assert sorted(json.loads(path.read_text())["answers"].values()) == ["other 3.1\n", "tool 1.0\n"]
    other.unlink()
    again = ToolVersions(path)
    again.ask([str(tool), "--version"], Program())  # nothing new heard: nothing written
    again.ask([str(tool), "-v"], Program("tool 1.0 (verbose)\n"))
    again.save()
    assert sorted(json.loads(path.read_text())["answers"].values()) == ["tool 1.0\n", "tool 1.0 (verbose)\n"]


def test_the_host_probe_says_the_same_with_the_memo_as_without(tmp_path: Path) -> None:
    from eliza.adapters.host_probe import probe_host

    programs = ("java", "javac", "node")
    plain = probe_host(os.environ, programs)
    first = probe_host(os.environ, programs, versions=ToolVersions(tmp_path / "memo.json"))
    again = probe_host(os.environ, programs, versions=ToolVersions(tmp_path / "memo.json"))
    assert plain.as_dict() == first.as_dict() == again.as_dict()
    memo = tmp_path / "memo.json"
    keys = json.loads(memo.read_text())["answers"] if memo.exists() else {}
    remembered = {json.loads(key)[0] for key in keys}
    for name, found in plain.programs.items():  # those that are native executables: remembered
        real = Path(os.path.realpath(found.path))
        if found.version and real.name == name and real.read_bytes()[:4] == b"\x7fELF":
            assert found.path in remembered, name
