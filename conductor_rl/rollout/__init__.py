"""Rollouts: the workflow engine that runs a plan's steps on the
workers (`workflow`), and a rollout's life from completion to reward
(`rollouts`: parse, execute, grade)."""
