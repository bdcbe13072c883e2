#!/usr/bin/env bash
# README command 1: set up, then compile the bundled digits CNN and run it, printing its test
# accuracy next to onnxruntime's.
set -euo pipefail
cd "$(dirname "$0")/.."
bash .ci/install.sh
exec "${TINYC_VENV:-.venv}/bin/python" examples/digits/run.py "$@"
