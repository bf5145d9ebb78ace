#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs the test suite, offline.
# With no arguments, in two phases:
#   1. side by side: the quick tests and the `light` slow ones (real models in process, sandboxes,
#      timeouts) in one pytest process, its log printed at the end; the heavy slow tests (Ray, vLLM,
#      learners, training subprocesses; tests/conftest.py marks them) on two pytest-xdist workers, a
#      module whole on one worker so that its tests share their module fixtures, naming the 25 slowest;
#   2. the tests marked `alone` (served vLLM workers next to a training run: most of a 24 GiB machine's
#      memory), with nothing beside them.
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
heavy_rc=0
"${pytest[@]}" -m "slow and not light and not alone" -n 2 --dist loadfile --durations=25 || heavy_rc=$?
quick_rc=0
wait "$quick_pid" || quick_rc=$?
echo
echo "=== the tests that run alone ==="
alone_rc=0
"${pytest[@]}" -m alone --durations=5 || alone_rc=$?

echo
echo "=== the quick and light tests (run beside the heavy ones; log: $quick_log) ==="
if ((quick_rc != 0)); then
  cat "$quick_log"
else
  tail -n 1 "$quick_log"
fi
echo "heavy tests: exit $heavy_rc; alone: exit $alone_rc; quick tests: exit $quick_rc"
for rc in "$heavy_rc" "$alone_rc" "$quick_rc"; do
  if ((rc != 0)); then exit "$rc"; fi
done
