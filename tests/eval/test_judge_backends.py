"""The OpenAI-compatible HTTP judge backend against a local scripted server."""

from __future__ import annotations

import socket

import pytest

from memr1.eval.judge_backends import JudgeBackendError, OpenAICompatibleBackend

from .conftest import chat_reply


def echo(request_json: dict) -> dict:
    return chat_reply("echo: " + request_json["messages"][-1]["content"])


def make_backend(server, **kwargs) -> tuple[OpenAICompatibleBackend, list[float]]:
    sleeps: list[float] = []
    defaults = dict(
        base_url=server.base_url + "/",
        model="judge-mini",
        api_key_env=None,
        timeout_s=2.0,
        max_retries=2,
        backoff_s=0.5,
        sleep=sleeps.append,
    )
    defaults.update(kwargs)
    return OpenAICompatibleBackend(**defaults), sleeps


def test_sends_a_chat_request_with_key_and_greedy_settings(chat_server, monkeypatch):
    monkeypatch.setenv("MEMR1_TEST_JUDGE_KEY", "sk-test-123")
    chat_server.script = [(200, echo, 0.0)]
    backend, _ = make_backend(
        chat_server, api_key_env="MEMR1_TEST_JUDGE_KEY", system_prompt="Grade strictly."
    )
    assert backend.complete(["Is 2+2 4?"]) == ["echo: Is 2+2 4?"]
    (request,) = chat_server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test-123"
    body = request["json"]
    assert body["model"] == "judge-mini"
    assert body["temperature"] == 0.0
    assert body["messages"] == [
        {"role": "system", "content": "Grade strictly."},
        {"role": "user", "content": "Is 2+2 4?"},
    ]
    assert "sk-test-123" not in repr(backend)


def test_keeps_prompt_order_with_parallel_requests(chat_server):
    chat_server.script = [(200, echo, 0.0)]
    backend, _ = make_backend(chat_server, max_workers=3)
    prompts = [f"p{i}" for i in range(7)]
    assert backend.complete(prompts) == [f"echo: p{i}" for i in range(7)]
    assert len(chat_server.requests) == 7


def test_retries_a_server_error_then_succeeds(chat_server):
    chat_server.script = [(500, {"error": "overloaded"}, 0.0), (200, chat_reply("fine"), 0.0)]
    backend, sleeps = make_backend(chat_server)
    assert backend.complete(["x"]) == ["fine"]
    assert len(chat_server.requests) == 2
    assert sleeps == [0.5]


def test_gives_up_after_retries_with_the_last_error(chat_server):
    chat_server.script = [(503, {"error": "down for maintenance"}, 0.0)]
    backend, sleeps = make_backend(chat_server, max_retries=2)
    with pytest.raises(JudgeBackendError, match=r"3 attempts.*HTTP 503.*down for maintenance"):
        backend.complete(["x"])
    assert len(chat_server.requests) == 3
    assert sleeps == [0.5, 1.0]  # exponential backoff


def test_timeout_becomes_a_clear_error(chat_server):
    chat_server.script = [(200, chat_reply("too late"), 1.0)]
    backend, _ = make_backend(chat_server, timeout_s=0.2, max_retries=1)
    with pytest.raises(JudgeBackendError, match=r"timed out after 0.2 s") as info:
        backend.complete(["x"])
    assert chat_server.base_url in str(info.value)
    assert len(chat_server.requests) == 2


def test_client_error_is_not_retried(chat_server):
    chat_server.script = [(400, {"error": {"message": "unknown model judge-mini"}}, 0.0)]
    backend, sleeps = make_backend(chat_server)
    with pytest.raises(JudgeBackendError, match=r"HTTP 400.*unknown model judge-mini"):
        backend.complete(["x"])
    assert len(chat_server.requests) == 1
    assert sleeps == []


def test_malformed_reply_is_a_clear_error(chat_server):
    chat_server.script = [(200, {"id": "no choices here"}, 0.0)]
    backend, _ = make_backend(chat_server)
    with pytest.raises(JudgeBackendError, match="choices"):
        backend.complete(["x"])
    chat_server.script = [(200, "not json at all", 0.0)]
    with pytest.raises(JudgeBackendError, match="not JSON"):
        backend.complete(["x"])


def test_null_content_reads_as_empty_text(chat_server):
    chat_server.script = [(200, chat_reply(None), 0.0)]
    backend, _ = make_backend(chat_server)
    assert backend.complete(["x"]) == [""]


def closed_port() -> int:
    # Bind to an ephemeral port and release it: nothing listens there for the next moment.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_refused_connection_is_retried_then_reported():
    sleeps: list[float] = []
    backend = OpenAICompatibleBackend(
        base_url=f"http://127.0.0.1:{closed_port()}/v1",
        model="m",
        api_key_env=None,
        max_retries=1,
        sleep=sleeps.append,
    )
    with pytest.raises(JudgeBackendError, match="could not reach"):
        backend.complete(["x"])
    assert sleeps == [1.0]


def test_missing_api_key_variable_is_named(monkeypatch):
    monkeypatch.delenv("MEMR1_UNSET_KEY", raising=False)
    with pytest.raises(ValueError, match="MEMR1_UNSET_KEY"):
        OpenAICompatibleBackend(
            base_url="http://127.0.0.1:9/v1", model="m", api_key_env="MEMR1_UNSET_KEY"
        )


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"base_url": "ftp://x/v1"}, "http"),
        ({"max_retries": -1}, "max_retries"),
        ({"timeout_s": 0}, "timeout_s"),
    ],
)
def test_bad_settings_are_rejected(kwargs, match):
    settings = dict(base_url="http://127.0.0.1:9/v1", model="m", api_key_env=None) | kwargs
    with pytest.raises(ValueError, match=match):
        OpenAICompatibleBackend(**settings)
