#!/usr/bin/env bash
# Set up Lacuna on a fresh Debian/Ubuntu machine: Java (for Spark), a Python 3.11
# virtualenv in .venv with the pinned requirements and, with --dev, the test tools
# and Debian's Chromium for the browser tests. Safe to run again.
#
#   bash scripts/setup.sh          # run the app
#   bash scripts/setup.sh --dev    # run the tests
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
[ "${1:-}" = "--dev" ] && dev=1

packages=()
command -v java >/dev/null 2>&1 && java -version >/dev/null 2>&1 || packages+=(openjdk-17-jre-headless)
if [ "$dev" = 1 ] && [ ! -x /usr/bin/chromium ]; then packages+=(chromium); fi
if [ "${#packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then sudo=""; elif command -v sudo >/dev/null; then sudo="sudo"; else
    echo "setup: please install these Debian packages first: ${packages[*]}" >&2; exit 1
  fi
  echo "setup: installing ${packages[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

python=""
for candidate in python3.11 python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
    python="$candidate"; break
  fi
done
if [ -z "$python" ]; then echo "setup: Python 3.11 is required (python3.11 not found)" >&2; exit 1; fi

[ -x .venv/bin/python ] || "$python" -m venv .venv
requirements=requirements.txt
[ "$dev" = 1 ] && requirements=requirements-dev.txt
.venv/bin/python -m pip install -q --disable-pip-version-check -r "$requirements"
echo "setup: ready (.venv, $requirements)" >&2
