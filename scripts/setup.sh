#!/usr/bin/env bash
# Set up Lacuna on a fresh Debian/Ubuntu machine: Java 17+ (for Spark 4), a Python
# 3.11, 3.12 or 3.13 virtualenv in .venv with the pinned requirements (every
# transitive package pinned by constraints.txt) and, with --dev, the test tools and
# Chromium for the browser tests. Safe to run again.
#
#   bash scripts/setup.sh          # run the app
#   bash scripts/setup.sh --dev    # run the tests
#   LACUNA_PYTHON=python3.13 bash scripts/setup.sh   # choose the interpreter
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
[ "${1:-}" = "--dev" ] && dev=1

die() { echo "setup: $*" >&2; exit 1; }

# Major version of the java on PATH (or JAVA_HOME), empty when there is none.
java_major() {
  local java="java"
  [ -n "${JAVA_HOME:-}" ] && java="$JAVA_HOME/bin/java"
  command -v "$java" >/dev/null 2>&1 || return 0
  "$java" -version 2>&1 | sed -nE '1s/.*version "([0-9]+)(\.[0-9]+)?.*/\1/p'
}

find_chromium() {
  local c
  for c in "${LACUNA_CHROMIUM:-}" chromium chromium-browser google-chrome; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }
  done
  return 1
}

apt_install() {
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "please install these Debian packages first: $*"
    sudo="sudo"
  fi
  echo "setup: installing $*" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

packages=()
major="$(java_major)"
if [ -z "$major" ] || [ "$major" -lt 17 ]; then packages+=(openjdk-17-jre-headless); fi
if [ "$dev" = 1 ] && ! find_chromium >/dev/null; then packages+=(chromium); fi
[ "${#packages[@]}" -gt 0 ] && apt_install "${packages[@]}"
major="$(java_major)"
if [ -z "$major" ] || [ "$major" -lt 17 ]; then
  die "Spark 4 needs Java 17 or newer, found ${major:-none}; install openjdk-17-jre-headless (or 21) and put it first on PATH or in JAVA_HOME"
fi

usable_python() {
  command -v "$1" >/dev/null && "$1" -c 'import sys; sys.exit(not (3, 11) <= sys.version_info[:2] <= (3, 13))'
}
find_python() {
  local candidate
  for candidate in python3.13 python3.12 python3.11 python3; do
    if usable_python "$candidate"; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}
if [ -n "${LACUNA_PYTHON:-}" ]; then
  # the Python asked for is used, or refused: never silently another one
  usable_python "$LACUNA_PYTHON" || die "LACUNA_PYTHON=$LACUNA_PYTHON is not Python 3.11, 3.12 or 3.13 on PATH"
fi
python="${LACUNA_PYTHON:-$(find_python || true)}"
if [ -z "$python" ] && ! command -v python3 >/dev/null; then
  # a bare Debian 12 or Ubuntu 24.04 has no Python at all: theirs is 3.11 or 3.12
  apt_install python3 python3-venv
  python="$(find_python || true)"
fi
[ -n "$python" ] || die "Python 3.11, 3.12 or 3.13 is required (none found on PATH)"

# Debian and Ubuntu ship venv (and ensurepip) separately: python3.X-venv.
if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
  apt_install "python$version-venv" || apt_install python3-venv
fi
# A .venv without a working pip (created without ensurepip, or half-removed) is rebuilt.
if [ -d .venv ] && ! .venv/bin/python -m pip --version >/dev/null 2>&1; then
  echo "setup: .venv has no working pip; rebuilding it" >&2
  rm -rf .venv
fi
# A .venv on another Python than LACUNA_PYTHON asks for is rebuilt on it.
pyversion() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])'; }
if [ -n "${LACUNA_PYTHON:-}" ] && [ -x .venv/bin/python ] \
    && [ "$(pyversion .venv/bin/python)" != "$(pyversion "$python")" ]; then
  echo "setup: .venv is on Python $(pyversion .venv/bin/python), LACUNA_PYTHON asks for $(pyversion "$python"); rebuilding it" >&2
  rm -rf .venv
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
requirements=requirements.txt
[ "$dev" = 1 ] && requirements=requirements-dev.txt
.venv/bin/python -m pip install -q --disable-pip-version-check -r "$requirements" -c constraints.txt
echo "setup: ready (.venv on $(.venv/bin/python -V), $requirements, Java $major)" >&2
