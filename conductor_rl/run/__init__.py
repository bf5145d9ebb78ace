"""Run records: checkpoints (`checkpoint`, written through
conductor_rl/atomic_files.py), the metrics log (`log`), rollout traces (`traces`), the
iteration's figures (`metrics`), what a run changes as it goes (`state`) and the
end-of-run report (`report`); and, before a run starts, what its actors ask of the
cluster (`demands`) and whether they fit (`placement`)."""
