"""`cluster.dashboard` (`conductor-rl train --dashboard`): the local Ray cluster
starts with its dashboard on 127.0.0.1, and the address printed serves it."""

import json
import subprocess
import sys
import textwrap

import pytest

from jobs.train import add_arguments

# A fresh process: the test session may already hold a Ray cluster (without a dashboard).
START_AND_ASK = textwrap.dedent("""
    import json, re, sys, time, urllib.request
    from contextlib import redirect_stderr
    from io import StringIO

    from conductor_rl.config import load_config
    from jobs.ray_cluster import start_ray

    config = load_config(None, ["cluster.dashboard=true", "cluster.local_cpus=1"])
    printed = StringIO()
    with redirect_stderr(printed):
        ray = start_ray(config)
    try:
        url = re.search(r"Ray dashboard: (http://\\S+)", printed.getvalue()).group(1)
        for attempt in range(30):   # the dashboard may still be starting its HTTP server
            try:
                with urllib.request.urlopen(url + "/api/version", timeout=10) as reply:
                    version = json.load(reply)
                break
            except OSError:
                time.sleep(2)
        print(json.dumps({"url": url, "version": version}))
    finally:
        ray.shutdown()
""")


@pytest.mark.slow
def test_the_local_dashboard_serves_at_the_address_printed():
    done = subprocess.run([sys.executable, "-c", START_AND_ASK], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["url"].startswith("http://127.0.0.1:")
    assert answer["version"]["ray_version"]


def test_the_dashboard_flag_is_the_setting():
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert "cluster.dashboard=true" in parser.parse_args(["--dashboard"]).overrides
    assert "cluster.dashboard=true" not in parser.parse_args([]).overrides
