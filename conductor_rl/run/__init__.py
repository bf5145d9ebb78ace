"""Stage 6, run records: checkpoints (`checkpoint`, written through
`atomic_files`), the metrics log (`log`), rollout traces (`traces`), the
iteration's figures (`metrics`) and the end-of-run report (`report`); and,
before a run starts, whether its actors fit the cluster (`placement`)."""
