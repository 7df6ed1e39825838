"""A local Conan server (PyPI conan-server) on 127.0.0.1 with its own storage folder: the
shared binary cache of the CI rehearsal and of the tests.

conan-server's wheel carries its own copy of Conan, so ci/setup.sh installs it into a
virtual environment of its own (<cache>/tools/conan-server); ELIZA_CONAN_SERVER names
another installation's conan_server program.
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eliza.adapters.errors import ToolError

SERVER_VARIABLE = "ELIZA_CONAN_SERVER"
# Not a word the logs hold otherwise: a CI runner masks every secret's value in its logs.
USER = "remote-uploader"

# Listens on 127.0.0.1 only (the conan_server program listens on every interface).
_LAUNCH = (
    "import sys\n"
    "from conans.server.launcher import ServerLauncher\n"
    "ServerLauncher(server_dir=sys.argv[1]).server.run(host='127.0.0.1', port=int(sys.argv[2]))\n"
)


class ServerError(ToolError):
    pass


@dataclass(frozen=True, kw_only=True)
class LocalServer:
    url: str
    user: str
    password: str
    storage: Path
    log: Path


def server_python(env_value: str | None, cache: Path) -> Path:
    """The Python of the environment conan_server is installed in."""
    program = Path(env_value) if env_value else cache / "tools" / "conan-server" / "bin" / "conan_server"
    python = program.parent / "python"
    if not program.is_file() or not python.is_file():
        how = (
            f"{SERVER_VARIABLE}={env_value!r} names no conan_server beside a python"
            if env_value
            else (f"conan_server is not installed ({program} is missing)")
        )
        raise ServerError(
            f"{how}: run `bash ci/setup.sh`, or set {SERVER_VARIABLE} to a conan_server program"
        )
    return python


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(port: int, password: str) -> str:
    return "\n".join(
        [
            "[server]",
            f"jwt_secret: {secrets.token_hex(16)}",
            "jwt_expire_minutes: 120",
            "ssl_enabled: False",
            f"port: {port}",
            "public_port:",
            "host_name: 127.0.0.1",
            "authorize_timeout: 1800",
            "disk_storage_path: ./data",
            "disk_authorize_timeout: 1800",
            f"updown_secret: {secrets.token_hex(16)}",
            "",
            "[write_permissions]",
            f"*/*@*/*: {USER}",
            "",
            "[read_permissions]",
            "*/*@*/*: *",
            "",
            "[users]",
            f"{USER}: {password}",
            "",
        ]
    )


@contextmanager
def local_server(root: Path, python: Path, *, timeout: float = 60.0) -> Iterator[LocalServer]:
    """Starts conan_server with its configuration and storage under `root`; stops it after."""
    root.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    password = secrets.token_hex(12)
    (root / "server.conf").write_text(_config(port, password))
    log = root / "conan_server.log"
    url = f"http://127.0.0.1:{port}"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(python), "-c", _LAUNCH, str(root), str(port)], stdout=out, stderr=subprocess.STDOUT
        )
        try:
            deadline = time.monotonic() + timeout
            while True:
                if process.poll() is not None:
                    raise ServerError(f"conan_server exited ({process.returncode}); log: {log}")
                try:
                    with urllib.request.urlopen(f"{url}/v1/ping", timeout=2):
                        break
                except (urllib.error.URLError, OSError):
                    if time.monotonic() > deadline:
                        raise ServerError(
                            f"conan_server did not answer on {url} in {timeout:.0f}s; log: {log}"
                        ) from None
                    time.sleep(0.3)
            yield LocalServer(url=url, user=USER, password=password, storage=storage_of(root), log=log)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def storage_of(root: Path) -> Path:
    """Where the server `local_server(root, ...)` keeps its packages (server.conf's
    disk_storage_path)."""
    return root / "data"
