"""Shared test set-up: everything runs offline; one local Ray cluster per session."""

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Ray 2.60 turns token authentication on by default; a local test cluster does not need it.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster (on 127.0.0.1), started once for the whole test session.
    Tests that need Ray take this fixture; the rest never import Ray."""
    import ray

    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    yield ray
    ray.shutdown()
