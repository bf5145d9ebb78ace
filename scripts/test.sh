#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the test suite, offline.
# With no arguments, two pytest processes side by side: the heavy slow tests (Ray, vLLM, learners,
# training subprocesses; tests/conftest.py marks them) in one, in order, naming the 25 slowest; the
# quick tests and the `light` slow ones (real models in process, sandboxes, timeouts) in the other, its
# log printed at the end. Never two heavy tests at once: each may start a Ray cluster, a vLLM server
# or a learner, and two together can exhaust a 24 GiB machine.
#   bash scripts/test.sh                        # all tests
#   bash scripts/test.sh -m "not slow" -n 2     # the quick subset for iteration, two xdist workers
#   bash scripts/test.sh -k plan -x             # with arguments: one pytest process, they go to it
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
pytest=(.venv/bin/python -m pytest -q -p no:cacheprovider)
if (($# > 0)); then
  exec "${pytest[@]}" "$@"
fi

quick_log=$(mktemp -t conductor-quick-tests.XXXXXX.log)
"${pytest[@]}" -m "not slow or light" >"$quick_log" 2>&1 &
quick_pid=$!
slow_rc=0
"${pytest[@]}" -m "slow and not light" --durations=25 || slow_rc=$?
quick_rc=0
wait "$quick_pid" || quick_rc=$?

echo
echo "=== the quick and light tests (run beside the heavy ones; log: $quick_log) ==="
if ((quick_rc != 0)); then
  cat "$quick_log"
else
  tail -n 1 "$quick_log"
fi
echo "slow tests: exit $slow_rc; quick tests: exit $quick_rc"
if ((slow_rc != 0)); then exit "$slow_rc"; fi
exit "$quick_rc"
