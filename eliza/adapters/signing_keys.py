"""Where this machine's evidence-signing key lives.

Each machine gets an ed25519 key on first use, at `<cache>/keys/evidence-ed25519.pem`
(the cache: ELIZA_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache, then /eliza-inference). The
file is created with mode 0600 in a 0700 directory, never inside the repository, and a key
file that others may read is refused (`chmod 600 PATH` says how to fix it). A CI job gives
its key in ELIZA_SIGNING_KEY instead: a PKCS#8 PEM ed25519 private key, or the base64 of
its 32 raw bytes. Nothing here ever prints the private key.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path

from eliza.adapters.errors import ToolError
from eliza.formats.attestation import AttestationError, SigningKey

KEY_ENV = "ELIZA_SIGNING_KEY"
KEY_FILE = "evidence-ed25519.pem"


class SigningKeyError(ToolError):
    """The signing key cannot be read or is not safe to use; the message says how to fix it."""


def key_path(cache: Path) -> Path:
    return cache / "keys" / KEY_FILE


def machine_key(cache: Path, env: Mapping[str, str]) -> SigningKey:
    """ELIZA_SIGNING_KEY when set, else this machine's key, created on first use."""
    given = env.get(KEY_ENV, "")
    if given.strip():
        try:
            return SigningKey.from_text(given)
        except AttestationError as exc:
            raise SigningKeyError(f"{KEY_ENV} {exc}") from None
    path = key_path(cache)
    if not path.exists():
        _create(path)
    return _load(path)


def _load(path: Path) -> SigningKey:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise SigningKeyError(f"{path}: cannot read the signing key: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SigningKeyError(f"{path}: the signing key is not a regular file")
        loose = stat.S_IMODE(info.st_mode) & 0o077
        if loose:
            raise SigningKeyError(
                f"{path}: the signing key is readable or writable by others "
                f"(mode {stat.S_IMODE(info.st_mode):04o}); refused: run `chmod 600 {path}`"
            )
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise SigningKeyError(f"{path}: the signing key belongs to another user; refused")
        text = b""
        while chunk := os.read(fd, 1 << 16):
            text += chunk
    finally:
        os.close(fd)
    try:
        return SigningKey.from_text(text.decode("ascii", errors="replace"))
    except AttestationError as exc:
        raise SigningKeyError(f"{path}: {exc}; remove it to get a new key") from None


def _create(path: Path) -> None:
    """Writes a new key to a private temporary and links it into place: two processes
    starting at once end up with the same key, and no reader sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    tmp = path.parent / f".{path.name}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, SigningKey.generate().private_pem())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass  # another process made it first: its key is the machine's
    finally:
        tmp.unlink(missing_ok=True)
