#!/usr/bin/env bash
# README command 2: set up, then run the whole test suite (slow tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install.sh
exec "${TINYC_VENV:-.venv}/bin/python" -m pytest -q "$@"
