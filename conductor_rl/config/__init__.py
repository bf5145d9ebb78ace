"""Configuration: pydantic models whose defaults reproduce the paper
(`sections`), loaded from YAML with `key.sub=value` overrides (`loading`).

    from conductor_rl.config import load_config
    config = load_config("configs/paper.yaml", ["learner.lr=2e-6"])

An invalid setting fails at start with a `ConfigError` that names the key.
"""

from .answering import AskConfig, ServeConfig
from .evaluating import EvaluateConfig
from .infrastructure import ClusterConfig, GraderConfig, SandboxConfig
from .loading import CONFIG_DIR, DEFAULT_CONFIG, apply_override, is_override, load_config, validate_config
from .sections import (
    WEIGHT_TRANSFER_TRANSPORTS,
    ConductorConfig,
    Config,
    DataConfig,
    GeneratorConfig,
    LearnerConfig,
    MixConfig,
    TrainConfig,
    WeightTransferTransport,
    WorkflowConfig,
)
from .strict import ConfigError, Strict
from .tracking import TrackingConfig
from .workers import (
    HTTP_PROVIDERS,
    OFFLINE_PROVIDERS,
    REASONING_LEVELS,
    SEAT_EXAMPLE,
    HttpProvider,
    OfflineProvider,
    Price,
    Reasoning,
    ServeSpec,
    SimSpec,
    WorkerConfig,
    answering_workers,
    missing_seat,
    model_ids,
    seat_of,
    seat_places,
)
from .workers import _paper_workers as _paper_workers  # the paper's pool, for tests and docs

__all__ = [
    "CONFIG_DIR",
    "DEFAULT_CONFIG",
    "HTTP_PROVIDERS",
    "OFFLINE_PROVIDERS",
    "REASONING_LEVELS",
    "SEAT_EXAMPLE",
    "WEIGHT_TRANSFER_TRANSPORTS",
    "AskConfig",
    "ClusterConfig",
    "ConductorConfig",
    "Config",
    "ConfigError",
    "DataConfig",
    "EvaluateConfig",
    "GeneratorConfig",
    "GraderConfig",
    "HttpProvider",
    "LearnerConfig",
    "MixConfig",
    "OfflineProvider",
    "Price",
    "Reasoning",
    "SandboxConfig",
    "ServeConfig",
    "ServeSpec",
    "SimSpec",
    "Strict",
    "TrackingConfig",
    "TrainConfig",
    "WeightTransferTransport",
    "WorkerConfig",
    "WorkflowConfig",
    "answering_workers",
    "apply_override",
    "is_override",
    "load_config",
    "missing_seat",
    "model_ids",
    "seat_of",
    "seat_places",
    "validate_config",
]
