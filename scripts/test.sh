#!/usr/bin/env bash
# Run every check CI runs, cheapest first, stopping at the first that fails:
# lint, format, types (pyproject.toml), then the whole test suite on two workers.
# Needs the .venv of `bash scripts/setup.sh --dev`. Extra arguments go to pytest.
#
#   bash scripts/test.sh                    # everything, as CI runs it
#   LACUNA_TEST_WORKERS=0 bash scripts/test.sh tests/unit   # one process, a subset
set -euo pipefail
cd "$(dirname "$0")/.."

step() { echo "test: $*" >&2; "$@"; }

step .venv/bin/python -m ruff check .
step .venv/bin/python -m ruff format --check .
step .venv/bin/python -m mypy engine
# Spark, browser and cluster tests are grouped (tests/conftest.py): a worker starts one
# local Spark session, the slowest groups are handed out first, in the order collected.
step .venv/bin/python -m pytest -n "${LACUNA_TEST_WORKERS:-2}" --dist loadgroup --durations=15 \
  --no-loadscope-reorder "$@"
