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
    "--hide-scrollbars",  # a screenshot shows the page, not the window's controls
)


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def screenshot(
    html: Path, png: Path, *, width: int = 1400, height: int = 2000, fragment: str = "", trim: bool = False
) -> Path | None:
    """The page rendered to `png` (opened at `#fragment` when given); None when no Chromium is
    installed or it wrote nothing. `trim`: the white margin right and below the page's
    content cut off, so a window sized for the largest page leaves no empty canvas."""
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
                html.resolve().as_uri() + (f"#{fragment}" if fragment else ""),
            ],
            timeout=120,
        )
    if not png.is_file():
        return None
    if trim:
        _trim(png)
    return png


def _trim(png: Path, margin: int = 24) -> None:
    """Crops the white right and bottom of the image, keeping `margin` pixels."""
    from PIL import Image, ImageChops

    with Image.open(png) as image:
        rgb = image.convert("RGB")
    box = ImageChops.difference(rgb, Image.new("RGB", rgb.size, (255, 255, 255))).getbbox()
    if box is None:
        return
    right, bottom = min(rgb.width, box[2] + margin), min(rgb.height, box[3] + margin)
    if (right, bottom) != rgb.size:
        tmp = png.with_name(f".{png.name}.tmp")
        rgb.crop((0, 0, right, bottom)).save(tmp, format="PNG")
        tmp.replace(png)
