#!/usr/bin/env bash
# README command 2: set up, check the code (ruff, mypy, import contract), then run the whole
# test suite (slow tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install.sh
bash .ci/lint.sh
exec "${TINYC_VENV:-.venv}/bin/python" -m pytest -q "$@"
