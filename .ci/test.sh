#!/usr/bin/env bash
# README command 2: set up, check the code (ruff, mypy, import contract), then run the whole
# test suite (slow tests included), on two pytest-xdist workers (one per core; a test file stays on one
# worker, so module fixtures are built once). TINYC_TEST_JOBS=0 runs it in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install.sh
bash .ci/lint.sh
jobs="${TINYC_TEST_JOBS:-2}"
if [ "$jobs" = "0" ]; then
    exec "${TINYC_VENV:-.venv}/bin/python" -m pytest -q "$@"
fi
exec "${TINYC_VENV:-.venv}/bin/python" -m pytest -q -n "$jobs" --dist loadfile "$@"
