"""The sections of where a job runs: the actors' Ray resources (`cluster`) and the grader pool with its
sandbox (`grader`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from conductor_rl.config.strict import Strict


class ClusterConfig(Strict):
    """Where each actor type runs: Ray resources per actor ('CPU', 'GPU', or a
    custom resource a node type declares, see ray_cluster.yaml). Empty: one GPU
    per generator engine (x tensor parallel) and learner rank where the cluster
    has GPUs, else one CPU."""

    address: str | None = Field(
        None,
        description="Ray cluster to join ('auto', 'ray://host:10001'); None: "
        "RAY_ADDRESS if set (ray job submit sets it), else a local cluster in this process.",
    )
    local_cpus: int | None = Field(None, ge=1, description="Logical CPUs of a local cluster (None: this machine's).")
    dashboard: bool = Field(
        False,
        description="Start a local cluster with the Ray dashboard on 127.0.0.1 and print "
        "its address (`conductor-rl train --dashboard`); a joined cluster has its own.",
    )
    generator: dict[str, float] = Field(default_factory=dict, description="Resources of one generator engine.")
    learner: dict[str, float] = Field(default_factory=dict, description="Resources of one learner rank.")
    worker: dict[str, float] = Field(default_factory=lambda: {"CPU": 0.25}, description="Resources of one WorkerActor.")
    grader: dict[str, float] = Field(default_factory=lambda: {"CPU": 1.0}, description="Resources of one GraderActor.")
    fit_check: Literal["refuse", "warn", "off"] = Field(
        "refuse",
        description="Before any actor starts, check that the cluster's nodes can hold every actor the job "
        "starts (docs/guide/cluster.md, 'Will it fit?'). refuse: stop at once with the numbers and the settings to "
        "change (a warning only where an autoscaler whose node types Ray does not report may add nodes); warn: log "
        "them and start anyway; off: no check.",
    )

    @field_validator("generator", "learner", "worker", "grader")
    @classmethod
    def _non_negative(cls, value: dict[str, float]) -> dict[str, float]:
        for name, amount in value.items():
            if amount < 0:
                raise ValueError(f"resource {name!r} = {amount} must be >= 0")
        return value


class SandboxConfig(Strict):
    """Limits of one sandboxed program run (conductor_rl/grading/sandbox.py)."""

    timeout_s: float = Field(
        10.0, gt=0.0, description="Wall-clock limit of one program run (one test, for per-test runs)."
    )
    memory_mb: int = Field(512, ge=64, description="Address-space limit (RLIMIT_AS) of the program.")
    max_output_bytes: int = Field(
        1 << 20, ge=1024, description="Kept bytes of stdout and of stderr; more kills the program."
    )
    max_processes: int = Field(64, ge=1, description="Processes and threads allowed (pids cgroup, when writable).")
    max_file_mb: int = Field(64, ge=1, description="Largest file the program may write, and the size of its /tmp.")
    require_isolation: bool = Field(
        True,
        description="Refuse to run code without bubblewrap (a run that grades code stops at start). false: "
        "the fallback (rlimits, an empty environment, no network where `unshare` works, a grader whose "
        "environment its programs cannot read; a WRITABLE file system), with a warning.",
    )


class GraderConfig(Strict):
    """The grader pool (actors/grader.py) and its sandbox."""

    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    actors: int = Field(2, ge=1, description="GraderActors in the pool.")
    concurrency: int = Field(4, ge=1, description="Sandboxes running at once in each GraderActor.")
    sample_timeout_s: float = Field(
        120.0, gt=0.0, description="Longest one answer's grading may take (all its tests) before it is an ERROR."
    )
    max_restarts: int = Field(3, ge=0, description="How often Ray restarts a crashed GraderActor.")
