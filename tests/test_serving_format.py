"""A served Conductor's wire format and access rules (conductor_rl/serving/), without a server:
requests checked into questions, replies in OpenAI's shapes, tokens and per-client limits."""

import json

import pytest

from conductor_rl.serving.access import BearerTokens, ClientLimits, ClientQuota, TokensError
from conductor_rl.serving.chat_format import (
    RequestError,
    RequestLimits,
    chunk,
    completion,
    parse_chat_request,
    sse,
    usage_of,
)

POOL = ["math-expert", "generalist", "coder", "conductor"]  # the last is the Conductor's own seat
LIMITS = RequestLimits(max_request_bytes=2_000, max_messages=4, max_steps=5, max_depth=1, seat="conductor")


def parse(**body):
    return parse_chat_request(json.dumps({"model": "conductor", **body}).encode(), "conductor", POOL, LIMITS)


def refused(raw: bytes | dict, status: int, param: str | None = None) -> RequestError:
    raw = raw if isinstance(raw, bytes) else json.dumps(raw).encode()
    with pytest.raises(RequestError) as caught:
        parse_chat_request(raw, "conductor", POOL, LIMITS)
    err = caught.value
    assert err.status == status and err.param == param, (err.status, err.param, err.message)
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}
    return err


def test_the_last_user_message_is_the_question_and_earlier_turns_its_context():
    request = parse(
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 6 * 7?"},
            {"role": "assistant", "content": "42"},
            {"role": "user", "content": [{"type": "text", "text": "And 6 * 8?"}]},
        ],
        temperature=0.5,
        workers=["coder", "math-expert", "conductor"],
        max_steps=3,
        max_depth=1,
        top_p=0.9,
        max_tokens=100,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert request.question == "And 6 * 8?"
    assert request.context == (("system", "Be brief."), ("user", "What is 6 * 7?"), ("assistant", "42"))
    assert request.question_text() == (
        "Conversation so far:\nsystem: Be brief.\nuser: What is 6 * 7?\nassistant: 42\n\nQuestion: And 6 * 8?"
    )
    assert (request.temperature, request.workers, request.max_steps, request.max_depth) == (
        0.5,
        ("coder", "math-expert", "conductor"),
        3,
        1,
    )
    assert request.stream and request.include_usage
    plain = parse(messages=[{"role": "user", "content": "Hi?"}])
    assert plain.question_text() == "Hi?" and not plain.stream and plain.workers is None and plain.temperature is None


def test_malformed_requests_are_refused_with_the_field_named():
    ok = {"model": "conductor", "messages": [{"role": "user", "content": "q"}]}
    assert "not JSON" in refused(b"{not json", 400).message
    assert refused(b"[1, 2]", 400).status == 400
    assert refused(b"x" * 2_001, 413).code == "request_too_large"
    assert refused({**ok, "model": "gpt-4o"}, 404, "model").code == "model_not_found"
    refused({**ok, "messages": []}, 400, "messages")
    refused({**ok, "messages": [{"role": "user", "content": "q"}] * 5}, 400, "messages")
    refused({**ok, "messages": [{"role": "robot", "content": "q"}]}, 400, "messages[0]")
    refused(
        {**ok, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        400,
        "messages[0].content",
    )
    refused({**ok, "messages": [{"role": "assistant", "content": "a"}]}, 400, "messages")  # no question
    refused({**ok, "n": 2}, 400, "n")
    refused({**ok, "tools": []}, 400, "tools")
    refused({**ok, "temperature": 3}, 400, "temperature")
    refused({**ok, "temperature": True}, 400, "temperature")
    refused({**ok, "max_steps": 6}, 400, "max_steps")  # over the server's limit
    refused({**ok, "max_depth": 2}, 400, "max_depth")
    # A subset is offered with the seat, so it may recurse; a pool without a seat may not.
    assert parse_chat_request(
        json.dumps({**ok, "max_depth": 1, "workers": ["coder"]}).encode(), "conductor", POOL, LIMITS
    )
    seatless = RequestLimits(max_request_bytes=2_000, max_messages=4, max_steps=5, max_depth=1)
    with pytest.raises(RequestError, match="needs the Conductor's seat in the pool") as refusal:
        parse_chat_request(json.dumps({**ok, "max_depth": 1}).encode(), "conductor", POOL[:3], seatless)
    assert refusal.value.status == 400 and refusal.value.param == "max_depth"
    assert "this pool has" in refused({**ok, "workers": ["gpt-9"]}, 400, "workers").message
    refused({**ok, "workers": ["coder", "coder"]}, 400, "workers")
    refused({**ok, "stream": "yes"}, 400, "stream")


def test_replies_take_openais_shapes():
    body = completion("chatcmpl-1", "conductor", "48", usage_of(10, 5), {"cost_usd": 0.01}, created=7)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "48"}
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    assert body["object"] == "chat.completion" and body["conductor"] == {"cost_usd": 0.01}
    delta = chunk("chatcmpl-1", "conductor", 7, delta={"content": "48"})
    assert delta["choices"][0]["delta"] == {"content": "48"} and delta["object"] == "chat.completion.chunk"
    assert chunk("chatcmpl-1", "conductor", 7, usage=usage_of(1, 2))["choices"] == []
    assert sse("[DONE]") == b"data: [DONE]\n\n"
    assert json.loads(sse(delta)[len(b"data: ") :]) == delta


def test_tokens_name_their_client_and_are_refused_otherwise(tmp_path):
    token = "t" * 20
    tokens = BearerTokens.load(None, {"CONDUCTOR_RL_SERVE_TOKENS": f"alice:{token}, bob:{'b' * 24}"})
    assert tokens.client(f"Bearer {token}") == "alice"
    for header in (None, "", token, f"Basic {token}", "Bearer " + "x" * 20):
        with pytest.raises(RequestError) as caught:
            tokens.client(header)
        assert caught.value.status == 401 and token not in caught.value.message
        assert caught.value.headers == {"WWW-Authenticate": "Bearer"}
    path = tmp_path / "tokens"
    path.write_text(f"# client token\ncarol {'c' * 16}\n")
    assert BearerTokens.load(str(path), {}).client("Bearer " + "c" * 16) == "carol"
    path.write_text("carol\n")
    with pytest.raises(TokensError, match="not `client token`"):
        BearerTokens.load(str(path), {})
    with pytest.raises(TokensError, match="CONDUCTOR_RL_SERVE_TOKENS"):
        BearerTokens.load(None, {})
    with pytest.raises(TokensError, match="shorter than 16"):
        BearerTokens.load(None, {"CONDUCTOR_RL_SERVE_TOKENS": "dave:short"})


def test_a_client_over_its_requests_or_dollars_waits_for_the_window():
    limits = ClientLimits(ClientQuota(requests=2, usd=0.10, window_s=60))
    limits.admit("alice", 0.0)
    limits.admit("alice", 10.0)
    with pytest.raises(RequestError) as caught:
        limits.admit("alice", 20.0)
    assert caught.value.status == 429 and caught.value.headers == {"Retry-After": "40"}
    limits.admit("bob", 20.0)  # another client's own window
    limits.admit("alice", 60.5)  # the first request left the window
    limits.charge("bob", 0.06, 21.0)
    limits.charge("bob", 0.05, 30.0)
    assert limits.spent("bob", 31.0) == pytest.approx(0.11)
    with pytest.raises(RequestError) as caught:
        limits.admit("bob", 31.0)  # over $0.10: wait until the first charge leaves
    assert caught.value.headers == {"Retry-After": "50"} and "$0.1 per 60 s" in caught.value.message
    limits.admit("bob", 81.5)


def test_a_restarted_server_holds_its_clients_to_what_its_spend_journal_says_they_used(tmp_path):
    from conductor_rl.workers.ledger import CostLedger
    from conductor_rl.workers.providers import CallKey, Usage
    from conductor_rl.workers.spend_journal import JOURNAL_FILE, read_books

    ledger = CostLedger.from_journal(tmp_path / JOURNAL_FILE, job="serve", sync=True)
    for request, client, usd in (("r1", "alice", 0.06), ("r2", "alice", 0.05), ("r3", "bob", 0.01)):
        ledger.tag_request(request, client)
        # A served call's key names its request (the workflow engine's task id is the request id).
        ledger.open_call(f"{request}-0", "w", "sim", 1.0, admit=False, key=CallKey(request, request, 0))
        ledger.record("w", "sim", Usage(), usd, call_id=f"{request}-0")
    journal = tmp_path / JOURNAL_FILE
    wall = read_books(journal).requests[-1]["t"] + 5.0  # restarted five seconds after the requests

    limits = ClientLimits(ClientQuota(requests=2, usd=0.10, window_s=60))
    limits.restore(journal, now=1000.0, wall_now=wall)
    assert limits.spent("alice", 1000.0) == pytest.approx(0.11) and limits.spent("bob", 1000.0) == pytest.approx(0.01)
    with pytest.raises(RequestError) as caught:
        limits.admit("alice", 1000.0)  # two requests and $0.11 in the window before the restart
    assert caught.value.status == 429
    limits.admit("bob", 1000.0)
    later = ClientLimits(ClientQuota(requests=2, usd=0.10, window_s=60))
    later.restore(journal, now=1000.0, wall_now=wall + 120)  # restarted after the window: nothing held
    later.admit("alice", 1000.0)


def test_a_client_over_its_daily_budget_waits_for_midnight_and_one_over_its_total_is_told_so(tmp_path):
    from conductor_rl.serving.access import ClientBudget, ClientBudgets
    from conductor_rl.workers.ledger import CostLedger
    from conductor_rl.workers.providers import CallKey, Usage
    from conductor_rl.workers.spend_journal import JOURNAL_FILE

    noon = 1_764_849_600.0  # 2025-12-04 12:00 UTC
    daily = ClientBudgets(ClientBudget(0.10, per="day"))
    daily.charge("alice", 0.06, noon)
    daily.admit("alice", noon)  # under the budget still
    daily.charge("alice", 0.05, noon + 60)
    with pytest.raises(RequestError) as caught:
        daily.admit("alice", noon + 120)
    assert caught.value.status == 429 and caught.value.code == "insufficient_quota"
    assert caught.value.headers["Retry-After"] == str(12 * 3600 - 120) and "2025-12-04" in caught.value.message
    daily.admit("bob", noon + 120)  # another client's own budget
    daily.admit("alice", noon + 12 * 3600)  # a new UTC day

    total = ClientBudgets(ClientBudget(0.10, per="total"))
    total.charge("alice", 0.11, noon)
    with pytest.raises(RequestError, match="serve.client_budget_usd") as caught:
        total.admit("alice", noon + 30 * 86_400)  # never renews
    assert caught.value.headers == {"x-should-retry": "false"}  # the openai SDK would retry a 429 otherwise

    # A restarted server counts what the journal holds for each client, whatever the day.
    ledger = CostLedger.from_journal(tmp_path / JOURNAL_FILE, job="serve", sync=True)
    for request, client, usd in (("r1", "alice", 0.06), ("r2", "alice", 0.05), ("r3", "bob", 0.01)):
        ledger.tag_request(request, client)
        ledger.open_call(f"{request}-0", "w", "sim", 1.0, admit=False, key=CallKey(request, request, 0))
        ledger.record("w", "sim", Usage(), usd, call_id=f"{request}-0")
    restarted = ClientBudgets(ClientBudget(0.10, per="total"))
    restarted.restore(tmp_path / JOURNAL_FILE)
    assert restarted.spent("alice", noon) == pytest.approx(0.11) and restarted.spent("bob", noon) == pytest.approx(0.01)
    with pytest.raises(RequestError):
        restarted.admit("alice", noon)
    restarted.admit("bob", noon)
    # The same through ClientLimits, which holds the windows and the budget together.
    limits = ClientLimits(ClientQuota(requests=None, usd=None), ClientBudget(0.10, per="total"))
    limits.restore(tmp_path / JOURNAL_FILE, now=1000.0, wall_now=noon)
    with pytest.raises(RequestError, match="in total"):
        limits.admit("alice", 1000.0, noon)
    with pytest.raises(ValueError, match="wall-clock"):
        limits.admit("bob", 1000.0)
    limits.admit("bob", 1000.0, noon)
