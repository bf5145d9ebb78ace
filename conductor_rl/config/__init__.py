"""Configuration: pydantic models whose defaults reproduce the paper
(`sections`), loaded from YAML with `key.sub=value` overrides (`loading`).

    from conductor_rl.config import load_config
    config = load_config("configs/paper.yaml", ["learner.lr=2e-6"])

An invalid setting fails at start with a `ConfigError` that names the key.
"""

from .loading import CONFIG_DIR, DEFAULT_CONFIG, apply_override, is_override, load_config, validate_config
from .sections import (WEIGHT_TRANSFER_TRANSPORTS, AskConfig, ClusterConfig, Config, ConductorConfig, DataConfig,
                       EvaluateConfig, GeneratorConfig, GraderConfig, LearnerConfig, MixConfig, SandboxConfig,
                       ServeConfig, TrainConfig, WeightTransferTransport, WorkflowConfig)
from .strict import ConfigError, Strict
from .workers import (HTTP_PROVIDERS, OFFLINE_PROVIDERS, REASONING_LEVELS, HttpProvider, OfflineProvider, Price,
                      Reasoning, ServeSpec, SimSpec, WorkerConfig, _paper_workers)

__all__ = [
    "CONFIG_DIR", "DEFAULT_CONFIG", "HTTP_PROVIDERS", "OFFLINE_PROVIDERS", "WEIGHT_TRANSFER_TRANSPORTS",
    "AskConfig", "ClusterConfig", "Config", "ConductorConfig", "ConfigError", "DataConfig", "EvaluateConfig",
    "GeneratorConfig", "GraderConfig", "HttpProvider", "LearnerConfig", "MixConfig", "OfflineProvider", "Price", "REASONING_LEVELS", "Reasoning", "ServeSpec",
    "SandboxConfig", "ServeConfig", "SimSpec", "Strict", "TrainConfig", "WeightTransferTransport", "WorkerConfig",
    "WorkflowConfig", "apply_override", "is_override", "load_config", "validate_config",
]
