"""Headless Chromium: a screenshot of a rendered page (the HTML report)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from eliza.adapters import proc

# Flags that keep Chromium from reaching for the network or a profile of its own.
_QUIET_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def screenshot(html: Path, png: Path, *, width: int = 1400, height: int = 2000) -> Path | None:
    """The page rendered to `png`; None when no Chromium is installed or it wrote nothing."""
    browser = find_chromium()
    if browser is None:
        return None
    with tempfile.TemporaryDirectory() as profile:
        proc.run(
            [
                browser,
                *_QUIET_FLAGS,
                f"--user-data-dir={profile}",
                f"--screenshot={png}",
                f"--window-size={width},{height}",
                html.resolve().as_uri(),
            ],
            timeout=120,
        )
    return png if png.is_file() else None
