"""Configuration: paper defaults, shipped YAML files, `key.sub=value`
overrides, and errors that always name the offending key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conductor_rl.config import (
    CONFIG_DIR,
    DEFAULT_CONFIG,
    OFFLINE_PROVIDERS,
    Config,
    ConfigError,
    apply_override,
    is_override,
    load_config,
    validate_config,
)

PAPER_WORKERS = [
    "gpt-6.1-sol",
    "gemini-3.8-flash",
    "claude-sonnet-4-6",
    "qwen3-32b",
    "qwen3-32b-thinking",
    "deepseek-r1-distill-qwen-32b",
    "gemma-3-27b-it",
]


def sim_worker(name: str, **extra: object) -> dict:
    return {"name": name, "provider": "sim", "sim": {"accuracy": {"default": 0.5}}, **extra}


def two_workers() -> dict:
    return {"workers": [sim_worker("a"), sim_worker("b", temperature=0.3)]}


@pytest.fixture
def write(tmp_path: Path):
    def _write(content: object, name: str = "config.yaml") -> Path:
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
        return path

    return _write


def error_of(fn, *args) -> str:
    with pytest.raises(ConfigError) as info:
        fn(*args)
    return str(info.value)


# --------------------------------------------------------------------------- defaults


def test_defaults_reproduce_the_paper():
    for config in (Config(), validate_config({})):
        c = config.conductor
        assert (c.temperature, c.max_new_tokens, c.max_steps, c.n_examples) == (1.0, 1024, 5, 4)
        assert [w.name for w in config.workers] == PAPER_WORKERS
        for worker in config.workers:
            assert worker.temperature == 0.2
            assert worker.max_tokens == 4096
            assert worker.provider != "sim" and worker.model and worker.sim is None
        assert len({w.provider for w in config.workers}) >= 4  # OpenAI, Google, Anthropic, open models


def test_the_unconstrained_setting_is_the_papers_pool_at_each_models_maximum():
    from conductor_rl.workers.request_shape import shape_problems

    constrained, free = load_config("configs/paper.yaml"), load_config("configs/paper-unconstrained.yaml")
    assert (constrained.workflow.budgets, free.workflow.budgets) == ("constrained", "unconstrained")
    assert free.grader.sandbox.require_isolation and free.data == constrained.data  # all else is paper.yaml's
    for low, high in zip(constrained.workers, free.workers, strict=True):
        assert (high.name, high.model, high.price) == (low.name, low.model, low.price)
        assert high.max_tokens > low.max_tokens == 4096 and shape_problems(high) == []
    assert [w.reasoning for w in free.workers[:3]] == ["high"] * 3  # minimal in the constrained setting
    served = {w.name: w for w in free.workers if w.serve is not None}
    assert all(w.max_tokens < w.serve.engine_args["max_model_len"] for w in served.values())


def test_the_paper_yaml_and_the_default_pool_are_one_pool():
    assert load_config("configs/paper.yaml").workers == Config().workers


def test_paper_api_workers_have_prices_and_key_variables():
    workers = {w.name: w for w in Config().workers}
    assert workers["gpt-6.1-sol"].api_key_env == "OPENAI_API_KEY"
    assert workers["claude-sonnet-4-6"].provider == "anthropic"
    assert workers["gemini-3.8-flash"].provider == "google"
    for name in PAPER_WORKERS[:3]:
        assert workers[name].price.input > 0 and workers[name].price.output > workers[name].price.input
    for name in PAPER_WORKERS[3:]:
        # Served on the cluster's GPU node by the jobs themselves: no address to point at.
        assert workers[name].provider == "openai_compatible" and workers[name].serve is not None
        assert workers[name].base_url is None and workers[name].serve.gpus == 1
        # Priced as a serving provider charges, not $0: $/sample compares across the pool.
        assert 0 < workers[name].price.input <= workers[name].price.output < 1
    # Qwen3 with and without thinking: two workers, one server.
    assert workers["qwen3-32b"].serve == workers["qwen3-32b-thinking"].serve
    assert (workers["qwen3-32b"].reasoning, workers["qwen3-32b-thinking"].reasoning) == ("off", "default")
    for name in PAPER_WORKERS[:3]:
        assert workers[name].rpm and workers[name].tpm  # tier-1 limits, not unlimited
        assert workers[name].reasoning in ("minimal", "off")


def test_empty_yaml_file_gives_the_defaults(write):
    assert load_config(write("")) == Config()
    assert load_config(write("# only a comment\n")) == Config()


def test_config_round_trips_through_yaml(write):
    original = validate_config(two_workers())
    again = load_config(write(original.model_dump(mode="json")))
    assert again == original


# --------------------------------------------------------------------------- shipped files

SHIPPED = sorted(CONFIG_DIR.glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_configs_load(path):
    config = load_config(path)
    assert config.workers
    assert len({w.name for w in config.workers}) == len(config.workers)


def test_shipped_configs_are_there():
    assert {p.name for p in SHIPPED} >= {DEFAULT_CONFIG, "paper.yaml"}


def test_embedded_default_is_local_yaml():
    config = load_config()
    assert config == load_config(CONFIG_DIR / DEFAULT_CONFIG)
    # The embedded configuration must run offline.
    assert all(w.provider in OFFLINE_PROVIDERS for w in config.workers), [w.provider for w in config.workers]
    overridden = load_config(None, ["conductor.temperature=0.5"])
    assert overridden.conductor.temperature == 0.5


def test_paper_yaml_has_the_paper_setting():
    config = load_config(CONFIG_DIR / "paper.yaml")
    c = config.conductor
    assert (c.temperature, c.max_new_tokens, c.max_steps, c.n_examples) == (1.0, 1024, 5, 4)
    assert [w.name for w in config.workers] == PAPER_WORKERS
    assert all(w.temperature == 0.2 and w.max_tokens == 4096 and w.sim is None for w in config.workers)
    assert config.workers == Config().workers  # the file spells out the defaults' pool
    assert (config.learner.world_size, config.learner.zero_stage) == (2, 3)  # 2 x 80 GB, as the paper ran it


def test_a_runs_optimizer_steps_count_every_epoch_and_each_warm_start_step():
    """The learning-rate schedule's length, which the training job and the iteration benchmark both take."""
    config = load_config(None, ["train.iterations=8", "learner.epochs=2", "train.warm_start.steps=12"])
    assert config.optimizer_steps() == 8 * 2 + 12
    assert load_config(None, ["train.iterations=8", "train.warm_start.steps=0"]).optimizer_steps() == 8


# --------------------------------------------------------------------------- overrides


def test_nested_override(write):
    config = load_config(write(two_workers()), ["conductor.temperature=0.7", "workflow.max_context_chars=5000"])
    assert config.conductor.temperature == 0.7
    assert config.workflow.max_context_chars == 5000
    assert config.conductor.max_new_tokens == 1024  # untouched keys keep their defaults


def test_list_index_overrides(write):
    path = write(two_workers())
    config = load_config(
        path, ["workers.0.temperature=0.5", "workers.1.sim.accuracy.math=0.9", "workers.1.price.output=2.5"]
    )
    assert config.workers[0].temperature == 0.5
    assert config.workers[1].temperature == 0.3
    assert config.workers[1].sim.accuracy == {"default": 0.5, "math": 0.9}
    assert config.workers[1].price.output == 2.5
    # The file itself is unchanged.
    assert load_config(path).workers[0].temperature == 0.2


def test_list_index_override_on_default_workers(write):
    # The file has no workers: the override applies to the paper's default pool.
    config = load_config(write({"conductor": {"temperature": 0.9}}), ["workers.2.temperature=0.6"])
    assert [w.name for w in config.workers] == PAPER_WORKERS
    assert config.workers[2].temperature == 0.6
    assert config.workers[0].temperature == 0.2
    assert config.conductor.temperature == 0.9


def test_override_values_are_yaml(write):
    path = write(two_workers())
    config = load_config(
        path,
        [
            "conductor.seed=3",
            "ask.questions=[What is 2+2, Name a prime]",
            "workers.0.sim.accuracy={math: 1, mmlu: 0.25}",
            "data.limit=null",
            "workers.0.reasoning_budget=1024",
            "data.questions=jsonl:/tmp/x.jsonl",
        ],
    )
    assert config.conductor.seed == 3
    assert config.ask.questions == ["What is 2+2", "Name a prime"]
    assert config.workers[0].sim.accuracy == {"math": 1.0, "mmlu": 0.25}
    assert config.data.limit is None
    assert config.workers[0].reasoning_budget == 1024
    assert config.data.questions == "jsonl:/tmp/x.jsonl"  # the first '=' splits key from value


def test_apply_override_parses_yaml_and_copies():
    raw = {"a": {"b": 1}, "l": [{"x": 1}, {"x": 2}]}
    assert apply_override(raw, "a.flag=true") == {"a": {"b": 1, "flag": True}, "l": raw["l"]}
    assert apply_override(raw, "a.list=[1,2]")["a"]["list"] == [1, 2]
    assert apply_override(raw, "a.map={a: 1}")["a"]["map"] == {"a": 1}
    assert apply_override(raw, "a.b=")["a"]["b"] == ""
    assert apply_override(raw, "l.1.x=5")["l"] == [{"x": 1}, {"x": 5}]
    assert apply_override(raw, "new.deep.key=x")["new"] == {"deep": {"key": "x"}}
    assert apply_override(raw, " a.b = 2")["a"]["b"] == 2
    assert raw == {"a": {"b": 1}, "l": [{"x": 1}, {"x": 2}]}  # never mutated


def test_later_override_wins(write):
    config = load_config(write(two_workers()), ["conductor.seed=1", "conductor.seed=2"])
    assert config.conductor.seed == 2


def test_bool_override(write):
    config = load_config(write(two_workers()), ["workflow.show_question=true"])
    assert config.workflow.show_question is True
    config = load_config(write(two_workers()), ["workflow.show_question=false"])
    assert config.workflow.show_question is False


# --------------------------------------------------------------------------- errors name the key


def test_unknown_top_level_key():
    message = error_of(validate_config, {"conductr": {}})
    assert "conductr" in message and "unknown key" in message
    for allowed in ("conductor", "workers", "workflow"):
        assert allowed in message


def test_unknown_nested_key_lists_allowed_keys():
    message = error_of(validate_config, {"conductor": {"temprature": 1.0}})
    assert "conductor.temprature" in message
    for allowed in ("temperature", "max_new_tokens", "max_steps", "n_examples"):
        assert allowed in message


def test_unknown_key_inside_a_worker():
    message = error_of(validate_config, {"workers": [sim_worker("a", temprature=0.1)]})
    assert "workers.0.temprature" in message and "temperature" in message
    message = error_of(validate_config, {"workers": [sim_worker("a", sim={"acuracy": {}})]})
    assert "workers.0.sim.acuracy" in message and "accuracy" in message and "latency_s" in message
    message = error_of(validate_config, {"workers": [sim_worker("a", price={"inpt": 1})]})
    assert "workers.0.price.inpt" in message and "cached_input" in message


def test_unknown_key_via_override(write):
    message = error_of(load_config, write(two_workers()), ["workflow.step_timeout=3"])
    assert "workflow.step_timeout" in message and "step_timeout_s" in message


def test_bad_type():
    message = error_of(validate_config, {"conductor": {"max_new_tokens": "lots"}})
    assert "conductor.max_new_tokens" in message and "lots" in message
    message = error_of(validate_config, {"conductor": {"dtype": "float8"}})
    assert "conductor.dtype" in message
    message = error_of(validate_config, {"workers": [sim_worker("a", provider="carrier-pigeon")]})
    assert "workers.0.provider" in message
    message = error_of(validate_config, {"workers": {"a": 1}})
    assert "workers" in message
    message = error_of(validate_config, {"conductor": 5})
    assert "conductor" in message


@pytest.mark.parametrize(
    "key, value",
    [
        ("learner.lr", "true"),  # a float
        ("conductor.top_p", "false"),
        ("ask.temperature", "true"),  # an optional float
        ("conductor.max_steps", "true"),  # an int
        ("learner.zero_stage", "true"),  # a Literal of ints
        ("learner.betas", "[true, 0.999]"),  # inside a tuple
        ("cluster.worker", "{CPU: true}"),  # a dict's value
        ("workers.0.sim.accuracy", "{math: true}"),
    ],
)
def test_a_bool_for_a_number_is_refused(write, key, value):
    # pydantic alone would read true as 1.0: `lr: true` would train with a learning rate of 1.
    message = error_of(load_config, write(two_workers()), [f"{key}={value}"])
    assert f"{key}: " in message and "not true/false" in message
    section, name = key.split(".", 1)
    if "." not in name and section != "workers":
        message = error_of(load_config, write({**two_workers(), section: {name: yaml.safe_load(value)}}))
        assert f"{key}: " in message and "not true/false" in message  # the same from the YAML file


def test_bools_and_numbers_still_load(write):
    config = load_config(write(two_workers()), ["workflow.show_question=false", "learner.lr=1", "ask.temperature=0"])
    assert config.workflow.show_question is False and config.learner.lr == 1.0 and config.ask.temperature == 0.0


def test_bad_type_via_override(write):
    message = error_of(load_config, write(two_workers()), ["workers.1.max_tokens=many"])
    assert "workers.1.max_tokens" in message and "many" in message


@pytest.mark.parametrize(
    "raw,key",
    [
        ({"conductor": {"temperature": -0.1}}, "conductor.temperature"),
        ({"conductor": {"max_steps": 0}}, "conductor.max_steps"),
        ({"conductor": {"n_examples": 5}}, "conductor.n_examples"),
        ({"conductor": {"top_p": 0}}, "conductor.top_p"),
        ({"workers": [sim_worker("a", temperature=-1)]}, "workers.0.temperature"),
        ({"workers": [sim_worker("a", max_tokens=0)]}, "workers.0.max_tokens"),
        ({"workers": [sim_worker("a", sim={"accuracy": {"math": 1.5}})]}, "workers.0.sim.accuracy"),
        ({"workers": [sim_worker("a", sim={"fail_rate": 2})]}, "workers.0.sim.fail_rate"),
        ({"workers": [sim_worker("a", price={"input": -1})]}, "workers.0.price.input"),
        ({"workflow": {"step_timeout_s": 0}}, "workflow.step_timeout_s"),
        ({"workflow": {"max_context_chars": 10}}, "workflow.max_context_chars"),
    ],
)
def test_out_of_range_values(raw, key):
    assert key in error_of(validate_config, raw)


def test_negative_temperature_via_override(write):
    message = error_of(load_config, write(two_workers()), ["workers.0.temperature=-0.5"])
    assert "workers.0.temperature" in message and "-0.5" in message


def test_sim_worker_without_sim_section():
    message = error_of(validate_config, {"workers": [{"name": "s", "provider": "sim"}]})
    assert "workers.0" in message and "'s'" in message and "sim" in message


def test_non_sim_worker_without_model():
    message = error_of(validate_config, {"workers": [sim_worker("a"), {"name": "remote", "provider": "openai"}]})
    assert "workers.1" in message and "'remote'" in message and "model" in message


def test_worker_needs_name_and_provider():
    message = error_of(validate_config, {"workers": [{"provider": "sim", "sim": {}}]})
    assert "workers.0.name" in message
    message = error_of(validate_config, {"workers": [{"name": "x", "model": "m"}]})
    assert "workers.0.provider" in message


def test_collective_weight_sync_needs_vllm_engines():
    message = error_of(validate_config, {"generator": {"backend": "transformers", "weight_sync": "gloo"}})
    assert "generator" in message and "weight_sync=gloo" in message and "object_store" in message
    validate_config({"generator": {"backend": "transformers", "weight_sync": "auto"}})


def test_weight_sync_resolves_by_hardware():
    from actors.weight_sync import resolve_weight_sync

    assert resolve_weight_sync("auto", "vllm", gpus=0) == "shared_memory"  # object_store off the node
    assert resolve_weight_sync("auto", "vllm", gpus=2) == "nccl"
    assert resolve_weight_sync("auto", "vllm", gpus=1) == "ipc"  # learner and engine share the one GPU
    assert resolve_weight_sync("auto", "transformers", gpus=2) == "shared_memory"
    assert resolve_weight_sync("gloo", "vllm", gpus=0) == "gloo"
    for setting in ("nccl", "ipc"):
        with pytest.raises(ValueError, match=f"weight_sync={setting} needs GPUs"):
            resolve_weight_sync(setting, "vllm", gpus=0)


def test_duplicate_worker_names():
    message = error_of(validate_config, {"workers": [sim_worker("twin"), sim_worker("other"), sim_worker("twin")]})
    assert "workers" in message and "unique" in message and "twin" in message
    assert "other" not in message.split("repeated:")[1].split("(got")[0]


def test_empty_worker_list():
    message = error_of(validate_config, {"workers": []})
    assert "workers" in message and "at least one worker" in message


def test_all_problems_are_reported_at_once():
    message = error_of(validate_config, {"conductor": {"temperature": -1, "max_steps": 0}, "bogus": 1})
    for key in ("conductor.temperature", "conductor.max_steps", "bogus"):
        assert key in message


@pytest.mark.parametrize("override", ["foo", "conductor.temperature", "=3", " =3"])
def test_malformed_override(write, override):
    message = error_of(load_config, write(two_workers()), [override])
    assert "key.sub=value" in message and override.strip() in message


def test_unknown_section_in_an_override_is_named(write):
    message = error_of(load_config, write(two_workers()), ["nonsense.key=1"])
    assert message.startswith("unknown configuration section 'nonsense' in override nonsense.key=1; sections are: ")
    assert "conductor" in message and "learner" in message


def test_is_override_rule():
    for item in (
        "conductor.seed=3",
        "workers.0.temperature=0.5",
        "workers=[]",
        "nonsense.key=1",
        "conductor.response_prefix=model_id = [",
        "cluster.worker.CPU=1",
    ):
        assert is_override(item), item
    for item in ("x=5, what is x?", "If a=b then?", "What is 2+2?", "a.b = c", "Conductor.seed=3", "nonsense=1", ""):
        assert not is_override(item), item


@pytest.mark.parametrize("command", ["train", "ask"])
def test_command_line_names_an_unknown_section(command):
    from jobs import cli
    from jobs.common import split_overrides

    assert split_overrides(["nonsense.key=1", "What is 2+2?"]) == (["nonsense.key=1"], ["What is 2+2?"])
    with pytest.raises(SystemExit) as info:  # before any run starts: the configuration is read first
        cli.main([command, "nonsense.key=1"])
    assert "unknown configuration section 'nonsense' in override nonsense.key=1" in str(info.value)


def test_override_value_not_yaml(write):
    message = error_of(load_config, write(two_workers()), ["ask.questions=[unclosed"])
    assert "ask.questions" in message and "YAML" in message


@pytest.mark.parametrize(
    "override,where",
    [
        ("workers.2.temperature=0.5", "workers.2"),
        ("workers.-1.temperature=0.5", "workers.-1"),
        ("workers.first.temperature=0.5", "workers.first"),
        ("workers.99=1", "workers.99"),
    ],
)
def test_bad_list_index(write, override, where):
    message = error_of(load_config, write(two_workers()), [override])
    assert where in message and "index below 2" in message


def test_override_into_a_scalar(write):
    message = error_of(
        load_config, write({**two_workers(), "conductor": {"temperature": 0.3}}), ["conductor.temperature.low=0.1"]
    )
    assert "conductor.temperature.low" in message and "'conductor.temperature' is a value" in message
    message = error_of(load_config, write(two_workers()), ["workers.0.name.first=x"])
    assert "'workers.0.name' is a value" in message


def test_override_into_a_default_scalar(write):
    # The key exists only as a default: the error still names it.
    message = error_of(load_config, write(two_workers()), ["conductor.seed.x=1"])
    assert "conductor.seed" in message


def test_missing_config_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    message = error_of(load_config, missing)
    assert str(missing) in message and "does not exist" in message


@pytest.mark.parametrize("content", ["- a\n- b\n", "just a string\n", "42\n"])
def test_non_mapping_yaml(write, content):
    path = write(content)
    message = error_of(load_config, path)
    assert str(path) in message and "mapping" in message


@pytest.mark.parametrize("content", ["conductor: [unclosed\n", "a: b: c\n", "conductor:\n\ttemperature: 1\n"])
def test_invalid_yaml(write, content):
    path = write(content)
    message = error_of(load_config, path)
    assert str(path) in message and "not valid YAML" in message


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_assignment_is_validated():
    config = validate_config(two_workers())
    with pytest.raises(ValueError):
        config.conductor.temperature = -1.0
    with pytest.raises(ValueError):
        config.workers = []


def test_a_config_file_may_start_from_a_base_merging_sections_key_by_key(tmp_path):
    (tmp_path / "base.yaml").write_text("train:\n  iterations: 3\n  seed: 7\ndata:\n  questions: samples:gsm8k\n")
    (tmp_path / "top.yaml").write_text("base: base.yaml\ntrain:\n  iterations: 5\n")
    config = load_config(tmp_path / "top.yaml")
    assert (config.train.iterations, config.train.seed, config.data.questions) == (5, 7, "samples:gsm8k")


def test_a_base_that_leads_back_to_its_file_or_is_missing_is_refused_by_name(tmp_path):
    (tmp_path / "a.yaml").write_text("base: b.yaml\n")
    (tmp_path / "b.yaml").write_text("base: a.yaml\n")
    with pytest.raises(ConfigError, match="leads back to itself"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("base: nowhere.yaml\n")
    with pytest.raises(ConfigError, match="nowhere.yaml does not exist"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("base: [local.yaml]\n")
    with pytest.raises(ConfigError, match="base must name another config file"):
        load_config(tmp_path / "d.yaml")


def test_the_routing_preset_is_the_embedded_default_with_the_domain_only_pool():
    routing, embedded = load_config(CONFIG_DIR / "local-routing.yaml"), load_config()
    assert [w.name for w in routing.workers] == [w.name for w in embedded.workers]
    assert all(w.sim.keep_rate is None and w.sim.hard_accuracy is None for w in routing.workers)
    assert all(w.sim.keep_rate is not None and w.sim.hard_accuracy for w in embedded.workers)
    assert routing.conductor == embedded.conductor and routing.learner == embedded.learner
    assert not routing.train.subtask_text_in_loss and embedded.train.subtask_text_in_loss


def test_the_recursive_fine_tune_preset_is_the_papers():
    """configs/paper-recursion.yaml: the paper's pool with the Conductor's seat, 20 iterations on 350
    questions over LiveCodeBench and RLPR (175 each: the mixture weighs domains equally), one call
    forced in half of each batch, non-recursive rollouts discounted by 0.25, from a trained Conductor."""
    paper, preset = load_config("configs/paper.yaml"), load_config("configs/paper-recursion.yaml")
    assert preset.workers[:-1] == paper.workers and preset.workers[-1].provider == "conductor"
    assert preset.conductor.max_depth == 1 and preset.conductor.model == "runs/paper"
    assert (preset.train.iterations, preset.mix.total) == (20, 350)
    assert preset.mix.sources == ["livecodebench:v1", "rlpr:train"]
    assert preset.data.questions == f"mixture:{preset.mix.output}"
    assert (preset.train.recursion.forced_share, preset.train.recursion.discount) == (0.5, 0.25)


def test_training_starts_from_a_trained_run_folders_newest_checkpoint(tmp_path):
    import json as json_

    from jobs.run_control import from_trained_conductor

    for iteration in (3, 7):
        model = tmp_path / "run" / "checkpoints" / f"ckpt-{iteration:06d}" / "model"
        model.mkdir(parents=True)
        (model / "config.json").write_text("{}")
        (model / "model.safetensors").write_bytes(b"")
        (model.parent / "state.json").write_text(json_.dumps({"iteration": iteration}))
    config = validate_config({"conductor": {"model": str(tmp_path / "run")}})
    assert from_trained_conductor(config).conductor.model == str(model.resolve())
    assert from_trained_conductor(Config()).conductor.model == Config().conductor.model  # a Hub id stays
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="conductor.model=.*holds no model"):
        from_trained_conductor(validate_config({"conductor": {"model": str(tmp_path / "empty")}}))


def test_showing_the_answer_format_the_last_step_is_never_given_is_refused():
    with pytest.raises(ConfigError, match="workflow.answer_format=false"):
        load_config(None, ["conductor.show_answer_format=true", "workflow.answer_format=false"])
    assert load_config(None, ["conductor.show_answer_format=true"]).conductor.show_answer_format


SEAT = "workers.3={name: conductor, provider: conductor}"  # the Conductor's own seat, for recursion


@pytest.mark.parametrize(
    ("setting", "other", "named"),
    [
        ("train.choice_centering=1", "conductor.constrain_format=false", "conductor.constrain_format=true"),
        ("train.choice_centering=0.5", "learner.aggregation=sequence_mean", "learner.aggregation=token_mean"),
        ("train.choice_centering=1", ("conductor.max_depth=1", SEAT), "conductor.max_depth=0"),
        ("train.worker_logprob=roster", "train.worker_subset=[1,2]", "train.worker_subset unset"),
        ("train.worker_logprob=roster", "conductor.constrain_format=false", "conductor.constrain_format=true"),
    ],
)
def test_centering_and_roster_log_probs_refuse_what_hides_the_worker_choices(setting, other, named):
    """train.choice_centering and train.worker_logprob=roster find the worker ids by their place in the
    constrained format, over one roster: a configuration without them is refused at start, naming both keys."""
    key = setting.split("=")[0]
    with pytest.raises(ConfigError, match=re.escape(named)) as refused:
        load_config(None, [setting, *([other] if isinstance(other, str) else other)])
    assert key in str(refused.value)
    load_config(None, [setting])  # the embedded default has what both need
