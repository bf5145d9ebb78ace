#!/usr/bin/env bash
# Lint and type checks, as CI runs them (configured in pyproject.toml); exits non-zero on any finding.
#   bash scripts/lint.sh          # ruff check, ruff format --check, mypy on conductor_rl/
# To fix what the tools can fix themselves: .venv/bin/ruff check --fix . && .venv/bin/ruff format .
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
for tool in ruff mypy; do
    [ -x "$BIN/$tool" ] || { echo "[lint] $BIN/$tool is missing: run bash scripts/setup.sh" >&2; exit 2; }
done
status=0
echo "[lint] ruff check"
"$BIN/ruff" check --no-fix . || status=1
echo "[lint] ruff format --check"
"$BIN/ruff" format --check . || status=1
echo "[lint] mypy (conductor_rl/)"
"$BIN/mypy" || status=1
[ "$status" = 0 ] && echo "[lint] clean" || echo "[lint] findings above" >&2
exit "$status"
