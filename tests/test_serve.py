"""`conductor-rl serve` end to end: the embedded default's SmolLM2 Conductor on a vLLM generator
engine, its simulated pool on worker actors, the Ray Serve application on 127.0.0.1, asked with
the official `openai` client. Each test asks as its own client, so per-client windows stay apart."""

import os
from pathlib import Path

import pytest

from conductor_rl.config import load_config
from conductor_rl.workers.serving import free_port

REPO = Path(__file__).resolve().parent.parent
TOKENS = {name: name[0] * 24 for name in ("alice", "bob", "carol", "dave", "erin")}


@pytest.fixture(scope="module")
def serve_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve")


def start(serve_dir: Path, *settings: str):
    """`start_serving` with the test clients' tokens, on a free port, journaling to `serve_dir`."""
    from ray import serve

    from jobs.serve import PortInUseError, start_serving

    before = os.environ.get("CONDUCTOR_RL_SERVE_TOKENS")
    os.environ["CONDUCTOR_RL_SERVE_TOKENS"] = ",".join(f"{k}:{v}" for k, v in TOKENS.items())
    try:
        for attempt in range(3):  # a free port may be taken before Serve binds it (Ray starts processes too)
            config = load_config(
                None,
                [
                    f"serve.port={free_port()}",
                    "serve.client_requests=3",
                    "serve.model_name=conductor",
                    "cluster.generator={CPU: 1}",
                    "conductor.max_depth=0",
                    f"serve.output_dir={serve_dir}",
                    *settings,
                ],
            )
            try:
                return start_serving(config)
            except PortInUseError:
                serve.shutdown()
                if attempt == 2:
                    raise
    finally:
        if before is None:
            os.environ.pop("CONDUCTOR_RL_SERVE_TOKENS")
        else:
            os.environ["CONDUCTOR_RL_SERVE_TOKENS"] = before


@pytest.fixture(scope="module")
def served(ray_cluster, serve_dir):
    from ray import serve

    running = start(serve_dir)
    yield running
    running.shutdown()
    serve.shutdown()


def client(served, name="alice", **options):
    import openai

    return openai.OpenAI(base_url=served.url + "/v1", api_key=TOKENS.get(name, name * 8), max_retries=0, **options)


def test_replicas_or_ray_serves_autoscaling_settings_reach_the_deployment_as_given():
    from jobs.serve import continuous_batching, deployment_options

    fixed = load_config(None, ["serve.replicas=3", "serve.max_ongoing_requests=32"])
    assert deployment_options(fixed)["num_replicas"] == 3 and "autoscaling_config" not in deployment_options(fixed)
    assert deployment_options(fixed)["max_ongoing_requests"] == 32
    scaled = load_config(None, ["serve.autoscaling={min_replicas: 1, max_replicas: 4, target_ongoing_requests: 8}"])
    options = deployment_options(scaled)
    assert options["autoscaling_config"] == {"min_replicas": 1, "max_replicas": 4, "target_ongoing_requests": 8}
    assert "num_replicas" not in options
    # Continuous batching by default; windows when asked for, or where the backend has no asynchronous engine.
    assert continuous_batching(fixed)
    assert not continuous_batching(load_config(None, ["serve.batching=window"]))
    assert not continuous_batching(load_config(None, ["generator.backend=transformers"]))


def test_a_served_conductor_answers_the_openai_client_with_its_plan_and_usage(served, serve_dir):
    openai_client = client(served)
    assert [m.id for m in openai_client.models.list()] == ["conductor"]
    reply = openai_client.chat.completions.create(
        model="conductor", messages=[{"role": "user", "content": "What is 17 * 23?"}], seed=1
    )
    assert reply.choices[0].message.content and reply.choices[0].finish_reason == "stop"
    extension = reply.model_extra["conductor"]
    pool = [w.name for w in load_config(None).workers]
    assert extension["steps"] and all(s["worker"] in pool for s in extension["steps"])
    assert reply.usage.prompt_tokens > sum(s["usage"]["input_tokens"] for s in extension["steps"]) > 0
    assert extension["cost_usd"] == pytest.approx(sum(s["cost_usd"] for s in extension["steps"]))

    chunks = list(
        openai_client.chat.completions.create(
            model="conductor",
            messages=[{"role": "user", "content": "Name the capital of France."}],
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"workers": [pool[1]]},
            seed=2,
        )
    )
    events = [c.model_extra["conductor"] for c in chunks if c.model_extra.get("conductor")]
    assert events[0]["event"] == "plan" and events[-1]["event"] == "done"
    assert events[0]["workers"] == [pool[1]] and events[0]["model_ids"] == [1]  # listed under its pool number
    steps = [e for e in events if e["event"] == "step"]
    assert steps and {s["worker"] for s in steps} == {pool[1]}  # the request's worker subset
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == max(steps, key=lambda s: s["index"])["response"]
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0

    # The server's spend journal holds both requests as alice's (her name, never her token) and every call.
    from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books, totals_by

    journal = serve_dir / JOURNAL_FILE
    books = read_books(journal)
    assert books.sessions[0]["job"] == "serve" and [r["client"] for r in books.requests] == ["alice", "alice"]
    assert len(books.billed) == len(extension["steps"]) + len(steps)
    assert [(r["client"], r["calls"]) for r in totals_by(books, "client")] == [("alice", len(books.billed))]
    assert books.spent_usd == pytest.approx(extension["cost_usd"] + events[-1]["cost_usd"])
    assert TOKENS["alice"] not in journal.read_text()


def test_concurrent_clients_each_get_their_answer_and_one_over_its_limit_a_429(served):
    import concurrent.futures

    import openai

    dave = client(served, "dave")
    questions = ["What is 2 + 2?", "What is 3 * 3?", "What is 10 - 4?"]
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        replies = list(
            pool.map(
                lambda q: dave.chat.completions.create(
                    model="conductor", messages=[{"role": "user", "content": q}], extra_body={"max_steps": 1}
                ),
                questions,
            )
        )
    assert all(r.choices[0].message.content for r in replies)
    assert all(len(r.model_extra["conductor"]["steps"]) == 1 for r in replies)
    with pytest.raises(openai.RateLimitError) as caught:
        dave.chat.completions.create(model="conductor", messages=[{"role": "user", "content": "And 5 * 5?"}])
    assert int(caught.value.response.headers["retry-after"]) > 0
    assert caught.value.body["code"] == "rate_limit_exceeded"


def test_no_token_or_a_bad_request_is_refused_in_openais_error_shape(served):
    import openai

    with pytest.raises(openai.AuthenticationError):
        client(served, "mallory").chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(openai.BadRequestError) as caught:
        client(served, "bob").chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": "hi"}], extra_body={"max_steps": 99}
        )
    assert caught.value.status_code == 400 and caught.value.body["param"] == "max_steps"
    with pytest.raises(openai.NotFoundError):
        client(served, "bob").chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])


def test_the_page_shows_the_plan_each_step_and_the_answer_in_a_headless_browser(served, tmp_path):
    """GET /: a person types a token and a question and watches the plan, each step and the answer
    with its cost arrive, in Debian's chromium. The screenshot is kept in runs/test-artifacts/."""
    from tests.browser import HeadlessChromium

    browser = HeadlessChromium(tmp_path / "profile")
    try:
        browser.open(served.url + "/")
        assert browser.evaluate("document.title") == "conductor-rl"
        browser.evaluate(f"document.getElementById('token').value = {TOKENS['carol']!r}")
        browser.evaluate("document.getElementById('question').value = 'What is 12 * 12?'")
        browser.evaluate("document.getElementById('ask').click()")
        browser.wait_for(
            "document.getElementById('cost').textContent.startsWith('total cost')"
            " || document.getElementById('error').textContent",
            180,
        )
        assert browser.evaluate("document.getElementById('error').textContent") == ""
        assert "model_id" in browser.evaluate("document.getElementById('plan').textContent")
        steps = browser.evaluate("[...document.querySelectorAll('.step .worker')].map(e => e.textContent)")
        assert steps and all(s.startswith("Step ") for s in steps)
        assert browser.evaluate("document.getElementById('answer-text').textContent")
        shot = browser.screenshot(REPO / "runs" / "test-artifacts" / "serve-page.png")
        assert shot.stat().st_size > 10_000
    finally:
        browser.close()


def test_a_restarted_server_holds_each_client_to_its_budget_from_the_spend_journal(served, serve_dir):
    # Last in the module: the server is stopped and started again on its output folder, with a budget
    # per client in total that alice has spent before the restart; erin has spent nothing. The first
    # server sampled plans by continuous batching (serve.batching's default), this one by windows.
    import openai
    from ray import serve

    from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books, totals_by

    before = read_books(serve_dir / JOURNAL_FILE)
    spent = {row["client"]: row["usd"] for row in totals_by(before, "client")}
    assert spent["alice"] > 0 and "erin" not in spent
    served.shutdown()
    serve.shutdown()
    restarted = start(
        serve_dir, f"serve.client_budget_usd={spent['alice']}", "serve.client_budget_per=total", "serve.batching=window"
    )
    try:
        with pytest.raises(openai.RateLimitError) as caught:
            client(restarted, "alice").chat.completions.create(
                model="conductor", messages=[{"role": "user", "content": "What is 6 * 7?"}]
            )
        assert caught.value.body["code"] == "insufficient_quota" and "in total" in caught.value.body["message"]
        assert caught.value.response.headers["x-should-retry"] == "false"
        reply = client(restarted, "erin").chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": "What is 6 * 7?"}], extra_body={"max_steps": 1}
        )
        assert reply.choices[0].message.content
    finally:
        restarted.shutdown()
    after = read_books(serve_dir / JOURNAL_FILE)
    assert [s["session"] for s in after.sessions] == [1, 2] and after.requests[-1]["client"] == "erin"
    assert after.spent_usd == pytest.approx(before.spent_usd + reply.model_extra["conductor"]["cost_usd"])
