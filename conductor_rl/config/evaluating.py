"""The `evaluate` section: which methods run on which benchmarks, and how (jobs/evaluate.py)."""

from __future__ import annotations

from pydantic import Field

from conductor_rl.config.strict import Strict
from conductor_rl.config.tracking import Logger


class EvaluateConfig(Strict):
    """`conductor-rl evaluate` (jobs/evaluate.py): methods x benchmarks with repeats (paper §4, tables 1, 5-7).
    Method names and the baselines are in conductor_rl/evaluation/methods.py."""

    benchmarks: list[str] = Field(
        default_factory=lambda: [
            "math500",
            "mmlu:eval",
            "rlpr:test",
            "livecodebench:v6",
            "aime25",
            "bigcodebench:complete",
            "gpqa:diamond",
        ],
        description="Dataset specs (conductor_rl.data.load_dataset) of the benchmarks: the paper's seven.",
    )
    methods: list[str] = Field(
        default_factory=lambda: [
            "conductor:untrained",
            "single:*",
            "reflect:*:5",
            "moa",
            "router",
            "random",
            "oracle",
            "oracle-single",
        ],
        description="Methods in rows: conductor:<checkpoint or run folder>, conductor:untrained, single:<worker>, "
        "reflect:<worker>:<rounds>, moa, router, random, oracle, oracle-single, optimal (a simulated pool only); "
        "'*' for a worker means every worker.",
    )
    repeats: int = Field(3, ge=1, description="Samples per question and method (the standard error is over both).")
    limit: int | None = Field(None, ge=1, description="Questions per benchmark (the first N; None: all).")
    loggers: list[Logger] = Field(
        default_factory=list,
        description="Experiment trackers that get the results table, each cell's figures, the configuration and "
        "the plot, besides results.*: any of tensorboard, wandb, mlflow (see tracking.*).",
    )
    output_dir: str = Field(
        "runs/eval",
        description="results.json, results.md, records.parquet, the plot, and "
        "records.jsonl, from which a stopped evaluation resumes.",
    )
    batch_questions: int = Field(32, ge=1, description="Questions whose plans are made and run together.")
    temperature: float | None = Field(
        None,
        ge=0.0,
        description="The Conductor's sampling temperature here (None: conductor.temperature, what training optimised).",
    )
    budget_usd: float | None = Field(None, ge=0.0, description="Stop cleanly once worker calls cost this much.")
    attempts: int = Field(
        2,
        ge=1,
        description="Runs of a sample whose execution or grading failed for "
        "infrastructure reasons before it is recorded as an error (left out of accuracy).",
    )
    moa_layers: int = Field(
        2,
        ge=2,
        description="Mixture-of-Agents layers, the last one the aggregator (the paper's MoA: 2, one layer of "
        "proposers and one aggregator, 8 calls on its 7 workers; Wang et al. used 3).",
    )
    moa_proposers: list[str] | None = Field(None, description="Workers proposing in each MoA layer (None: all).")
    moa_aggregator: str | None = Field(
        None,
        description="The MoA aggregator worker (None: the answering worker with the highest output price, "
        "named in the evaluation's output as moa_aggregator).",
    )
    router_pilot: str | None = Field(
        None,
        description="A training mixture (conductor-rl data mix) whose pilot verdicts (one per question and "
        "worker) train the router; None: a pilot pass of every worker over data.questions "
        "(router_pilot_questions of them, router_pilot_repeats times each) is run and kept with the records.",
    )
    router_pilot_questions: int = Field(200, ge=2, description="Training questions of the router's own pilot pass.")
    router_pilot_repeats: int = Field(
        4,
        ge=1,
        description="Verdicts per question and worker in the router's own pilot pass: the router learns each "
        "worker's chance of success, which one verdict says little about.",
    )
    cost_weight: float = Field(
        0.0,
        ge=0.0,
        description="Reward per USD that a method's expected cost takes off its expected reward (1 right, 0.5 "
        "wrong) when the router, oracle-single and optimal choose a worker or plan; 0: accuracy alone. "
        "The training reward has no cost term.",
    )
    progress: bool = Field(True, description="Show a progress bar on stderr.")
    preflight: bool = Field(
        True, description="Probe every worker before the first sample (conductor-rl check); --no-check skips it."
    )
