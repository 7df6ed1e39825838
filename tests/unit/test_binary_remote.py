"""ELIZA_CONAN_REMOTE_URL and its login variables: nothing when unset, one line naming the
variable and the fix when malformed, Conan's login variables when set."""

from __future__ import annotations

import pytest

from eliza.core.binary_remote import REMOTE_NAME, BinaryRemote, RemoteSettingError, remote_from_env

URL = "ELIZA_CONAN_REMOTE_URL"


def test_unset_or_empty_means_no_remote() -> None:
    assert remote_from_env({}) is None
    assert remote_from_env({URL: "  "}) is None


def test_a_url_with_login() -> None:
    remote = remote_from_env(
        {
            URL: "http://127.0.0.1:9300/",
            "ELIZA_CONAN_REMOTE_USER": "ci",
            "ELIZA_CONAN_REMOTE_PASSWORD": "pw-42",
        }
    )
    assert remote == BinaryRemote(url="http://127.0.0.1:9300", user="ci", password="pw-42")
    suffix = REMOTE_NAME.upper().replace("-", "_")
    assert remote.login_env() == {f"CONAN_LOGIN_USERNAME_{suffix}": "ci", f"CONAN_PASSWORD_{suffix}": "pw-42"}
    assert "pw-42" not in remote.describe()
    anonymous = remote_from_env({URL: "https://conan.example.org/artifactory/api/conan/eliza"})
    assert anonymous is not None and anonymous.login_env() == {}


@pytest.mark.parametrize(
    "env, said",
    [
        ({URL: "127.0.0.1:9300"}, r"^ELIZA_CONAN_REMOTE_URL='127.0.0.1:9300' is not an http\(s\) URL"),
        ({URL: "ftp://host/x"}, r"^ELIZA_CONAN_REMOTE_URL='ftp://host/x' is not an http\(s\) URL"),
        ({URL: "http://a b"}, r"^ELIZA_CONAN_REMOTE_URL='http://a b' is not"),
        ({"ELIZA_CONAN_REMOTE_USER": "ci"}, r"set but ELIZA_CONAN_REMOTE_URL is not"),
        ({URL: "http://h:1", "ELIZA_CONAN_REMOTE_PASSWORD": "p"}, r"ELIZA_CONAN_REMOTE_USER is not"),
    ],
)
def test_malformed_settings_are_one_line_naming_the_variable(env: dict[str, str], said: str) -> None:
    with pytest.raises(RemoteSettingError, match=said) as caught:
        remote_from_env(env)
    assert "\n" not in str(caught.value)
