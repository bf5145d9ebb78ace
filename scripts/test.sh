#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the test suite, offline, naming the 25 slowest tests.
# Two pytest-xdist workers: every slow test in one, in order (they share one Ray cluster), the quick
# ones in the other while the slow ones wait (tests/conftest.py); add -n 0 to run in one process.
#   bash scripts/test.sh                  # all tests
#   bash scripts/test.sh -m "not slow"    # the quick subset for iteration: no real model, Ray, vLLM or
#                                         # training subprocess, nothing over a couple of seconds
#   bash scripts/test.sh -k plan -x       # extra arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec .venv/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup --durations=25 "$@"
