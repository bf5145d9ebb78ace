"""Shared test set-up: everything runs offline; one local Ray cluster, one math grader and one
copy of each offline model per session, one fake LLM server per module; tests that need Ray or a
model are marked slow. Worker doubles are in conductor_rl/testing/workers.py.

`-m "not slow"` leaves out whatever loads a real model, starts Ray or vLLM, runs a
training job in a subprocess or otherwise takes more than a couple of seconds:
`bash scripts/test.sh -m "not slow" -n 2` is the quick subset for iteration."""

import os
import sys
import tempfile

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A benchmark a test runs keeps its result here, not in benchmarks/results/ (which holds quoted figures).
os.environ.setdefault("CONDUCTOR_RL_RESULTS_DIR", tempfile.mkdtemp(prefix="conductor-rl-results-"))
# Ray 2.60 turns token authentication on by default; a local test cluster does not need it.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")


# Fixtures that make a test slow: a Ray cluster takes seconds to start (its actors more), and a
# real model seconds to load and to generate with on a CPU.
SLOW_FIXTURES = {"ray_cluster", "tiny_qwen2", "smollm2"}


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses a slow fixture, directly or through another fixture, is marked slow.
    scripts/test.sh runs the heavy slow tests on two pytest-xdist workers, a module whole on one, so that
    a module's tests share its fixtures and each worker its Ray cluster; the quick ones run in a third
    process beside them, while the slow ones wait on processes, servers and timeouts. Slow tests marked
    `light` (real models in this process, sandboxes, timeouts; no Ray, vLLM, learner or training process)
    run in the quick process, after the quick tests."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if SLOW_FIXTURES & fixtures:
            item.add_marker(pytest.mark.slow)
        # `light` slow tests run beside the heavy ones, so they may not start a Ray cluster.
        if item.get_closest_marker("light") and "ray_cluster" in fixtures:
            raise pytest.UsageError(f"{item.nodeid} is marked light but uses ray_cluster: a light test starts no Ray")


@pytest.fixture(scope="session")
def ray_cluster():
    """A real local Ray cluster (on 127.0.0.1), started once for the whole test session.
    Tests that need Ray take this fixture; the rest never import Ray."""
    import ray

    from tests.ray_clusters import LOCAL_RAY

    ray.init(**LOCAL_RAY)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def math_grader():
    """One math-verify grader (and its child process) for the session. A test that kills or
    hangs the child makes its own."""
    from conductor_rl.grading import MathGrader

    with MathGrader() as grader:
        yield grader


@pytest.fixture(scope="session")
def tiny_qwen2():
    """(model, tokenizer) of the random tiny-qwen2, loaded once. Read only: a test that changes
    weights loads its own copy with `load_causal_lm`."""
    from conductor_rl.models import load_causal_lm

    return load_causal_lm("tiny-qwen2")


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of SmolLM2-135M, loaded once. Read only, as `tiny_qwen2`."""
    from conductor_rl.models import load_causal_lm

    return load_causal_lm("smollm2-135m")


@pytest.fixture(scope="module")
def server():
    """The fake LLM server (conductor_rl/testing/fake_llm_server.py) in a thread of this process, one
    per test module. A module that serves it otherwise (in a Ray actor) defines its own `server`."""
    from conductor_rl.testing.fake_llm_server import FakeLLMServer

    with FakeLLMServer() as srv:
        yield srv


@pytest.fixture
def fresh(server, monkeypatch):
    """The fake key in the environment, and a server with no faults, limit or latency. A module whose
    every test talks to the server takes it for all: `pytestmark = pytest.mark.usefixtures("fresh")`."""
    from tests.http_fakes import FAKE_KEY, KEY_ENV

    monkeypatch.setenv(KEY_ENV, FAKE_KEY)
    server.reset(latency_s=0.0)


@pytest.fixture
def light_system(monkeypatch):
    """`build_system` with the real worker pools, cost ledger and grader pool, and stand-ins for
    the generator and the learner (tests/light_system.py). `light_system.spread` sets which workers
    the plans use."""
    import jobs.training_system as ts
    from tests.light_system import light_build

    build = light_build()
    monkeypatch.setattr(ts, "build_system", build)
    return build


@pytest.fixture
def no_cluster(monkeypatch):
    """Fail the test if the job gets as far as starting Ray or any actor; afterwards, Ray is as it was."""
    import jobs.evaluate as je
    import jobs.ray_cluster as rc
    import jobs.training_system as ts

    def refuse(*_args, **_kwargs):
        raise AssertionError("the job went on to start Ray and its actors instead of failing first")

    monkeypatch.setattr(rc, "start_ray", refuse)
    monkeypatch.setattr(ts, "build_system", refuse)
    monkeypatch.setattr(ts, "start_worker_pools", refuse)
    monkeypatch.setattr(je, "Runner", refuse)
    ray_before = "ray" in sys.modules and sys.modules["ray"].is_initialized()
    yield
    if not ray_before:
        assert not ("ray" in sys.modules and sys.modules["ray"].is_initialized()), "Ray was initialised"
