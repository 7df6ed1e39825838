"""An evidence directory full of hostile files (binary, huge, deeply nested, invalid
Unicode, symbolic links and loops, FIFOs, unreadable entries) yields load problems in the
report, never a crash, and the good record among them still counts."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from eliza.core.evidence import RECORD_SUFFIX
from eliza.core.layout import REPO_ROOT
from eliza.formats.evidence_json import MAX_RECORD_BYTES, read_records, record_to_dict
from tests.signing import write_signed
from tests.unit.test_evidence import make_record

# sessions on this checkout: never beside another such test (tests/conftest.py)
pytestmark = pytest.mark.checkout


NOBODY = 65534


def _others_may_enter(directory: Path) -> bool:
    """Every folder from / down to `directory` lets other users through (o+x)."""
    resolved = directory.resolve()
    return all(part.stat().st_mode & stat.S_IXOTH for part in (resolved, *resolved.parents))


@pytest.fixture()
def shared_tmp() -> Iterator[Path]:
    """A directory another user may enter: pytest's tmp_path is private to its owner, and so
    may be $TMPDIR; the first temporary folder every user can reach is taken."""
    candidates = [Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")]
    usable = [c for c in candidates if c.is_dir() and os.access(c, os.W_OK) and _others_may_enter(c)]
    if not usable:
        pytest.skip(f"no temporary folder another user may enter (tried {', '.join(map(str, candidates))})")
    path = Path(tempfile.mkdtemp(prefix="eliza-hostile-", dir=usable[0]))
    path.chmod(0o755)
    try:
        yield path
    finally:
        for sub in path.rglob("*"):
            if sub.is_dir() and not sub.is_symlink():
                sub.chmod(0o755)
        shutil.rmtree(path)


def _valid(**overrides: object) -> dict[str, object]:
    return record_to_dict(make_record(**overrides))  # type: ignore[arg-type]


def hostile_directory(root: Path) -> dict[str, str]:
    """Writes the hostile files; returns name -> what its load problem must say."""
    root.mkdir(parents=True, exist_ok=True)
    write_signed(root, make_record(cell="linux-cpu.none", check="build"))  # the one good record
    expect: dict[str, str] = {}

    def put(name: str, data: bytes, says: str) -> None:
        (root / name).write_bytes(data)
        expect[name] = says

    put("bin__a.json", bytes(range(256)) * 64, "not UTF-8")
    put("deep__a.json", b"[" * 200_000 + b"]" * 200_000, "nested too deeply")
    nested: object = {"x": 1}
    for _ in range(200):
        nested = {"x": nested}
    put("nested__a.json", json.dumps(_valid(details={"n": nested})).encode(), "nested deeper than")
    put("surrogate__a.json", json.dumps(_valid(reason="\ud800")).encode(), "unpaired surrogate")
    put("bigint__a.json", b'{"schema_version": ' + b"9" * 6000 + b"}", "not valid JSON")
    nan = json.dumps(_valid()).replace('"duration_s": 5.25', '"duration_s": NaN').encode()
    put("nan__a.json", nan, "duration_s")
    put("list__a.json", b"[1, 2, 3]", "expected a JSON object")
    put("empty__a.json", b"", "not valid JSON")
    with (root / "huge__a.json").open("wb") as handle:
        handle.truncate(MAX_RECORD_BYTES + 1)  # sparse: costs no disk
    expect["huge__a.json"] = "larger than a record may be"
    os.symlink("/dev/zero", root / "zero__a.json")
    expect["zero__a.json"] = "symbolic link"
    os.symlink(root / "nowhere", root / "dangling__a.json")
    expect["dangling__a.json"] = "symbolic link"
    os.symlink(root / "linux-cpu.none__build.json", root / "alias__a.json")
    expect["alias__a.json"] = "symbolic link"
    os.symlink(root, root / "loop__a.json")  # a link loop named like a record
    expect["loop__a.json"] = "symbolic link"
    os.symlink(root, root / "loop")  # a link loop not named like one: not descended
    os.mkfifo(root / "fifo__a.json")  # opening it for reading must not block
    expect["fifo__a.json"] = "not a regular file"
    (root / "dir__a.json").mkdir()  # a directory named like a record: nothing to read
    return expect


def _problems_by_name(loaded: list[object]) -> dict[str, str]:
    return {item.path.name: item.problem for item in loaded if item.problem}  # type: ignore[attr-defined]


def test_hostile_files_become_load_problems(tmp_path: Path) -> None:
    expect = hostile_directory(tmp_path / "evidence")
    loaded = read_records([tmp_path / "evidence"], {})
    problems = _problems_by_name(loaded)
    good = [item for item in loaded if item.record is not None]
    assert [g.path.name for g in good] == ["linux-cpu.none__build.json"]
    for name, says in expect.items():
        assert name in problems, f"{name}: no load problem"
        assert says in problems[name], f"{name}: {problems[name]}"
        assert str(tmp_path / "evidence" / name) in problems[name]  # the file is named
    assert set(problems) == set(expect)


def _read_as_nobody(directory: Path) -> dict[str, str]:
    """read_records over `directory` in a child that drops to `nobody` first.

    Everything the read needs from the checkout and the interpreter's tree (the modules it
    imports lazily, the evidence schema) is loaded by a first read while the child is still
    root: after the drop, a checkout or a Python under a private directory (a clone in
    `mktemp -d`, /root, a 0700 home) could not be read again, and the verdict would depend on
    where the repository was cloned. The child runs in `directory`'s parent, which `nobody`
    may enter, never in the checkout.
    """
    code = (
        "import json, os, sys; "
        "from eliza.formats.evidence_json import read_records; "
        "read_records([sys.argv[1]], {}); "  # as root: lazy imports and the schema, loaded now
        f"os.setgid({NOBODY}); os.setuid({NOBODY}); "
        "print(json.dumps({str(i.path): i.problem for i in read_records([sys.argv[1]], {}) if i.problem}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(directory)],
        capture_output=True,
        text=True,
        check=False,
        cwd=directory.parent,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, str] = json.loads(done.stdout)
    return found


@pytest.mark.as_other_user
def test_unreadable_files_and_directories_become_load_problems(shared_tmp: Path) -> None:
    root = shared_tmp / "evidence"
    write_signed(root, make_record(cell="linux-cpu.none", check="build"))
    secret = write_signed(root, make_record(cell="linux-cpu.none", check="abi"))
    secret.chmod(0o000)
    closed = root / "job-2"
    write_signed(closed, make_record(cell="linux-cpu.mlx", check="build"))
    closed.chmod(0o000)
    if os.geteuid() == 0:  # root reads everything: read as an unprivileged user instead
        problems = _read_as_nobody(root)
    else:
        problems = {str(i.path): i.problem or "" for i in read_records([root], {}) if i.problem}
    assert "cannot read: Permission denied" in problems[str(secret)]
    assert "cannot list the directory: Permission denied" in problems[str(closed)]
    assert len(problems) == 2


def test_report_renders_with_hostile_evidence(tmp_path: Path) -> None:
    """The report session over the hostile directory: it renders and lists each problem."""
    expect = hostile_directory(tmp_path / "evidence")
    out = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "report", "--", "--out", str(out), str(tmp_path / "evidence")],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    text = json.dumps(report)
    for name in expect:
        assert name in text, f"{name} not listed in the report"
    assert (out / "report.html").stat().st_size > 0
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporaries left
    assert RECORD_SUFFIX == ".json"
