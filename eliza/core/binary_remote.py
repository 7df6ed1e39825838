"""The shared binary cache: a Conan remote named by the environment (pure parsing).

ELIZA_CONAN_REMOTE_URL names any Conan server (Artifactory, conan_server, ...);
ELIZA_CONAN_REMOTE_USER and ELIZA_CONAN_REMOTE_PASSWORD log in (CI feeds them from
secrets). Recipes always come from the project's local index: the remote is asked only
for the exact llama.cpp binary a build needs, and given the one a build made.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

URL_VARIABLE = "ELIZA_CONAN_REMOTE_URL"
USER_VARIABLE = "ELIZA_CONAN_REMOTE_USER"
PASSWORD_VARIABLE = "ELIZA_CONAN_REMOTE_PASSWORD"
REMOTE_NAME = "eliza-binaries"

_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(:[0-9]{1,5})?(/[^\s]*)?$")


class RemoteSettingError(ValueError):
    """One line naming the variable that is wrong and how to fix it."""


@dataclass(frozen=True, kw_only=True)
class BinaryRemote:
    url: str
    user: str | None
    password: str | None = None

    def login_env(self) -> dict[str, str]:
        """The variables Conan reads to log in to the remote named REMOTE_NAME."""
        if self.user is None:
            return {}
        suffix = REMOTE_NAME.upper().replace("-", "_")
        return {f"CONAN_LOGIN_USERNAME_{suffix}": self.user, f"CONAN_PASSWORD_{suffix}": self.password or ""}

    def describe(self) -> str:
        return f"{self.url}" + (f" as {self.user}" if self.user else " (anonymous)")


def remote_from_env(env: Mapping[str, str]) -> BinaryRemote | None:
    """None when ELIZA_CONAN_REMOTE_URL is unset or empty (CI without the secret: builds
    then compile llama.cpp themselves); RemoteSettingError when a variable is malformed."""
    url = env.get(URL_VARIABLE, "").strip()
    user = env.get(USER_VARIABLE, "").strip() or None
    password = env.get(PASSWORD_VARIABLE) or None
    if not url:
        if user or password:
            raise RemoteSettingError(
                f"{USER_VARIABLE}/{PASSWORD_VARIABLE} are set but {URL_VARIABLE} is not: set it to the "
                "Conan server's URL (e.g. http://127.0.0.1:9300), or unset them"
            )
        return None
    if not _URL.match(url):
        raise RemoteSettingError(
            f"{URL_VARIABLE}={url!r} is not an http(s) URL of a Conan server: set it like "
            "https://conan.example.org/artifactory/api/conan/eliza or http://127.0.0.1:9300, or unset it"
        )
    if password and not user:
        raise RemoteSettingError(
            f"{PASSWORD_VARIABLE} is set but {USER_VARIABLE} is not: set both, or neither"
        )
    return BinaryRemote(url=url.rstrip("/"), user=user, password=password)
