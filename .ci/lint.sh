#!/usr/bin/env bash
# The code's habits, checked before the tests (README's test command runs this): ruff lint and
# format, mypy on tinyc/, and the import contract (the layer order of docs/architecture.md,
# configured in pyproject.toml). Each prints what it found; the first failure fails CI.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${TINYC_VENV:-.venv}/bin"
echo "[tinyc lint] ruff check"; "$bin/ruff" check tinyc
echo "[tinyc lint] ruff format --check"; "$bin/ruff" format --check tinyc
echo "[tinyc lint] mypy"; "$bin/mypy" --no-error-summary tinyc && echo "mypy: no issues"
echo "[tinyc lint] import contract"; "$bin/lint-imports" --no-cache
