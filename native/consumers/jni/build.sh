#!/usr/bin/env bash
# Builds the JVM consumer into OUT_DIR (for example build/consumers/jni):
#   OUT_DIR/libeliza_jni.so   the JNI glue: eliza_jni.cpp, C++17, against the public header only
#   OUT_DIR/classes/          the Java classes (javac --release 11, as low as the code needs)
#   OUT_DIR/jni-consumer      the launcher: OUT_DIR/jni-consumer --library LIB --bundle DIR ...
#
#   native/consumers/jni/build.sh OUT_DIR
#
# Tools: javac and jni.h from JAVA_HOME (when unset, found from javac's real path), and
# CXX (default g++). A missing one ends with exit status 5 and what to install, the status
# the consumers use for a missing runtime. The glue and the classes are always rebuilt
# (a few seconds); nothing is written outside OUT_DIR.
set -euo pipefail

say() { echo "native/consumers/jni/build.sh: $*" >&2; }

if [ $# -ne 1 ] || [ -z "$1" ]; then
    say "usage: native/consumers/jni/build.sh OUT_DIR"
    exit 2
fi
here="$(cd "$(dirname "$0")" && pwd)"
header_dir="$(cd "$here/../../include" && pwd)"
out="$1"

if [ -z "${JAVA_HOME:-}" ]; then
    if ! command -v javac >/dev/null; then
        say "javac not found and JAVA_HOME unset: install a JDK (Debian/Ubuntu: default-jdk-headless; ci/setup.sh does it)"
        exit 5
    fi
    JAVA_HOME="$(dirname "$(dirname "$(readlink -f "$(command -v javac)")")")"
fi
javac_bin="$JAVA_HOME/bin/javac"
if [ ! -x "$javac_bin" ]; then
    say "no javac at $javac_bin (JAVA_HOME=$JAVA_HOME): install a JDK (Debian/Ubuntu: default-jdk-headless)"
    exit 5
fi
case "$(uname -s)" in
    Linux) jni_platform=linux; glue=libeliza_jni.so ;;
    Darwin) jni_platform=darwin; glue=libeliza_jni.dylib ;;
    *) say "unsupported host $(uname -s)"; exit 5 ;;
esac
if [ ! -f "$JAVA_HOME/include/jni.h" ] || [ ! -f "$JAVA_HOME/include/$jni_platform/jni_md.h" ]; then
    say "no jni.h under $JAVA_HOME/include: JAVA_HOME must be a JDK, not a JRE (Debian/Ubuntu: default-jdk-headless)"
    exit 5
fi
cxx="${CXX:-g++}"
if ! command -v "$cxx" >/dev/null; then
    say "C++ compiler '$cxx' not found: install g++ or set CXX"
    exit 5
fi

mkdir -p "$out"
out="$(cd "$out" && pwd)"
staging="$(mktemp -d "$out/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT

"$cxx" -std=c++17 -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra -Wpedantic \
    -I"$header_dir" -I"$JAVA_HOME/include" -I"$JAVA_HOME/include/$jni_platform" \
    "$here/eliza_jni.cpp" -o "$staging/$glue" -ldl

mkdir -p "$staging/classes"
find "$here/java" -name '*.java' -print0 | sort -z | xargs -0 "$javac_bin" --release 11 -encoding UTF-8 \
    -Xlint:all -d "$staging/classes"

# The launcher finds the glue and the classes beside itself, so OUT_DIR can move.
cat >"$staging/jni-consumer" <<'LAUNCHER'
#!/bin/sh
# The JVM consumer of libelizainference (native/consumers/jni); see docs/consumers.md.
dir="$(cd "$(dirname "$0")" && pwd)"
if [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ]; then
    java="$JAVA_HOME/bin/java"
elif command -v java >/dev/null 2>&1; then
    java=java
else
    echo "jni-consumer: java not found: install a JDK (Debian/Ubuntu: default-jdk-headless)" >&2
    exit 5
fi
# 8 MiB for the thread that decodes: the default 1 MiB Java stack is small for a decode
# that runs on the calling thread.
exec "$java" -Xss8m -Djava.library.path="$dir" -cp "$dir/classes" eliza.inference.jni.JniConsumer "$@"
LAUNCHER
chmod +x "$staging/jni-consumer"

rm -rf "$out/classes"
mv "$staging/classes" "$out/classes"
mv -f "$staging/$glue" "$out/$glue"
mv -f "$staging/jni-consumer" "$out/jni-consumer"
echo "$out/jni-consumer"
