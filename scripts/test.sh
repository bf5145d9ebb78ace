#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the test suite, offline.
# With no arguments, two pytest runs side by side:
#   - the quick tests, then the `light` slow ones (real models in process, sandboxes, timeouts), in one
#     process; its log is printed at the end;
#   - the heavy slow tests (Ray, vLLM, learners, training subprocesses; tests/conftest.py marks
#     them) on two pytest-xdist workers, each module whole on one worker so that its tests share its
#     module fixtures, naming the 25 slowest.
# Runs too long for the suite are benchmarks (docs/results.md lists what moved and where).
#   bash scripts/test.sh                        # all tests
#   bash scripts/test.sh -m "not slow" -n 2     # the quick subset for iteration, two xdist workers
#   bash scripts/test.sh -k plan -x             # with arguments: one pytest process, they go to it
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
# Compiled test modules (pytest's assertion rewriting) are kept in __pycache__ for the next process.
unset PYTHONDONTWRITEBYTECODE
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider)
if (($# > 0)); then
  exec "${pytest[@]}" "$@"
fi

quick_log=$(mktemp -t conductor-quick-tests.XXXXXX.log)
"${pytest[@]}" -m "not slow or light" >"$quick_log" 2>&1 &
quick_pid=$!
echo "=== the heavy tests, on two workers (the quick ones beside them while they last) ==="
heavy_rc=0
"${pytest[@]}" -m "slow and not light" -n 2 --dist loadfile --durations=25 || heavy_rc=$?
quick_rc=0
wait "$quick_pid" || quick_rc=$?

echo
echo "=== the quick and light tests (log: $quick_log) ==="
if ((quick_rc != 0)); then
  cat "$quick_log"
else
  tail -n 1 "$quick_log"
fi
echo "heavy tests: exit $heavy_rc; quick tests: exit $quick_rc"
for rc in "$heavy_rc" "$quick_rc"; do
  if ((rc != 0)); then exit "$rc"; fi
done
