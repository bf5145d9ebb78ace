"""The `tracking` section: which experiment trackers a run writes to besides its own files
(`train.loggers`, `evaluate.loggers`), and how to reach them (conductor_rl/run/trackers.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from conductor_rl.config.strict import Strict

#: The experiment trackers a run can write to.
Logger = Literal["tensorboard", "wandb", "mlflow"]


class TrackingConfig(Strict):
    """Where `wandb` and `mlflow` runs go. Credentials come from the environment as each tool reads them
    (WANDB_API_KEY; MLflow's server's own), never from the configuration."""

    wandb_project: str = Field("conductor-rl", description="The Weights & Biases project of every run.")
    wandb_entity: str | None = Field(None, description="The W&B team or user (None: the key's default).")
    wandb_mode: Literal["online", "offline"] = Field(
        "online",
        description="offline: the run is written under <output>/wandb only (`wandb sync` uploads it later); "
        "online needs WANDB_API_KEY (or `wandb login`), checked at start.",
    )
    mlflow_tracking_uri: str | None = Field(
        None,
        description="An MLflow tracking server (http://...) or store; None: a local file store in <output>/mlruns "
        "(`mlflow ui --backend-store-uri <output>/mlruns`).",
    )
    mlflow_experiment: str = Field("conductor-rl", description="The MLflow experiment of every run.")
