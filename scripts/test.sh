#!/usr/bin/env bash
# The whole test suite: lint, format, strict types, the import contracts (pyproject.toml's
# `[tool.importlinter]` and import-cycles.toml), then every pytest lane (unit, SGLang contract
# and end-to-end on CPU, API, terminal UI, browser; the GPU lane skips itself without a GPU).
# Extra arguments go to pytest. Any failure, including pytest's exit code 5 ("no tests
# collected"), fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export SGLANG_USE_CPU_ENGINE="${SGLANG_USE_CPU_ENGINE:-1}"
# one command a line: under `set -e` a failure on the left of `&&` does not stop the script
# (a lint error once passed the whole run that way)
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy"
.venv/bin/mypy -p agentconsole
.venv/bin/mypy tests benchmarks
echo "== imports"; .venv/bin/lint-imports --no-logo pyproject.toml import-cycles.toml
echo "== pytest"; .venv/bin/python -m pytest "$@"
