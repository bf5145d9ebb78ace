"""Will the job fit? The check before any actor starts (conductor_rl/run/placement.py), with
the demands gathered from the configuration (conductor_rl/run/demands.py `job_demands`), and once
on a real 2-CPU Ray cluster, where the job must stop at once with the numbers instead of
waiting forever for its learner's placement group."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conductor_rl.config import ServeSpec, load_config
from conductor_rl.run.demands import job_demands, local_cpu_demand
from conductor_rl.run.placement import ClusterTooSmallError, Demand, Node, check_fit, require_fit

REPO = Path(__file__).resolve().parent.parent
# The new user's head: `ray start --head` on a 2-core machine, and the embedded default's actors
# (generator and learner rank each take the driver machine's CPUs: 2 here, pinned for any machine).
TWO_CORES = ["cluster.generator={CPU: 2}", "cluster.learner={CPU: 2}", "grader.actors=2"]
HEAD = Node("the head 192.0.2.2 (6f98455b)", {"CPU": 2.0, "memory": 1e10, "object_store_memory": 8e7}, head=True)
OVERRIDE = re.compile(r"(cluster\.\w+)='(\{[^']*\})'")


def demands(*overrides: str, config_file: str | None = None, **parts) -> list[Demand]:
    return job_demands(load_config(config_file, list(overrides)), has_gpus=False, **parts)


def yaml_nodes(live_only: bool = True) -> list[Node]:
    """ray_cluster.yaml's node types: min_workers of each up (the head once), the rest addable."""
    spec = yaml.safe_load((REPO / "ray_cluster.yaml").read_text())
    nodes = []
    for name, kind in spec["available_node_types"].items():
        resources = {k: float(v) for k, v in kind["resources"].items()}
        if name == spec["head_node_type"]:
            nodes.append(Node(name, resources, head=True))
            continue
        nodes += [Node(name, resources) for _ in range(kind.get("min_workers", 0))]
        more = kind.get("max_workers", 0) - kind.get("min_workers", 0)
        if more and not live_only:
            nodes.append(Node(name, resources, live=False, count=more))
    return nodes


def test_the_2_cpu_head_fails_with_the_numbers_and_the_settings():
    with pytest.raises(ClusterTooSmallError) as caught:
        require_fit(demands(*TWO_CORES), [HEAD])
    text = str(caught.value)
    assert "CPU: 6.75 / 2 / 2" in text  # asked / on the live nodes / the largest node
    assert "1 x learner rank" in text and "learner.world_size, cluster.learner" in text
    assert "generator.engines, cluster.generator" in text and "grader.actors, cluster.grader" in text
    assert "`ray start --head --num-cpus 7`" in text  # the fit by sharing CPUs
    assert "cluster.generator='{CPU: 0.5}'" in text


def test_every_sharing_fix_it_suggests_makes_the_job_fit():
    report = check_fit(demands(*TWO_CORES), [HEAD])
    assert not report.fits and not report.needed
    text = report.message()
    cpus = int(re.search(r"--num-cpus (\d+)", text).group(1))
    assert check_fit(demands(*TWO_CORES), [Node(HEAD.name, {**HEAD.resources, "CPU": cpus}, head=True)]).fits
    assert not check_fit(demands(*TWO_CORES), [Node(HEAD.name, {"CPU": cpus - 1}, head=True)]).fits  # the least
    lowered = [f"{key}={value}" for key, value in OVERRIDE.findall(text)]
    assert {o.split("=")[0] for o in lowered} == {
        "cluster.generator",
        "cluster.learner",
        "cluster.worker",
        "cluster.grader",
    }
    assert check_fit(demands(*TWO_CORES, *lowered), [HEAD]).fits


def test_sharing_on_several_nodes_names_the_node_to_restart():
    nodes = [
        Node("the head", {"CPU": 0.0}, head=True),
        Node("node 10.0.0.2 (aa)", {"CPU": 2.0}),
        Node("node 10.0.0.3 (bb)", {"CPU": 2.0}),
    ]
    report = check_fit(demands(*TWO_CORES), nodes)
    assert not report.fits
    command = re.search(r"start (node [^`]+) with `ray start --address=HEAD:6379 --num-cpus (\d+)`", report.message())
    assert command, report.message()
    grown = [Node(n.name, {"CPU": float(command.group(2))}) if n.name == command.group(1) else n for n in nodes]
    assert check_fit(demands(*TWO_CORES), grown).fits


def test_an_actor_cannot_span_nodes():
    """7.5 CPUs asked, 8 on the cluster, but 2.5 fit only once into each 4-CPU node."""
    job = [Demand("grader", {"CPU": 2.5}, 3, "grader.actors", 3, "cluster.grader")]
    report = check_fit(job, [Node("a", {"CPU": 4.0}), Node("b", {"CPU": 4.0})])
    assert not report.fits and report.unplaced == {"grader": 1}
    assert "grader.actors=2 (now 3)" in report.message()
    assert check_fit(job, [Node("a", {"CPU": 5.0}), Node("b", {"CPU": 2.5})]).fits


def test_shares_add_up_exactly_as_ray_counts_them():
    """Ray keeps resources to 1/10000: a hundred 0.01 shares fill a node's 1.0 (floats would not)."""
    job = [Demand("worker replica", {"CPU": 0.0, "conductor_cpu_node": 0.01}, 100)]
    assert check_fit(job, [Node("cpu", {"CPU": 4.0, "conductor_cpu_node": 1.0})]).fits
    more = [Demand("worker replica", {"conductor_cpu_node": 0.01}, 101)]
    assert not check_fit(more, [Node("cpu", {"conductor_cpu_node": 1.0})]).fits


def test_the_node_types_of_ray_cluster_yaml_hold_the_paper_run():
    job = demands(config_file="configs/paper.yaml")
    assert check_fit(job, yaml_nodes()).fits
    asked = {d.what: d.asks() for d in job}
    assert asked["worker replica"]["conductor_cpu_node"] == 0.01 and asked["learner rank"]["conductor_gpu_node"] == 0.01


def test_custom_resources_keep_actors_off_the_wrong_node_type():
    """The GPU node has CPUs to spare, but worker replicas and graders ask for `conductor_cpu_node`."""
    gpu_only = [n for n in yaml_nodes() if "conductor_cpu_node" not in n.resources]
    report = check_fit(demands(config_file="configs/paper.yaml"), gpu_only)
    assert not report.fits and set(report.unplaced) == {"worker replica", "grader"}
    text = report.message()
    assert "no node declares the resource `conductor_cpu_node`" in text and "cluster.worker, cluster.grader" in text
    assert "--resources='{\"conductor_cpu_node\": 1}'" in text


def test_gpu_demands_on_a_cpu_only_cluster_fail_with_the_settings_to_change():
    cpu_only = [
        Node("the head", {"CPU": 8.0}, head=True),
        Node("node", {"CPU": 64.0, "conductor_cpu_node": 1.0, "conductor_gpu_node": 1.0}),
    ]
    with pytest.raises(ClusterTooSmallError) as caught:
        require_fit(demands(config_file="configs/paper.yaml"), cpu_only)
    text = str(caught.value)
    assert "GPU: 6 / 0 / 0" in text and "no node has a GPU" in text
    assert "cluster.generator='{CPU: 8, conductor_gpu_node: 0.01}'" in text and "cluster.learner=" in text
    assert "workers.3.serve.gpus=0" in text  # the served workers' GPUs are settings too


def test_an_actor_bigger_than_any_node():
    job = [Demand("learner rank", {"GPU": 8.0}, 1, "learner.world_size", 1, "cluster.learner")]
    report = check_fit(job, [Node("a", {"GPU": 4.0}), Node("b", {"GPU": 4.0})])
    assert (
        not report.fits
        and "one learner rank asks {GPU: 8}, more than any single node has ({GPU: 4})" in report.message()
    )


def test_fewer_actors_is_offered_where_it_fits():
    job = demands(
        *TWO_CORES,
        "learner.world_size=4",
        "cluster.generator={CPU: 1}",
        "cluster.learner={CPU: 1}",
        "grader.actors=1",
        "cluster.worker={CPU: 0}",
    )
    report = check_fit(job, [Node("the head", {"CPU": 4.0}, head=True)])
    assert not report.fits and "learner.world_size=2 (now 4)" in report.message()


def test_what_an_autoscaler_may_add_counts_and_is_reported():
    head = [Node("head", {"CPU": 0.0}, head=True)]
    cpu_type = Node("cpu_node", {"CPU": 32.0, "conductor_cpu_node": 1.0}, live=False, count=2)
    job = [Demand("grader", {"CPU": 20.0, "conductor_cpu_node": 0.01}, 2, "grader.actors", 2, "cluster.grader")]
    report = check_fit(job, head + [cpu_type])
    assert report.fits and report.added == {"cpu_node": 2}
    assert not check_fit(job + job, head + [cpu_type]).fits
    assert check_fit(job * 5, head + [Node("cpu_node", cpu_type.resources, live=False, count=None)]).fits


def test_an_autoscaler_of_unknown_node_types_only_warns_and_the_mode_decides():
    job = demands(*TWO_CORES)
    report = require_fit(job, [HEAD], may_grow=True)
    assert report is not None and not report.fits and "autoscaler runs" in report.message()
    assert not require_fit(job, [HEAD], mode="warn").fits
    assert require_fit(job, [HEAD], mode="off") is None
    with pytest.raises(ClusterTooSmallError):
        require_fit(job, [HEAD], mode="refuse")


def test_a_local_cluster_is_sized_by_the_same_demands():
    for overrides in ([], TWO_CORES, ["learner.world_size=2", "train.worker_replicas=4", "cluster.worker={CPU: 0.5}"]):
        config = load_config(None, list(overrides))
        job = job_demands(config, has_gpus=False)
        assert local_cpu_demand(config) == math.ceil(sum(d.asks().get("CPU", 0.0) * d.count for d in job) - 1e-9)
        assert check_fit(job, [Node("local", {"CPU": float(local_cpu_demand(config))}, head=True)]).fits


def test_an_asynchronous_run_splits_a_cpu_machine_between_generator_and_learner(monkeypatch):
    """Taking turns, each gets every CPU; running at once (train.max_staleness >= 1), half each, so
    their threads do not fight over the cores. cluster.* still decides when set."""
    import conductor_rl.run.demands as ts

    monkeypatch.setattr(ts.os, "cpu_count", lambda: 8)
    synchronous, asynchronous = load_config(None, []), load_config(None, ["train.max_staleness=1"])
    assert (
        ts.generator_placement(synchronous, has_gpus=False)[0]
        == {"CPU": 8.0}
        == ts.learner_placement(synchronous, False)
    )
    assert (
        ts.generator_placement(asynchronous, has_gpus=False)[0]
        == {"CPU": 4.0}
        == ts.learner_placement(asynchronous, False)
    )
    assert ts.learner_placement(load_config(None, ["train.max_staleness=1", "cluster.learner={CPU: 3}"]), False) == {
        "CPU": 3
    }


def test_served_replicas_and_their_worker_replicas_are_demands():
    config = load_config(None, ["train.worker_replicas=1"])
    spec = ServeSpec(model="smollm2-135m", replicas=3, gpus=1.0, cpus=2.0, resources={"conductor_gpu_node": 0.01})
    served = config.workers[0].model_copy(update={"provider": "openai_compatible", "serve": spec})
    twin = config.workers[1].model_copy(update={"provider": "openai_compatible", "serve": spec})  # shares it
    config = config.model_copy(update={"workers": [served, twin, config.workers[2]]})
    job = {d.what: d for d in job_demands(config, has_gpus=False, training=False, graders=False)}
    assert set(job) == {f"served worker {served.name} replica", "worker replica"}
    replica = job[f"served worker {served.name} replica"]
    assert replica.count == 3 and replica.asks() == {"CPU": 2.0, "GPU": 1.0, "conductor_gpu_node": 0.01}
    assert replica.count_key == "workers.0.serve.replicas"
    assert job["worker replica"].count == 3 + 3 + 1  # a WorkerActor per server at least


@pytest.mark.slow
def test_a_job_on_a_2_cpu_cluster_stops_at_once_with_the_numbers(tmp_path):
    """`ray start --head` on 2 cores, then the training job: it used to wait at "starting 1
    learner rank(s)" for as long as one let it; now it stops before the first actor starts."""
    script = (
        "import os, sys\n"
        "os.environ.setdefault('RAY_AUTH_MODE', 'disabled')\n"
        "import ray\n"
        "ray.init(address='local', num_cpus=2, include_dashboard=False, log_to_driver=False,\n"
        "         _node_ip_address='127.0.0.1')\n"
        "from jobs.train import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            "train.iterations=2",
            f"train.output_dir={tmp_path / 'run'}",
            "train.progress=false",
            "train.loggers=[]",
            *TWO_CORES,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr[-3000:]
    assert "error: the cluster cannot hold every actor this job starts" in done.stderr, done.stderr[-3000:]
    assert "CPU: 6.75 / 2 / 2" in done.stderr and "ray start --head --num-cpus 7" in done.stderr
    assert "starting 1 learner rank" not in done.stderr and "generator engine(s)" not in done.stderr
    assert took < 120, f"{took:.0f} s"


def test_actors_start_together_and_a_failed_start_shuts_down_the_others() -> None:
    import threading

    from jobs.training_system import start_together

    both_running = threading.Barrier(2, timeout=10)  # each start waits for the other: only a concurrent start ends

    class Part:
        def __init__(self, name: str) -> None:
            self.name, self.stopped = name, False

        def shutdown(self) -> None:
            self.stopped = True

    def start(name: str) -> Part:
        both_running.wait()
        return Part(name)

    first, second = start_together(lambda: start("generators"), lambda: start("learners"))
    assert (first.name, second.name) == ("generators", "learners")

    started: list[Part] = []

    def good() -> Part:
        started.append(Part("generators"))
        return started[-1]

    def bad() -> Part:
        raise RuntimeError("the learner rank died")

    with pytest.raises(RuntimeError, match="the learner rank died"):
        start_together(good, bad)
    assert started and started[0].stopped
