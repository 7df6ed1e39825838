"""The files evidence names, kept by content where no later run can write them again.

A check's outputs under build/ (a platform's junit file, the no-gate cell's reference and
FFI runs, a consumer's output) are the tools' working files: the next run of any check that
shares them writes them again. A record therefore never names them there. When it is
written, each such file is copied into the store, `build/artifacts/<sha256>/<file name>`,
and the record names that copy: its bytes are the ones the record's sha256 says, whatever
runs later, and two records of the same bytes share one copy. A copy lives while a record
of this checkout's evidence names it; `collect` removes the others
(docs/evidence.md#files).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

from eliza.core.layout import artifact_store, is_check_output
from eliza.formats.files import TEMP_SUFFIX, sha256_file


def keep(path: Path, repo: Path) -> tuple[Path, str]:
    """(the store's copy of `path`, its sha256) for a check output; `path` itself and its
    sha256 for any other file. The copy is hashed as it is made, so it holds exactly the
    bytes its name says even if `path` is written again meanwhile."""
    repo = repo.resolve()
    if not is_check_output(path.resolve(), repo):
        return path, sha256_file(path)
    store = artifact_store(repo)
    store.mkdir(parents=True, exist_ok=True)
    # A temporary in the project's pattern (".<name>.<pid>.<random>.tmp"): one a killed
    # writer leaves is removed by the next session's crash cleanup.
    fd, name = tempfile.mkstemp(dir=store, prefix=f".{path.name}.{os.getpid()}.", suffix=TEMP_SUFFIX)
    os.close(fd)
    staged = Path(name)
    try:
        shutil.copyfile(path, staged)
        sha256 = sha256_file(staged)
        target = store / sha256 / path.name
        if target.is_file():
            staged.unlink()
        else:
            target.parent.mkdir(exist_ok=True)
            os.chmod(staged, 0o644)
            os.replace(staged, target)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    return target, sha256


def collect(repo: Path, named: Iterable[str]) -> list[Path]:
    """Removes the store's copies that no path in `named` (records' artifact paths, relative
    to the repository or absolute) is; returns them."""
    store = artifact_store(repo)
    if not store.is_dir():
        return []
    wanted = {(p if Path(p).is_absolute() else str(repo / p)) for p in named}
    removed: list[Path] = []
    for folder in sorted(store.iterdir()):
        if not folder.is_dir():
            continue  # a writer's temporary: the crash cleanup's, once its writer is gone
        for copy in sorted(folder.iterdir()):
            if str(copy) not in wanted:
                copy.unlink()
                removed.append(copy)
        if not any(folder.iterdir()):
            folder.rmdir()
    return removed
