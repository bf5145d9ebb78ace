"""Evaluation: an evaluation resolved and checked before any actor starts
(`prepare`), the methods `conductor-rl evaluate` compares (`methods`), the
baselines as plans (`baselines`, `plans`), the router (`router`), the exact best
plan of a simulated pool (`optimal`), the records and their summary (`summary`),
the result files (`report`), the resumable record store (`store`), and a batch
of samples run and graded (`runner`)."""

from conductor_rl.evaluation.baselines import (
    best_worker,
    moa_plan,
    optimal_plan,
    oracle_worker,
    price_key,
    random_lengths_label,
    random_plan,
    reflection_plan,
    single_plan,
)
from conductor_rl.evaluation.methods import (
    DEFAULT_METHODS,
    DEFAULT_ROUNDS,
    Method,
    MethodError,
    default_methods,
    expand_methods,
    parse_method,
    parse_methods,
    resolve_checkpoint,
)
from conductor_rl.evaluation.plans import (
    BaselineContext,
    MissingEvidenceError,
    baseline_samples,
    conductor_lengths_of,
    single_verdicts_of,
)
from conductor_rl.evaluation.report import markdown_table, records_table, write_results
from conductor_rl.evaluation.router import Router, RouterError
from conductor_rl.evaluation.runner import Pool, Sample, record_of, run_batch, stopped_by_budget
from conductor_rl.evaluation.store import RecordStore, ResumeMismatchError, StoreError
from conductor_rl.evaluation.summary import VERDICTS, Cell, EvalRecord, StrategyRow, stop_rates, strategy, summarise
from conductor_rl.plan.prompts import answer_instruction

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_ROUNDS",
    "VERDICTS",
    "BaselineContext",
    "Cell",
    "EvalRecord",
    "Method",
    "MethodError",
    "MissingEvidenceError",
    "Pool",
    "RecordStore",
    "ResumeMismatchError",
    "Router",
    "RouterError",
    "Sample",
    "StoreError",
    "StrategyRow",
    "answer_instruction",
    "baseline_samples",
    "best_worker",
    "conductor_lengths_of",
    "default_methods",
    "expand_methods",
    "markdown_table",
    "moa_plan",
    "optimal_plan",
    "oracle_worker",
    "parse_method",
    "parse_methods",
    "price_key",
    "random_lengths_label",
    "random_plan",
    "record_of",
    "records_table",
    "reflection_plan",
    "resolve_checkpoint",
    "run_batch",
    "single_plan",
    "single_verdicts_of",
    "stop_rates",
    "stopped_by_budget",
    "strategy",
    "summarise",
    "write_results",
]
