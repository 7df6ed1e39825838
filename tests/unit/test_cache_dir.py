"""Where the cache is: ELIZA_CACHE_DIR (a relative one is a folder of the checkout, wherever
the command runs from), else the XDG cache, else ~/.cache."""

from __future__ import annotations

from pathlib import Path, PurePath

from eliza.app.project import Project
from eliza.core.layout import cache_dir

HOME = PurePath("/home/someone")


def test_an_absolute_cache_dir_is_itself(tmp_path: Path) -> None:
    assert cache_dir({"ELIZA_CACHE_DIR": "/var/cache/x"}, HOME, tmp_path) == Path("/var/cache/x")


def test_a_relative_cache_dir_is_a_folder_of_the_checkout(tmp_path: Path) -> None:
    assert cache_dir({"ELIZA_CACHE_DIR": ".eliza-cache"}, HOME, tmp_path) == tmp_path / ".eliza-cache"
    project = Project.from_environment({"ELIZA_CACHE_DIR": ".eliza-cache"}, repo=tmp_path)
    assert project.cache == tmp_path / ".eliza-cache"


def test_without_one_the_user_cache(tmp_path: Path) -> None:
    assert cache_dir({}, HOME, tmp_path) == Path("/home/someone/.cache/eliza-inference")
    assert cache_dir({"XDG_CACHE_HOME": "/xdg"}, HOME, tmp_path) == Path("/xdg/eliza-inference")
