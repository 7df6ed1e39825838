#!/usr/bin/env bash
# Installs what the project needs on a Debian-family machine, then the Python package:
#   - abigail-tools (abidiff) for the ABI checks, chromium for the report screenshot,
#     ninja and a C++ compiler for the builds (CMake >= 3.25 comes from pip when missing);
#   - this repository as an editable package with its test extras (conan, nox, gguf, ...).
# Safe to re-run: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v abidiff >/dev/null || missing+=(abigail-tools)
command -v chromium >/dev/null || missing+=(chromium)
command -v ninja >/dev/null || missing+=(ninja-build)
command -v c++ >/dev/null || missing+=(g++)
command -v nm >/dev/null || missing+=(binutils)
if ((${#missing[@]})); then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
    else
        echo "ci/setup.sh: please install these Debian packages (needs root): ${missing[*]}" >&2
        exit 1
    fi
fi

python3 -m pip install --quiet --upgrade pip
python3 -m pip install --quiet -e ".[test]"
if ! cmake --version 2>/dev/null | awk 'NR==1 { split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 25)) }'; then
    python3 -m pip install --quiet "cmake>=3.25"
fi
echo "ci/setup.sh: ready ($(conan --version), $(cmake --version | head -1), nox $(nox --version 2>&1))"
