"""Models: ScriptedModel, and OpenAIClient against a real HTTP server on 127.0.0.1.

No network beyond loopback: every OpenAIClient here points at a ThreadingHTTPServer the
test starts on port 0 (or at a port that was just closed). Delays between retries are
recorded through ``sleep=`` instead of slept.
"""

from __future__ import annotations

import email.utils
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from otpmem.llm import (
    ChatModel,
    ChatResponse,
    ModelError,
    OpenAIClient,
    ScriptedModel,
    as_response,
    tool_call,
)
from otpmem.llm.openai import retry_after_seconds
from otpmem.messages import freeze

WAIT = 5.0

# --------------------------------------------------------------------------- ScriptedModel


def test_scripted_model_is_a_chat_model() -> None:
    assert isinstance(ScriptedModel(["x"]), ChatModel)


def test_scripted_replies_come_in_order() -> None:
    model = ScriptedModel(["one", "two", "three"], record=True)
    user = [{"role": "user", "content": "hi"}]
    assert [model.chat(user).content for _ in range(3)] == ["one", "two", "three"]
    assert len(model.calls) == 3


def test_scripted_text_reply_is_a_plain_stop_response() -> None:
    response = ScriptedModel(["hello"], usage=False).chat([{"role": "user", "content": "hi"}])
    assert response == ChatResponse(
        content="hello", tool_calls=(), usage=None, finish_reason="stop"
    )


def test_scripted_reply_without_usage_gets_the_heuristic_count_of_sent_and_answered() -> None:
    sent = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    response = ScriptedModel(["hello there"]).chat(sent)
    # 3 a message + ceil(chars / 4): 3+2 and 3+1 sent, 3+3 answered
    assert response.usage == {"prompt_tokens": 9, "completion_tokens": 6, "total_tokens": 15}
    assert response.to_message()["metadata"] == {"usage": response.usage}


def test_scripted_function_of_messages_and_tools() -> None:
    seen: list[tuple[int, Any]] = []

    def reply(messages: list[dict[str, Any]], tools: Any) -> str:
        seen.append((len(messages), tools))
        return f"saw:{len(messages)}"

    model = ScriptedModel(reply)
    specs = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    assert model.chat([{"role": "user", "content": "a"}]).content == "saw:1"
    two = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert model.chat(two, specs).content == "saw:2"
    assert seen == [(1, None), (2, specs)]
    # a function never runs out
    assert model.chat([]).content == "saw:0"


def test_scripted_dict_reply_with_tool_calls() -> None:
    call = tool_call("c1", "add", '{"a": 7, "b": 8}')
    usage = {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}
    model = ScriptedModel([{"content": "let me add", "tool_calls": [call], "usage": usage}])
    response = model.chat([{"role": "user", "content": "7+8?"}])
    assert response.content == "let me add"
    assert response.tool_calls == (
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 7, "b": 8}'},
        },
    )
    assert response.usage == usage
    assert response.finish_reason == "tool_calls"
    assert response.to_message() == {
        "role": "assistant",
        "content": "let me add",
        "tool_calls": [call],
        # stored under the API's names, whichever a script or provider used
        "metadata": {"usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}},
    }


def test_scripted_dict_reply_without_tool_calls_stops() -> None:
    response = ScriptedModel([{"content": "done"}], usage=False).chat([])
    assert response.tool_calls == ()
    assert response.finish_reason == "stop"
    assert response.to_message() == {"role": "assistant", "content": "done"}


def test_scripted_chat_response_reply_is_returned_as_is() -> None:
    # A ChatResponse is the whole answer: usage=None means none was reported.
    given = ChatResponse(content="x", finish_reason="length")
    assert ScriptedModel([given]).chat([]) is given


def test_scripted_exception_reply_raises_and_script_goes_on() -> None:
    boom = ModelError("rate limited", status=429, retryable=True)
    model = ScriptedModel([boom, ValueError("bad"), "after"], record=True)
    with pytest.raises(ModelError) as info:
        model.chat([{"role": "user", "content": "a"}])
    assert info.value is boom
    with pytest.raises(ValueError, match="bad"):
        model.chat([{"role": "user", "content": "b"}])
    assert model.chat([{"role": "user", "content": "c"}]).content == "after"
    assert len(model.calls) == 3


def test_scripted_function_returning_exception_raises() -> None:
    model = ScriptedModel(lambda messages, tools: RuntimeError("from fn"))
    with pytest.raises(RuntimeError, match="from fn"):
        model.chat([])


def test_scripted_exhaustion_raises_model_error() -> None:
    model = ScriptedModel(["only"])
    assert model.chat([]).content == "only"
    with pytest.raises(ModelError, match="ran out of replies after 1 call"):
        model.chat([{"role": "user", "content": "more?"}])
    with pytest.raises(ModelError):
        model.chat([])


def test_scripted_empty_script_raises_model_error_on_first_call() -> None:
    with pytest.raises(ModelError):
        ScriptedModel([]).chat([])


def test_scripted_bad_reply_type_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        ScriptedModel([42]).chat([])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        as_response(3.5)  # type: ignore[arg-type]


def test_scripted_calls_are_recorded_as_copies() -> None:
    model = ScriptedModel(["a", "b"], record=True)
    messages = [{"role": "user", "content": "original", "metadata": {"k": [1]}}]
    tools = [{"type": "function", "function": {"name": "t"}}]
    model.chat(messages, tools)
    # mutating what the caller passed does not change the record
    messages[0]["content"] = "changed"
    messages[0]["metadata"]["k"].append(2)
    messages.append({"role": "user", "content": "extra"})
    tools[0]["function"]["name"] = "renamed"
    tools.append({"type": "function", "function": {"name": "late"}})
    recorded, recorded_tools = model.calls[0]
    assert recorded == [{"role": "user", "content": "original", "metadata": {"k": [1]}}]
    # the docstring promises a copy of the tools too
    assert recorded_tools == [{"type": "function", "function": {"name": "t"}}]
    # frozen messages (as stores hand them out) are recorded as mutable copies
    frozen = freeze({"role": "user", "content": "frozen"})
    model.chat([frozen])
    copy = model.calls[1][0][0]
    copy["content"] = "edited"
    assert frozen["content"] == "frozen"
    assert type(copy) is dict


def test_scripted_model_is_thread_safe_under_8_threads() -> None:
    per_thread = 100
    threads_n = 8
    total = per_thread * threads_n
    model = ScriptedModel([f"r{i}" for i in range(total)], record=True)
    barrier = threading.Barrier(threads_n)
    results: list[list[str]] = [[] for _ in range(threads_n)]
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            barrier.wait(WAIT)
            for k in range(per_thread):
                reply = model.chat([{"role": "user", "content": f"t{index}-{k}"}])
                assert reply.content is not None
                results[index].append(reply.content)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    got = [r for chunk in results for r in chunk]
    # every reply handed out exactly once
    assert sorted(got) == sorted(f"r{i}" for i in range(total))
    assert len(model.calls) == total
    # each thread saw its replies in script order
    for chunk in results:
        numbers = [int(r[1:]) for r in chunk]
        assert numbers == sorted(numbers)
    # the record pairs each call with its own messages
    assert len({m[0]["content"] for m, _ in model.calls}) == total
    with pytest.raises(ModelError):
        model.chat([])


def test_scripted_function_calls_are_serialised_across_threads() -> None:
    state = {"active": 0, "most": 0, "count": 0}

    def reply(messages: list[dict[str, Any]], tools: Any) -> str:
        state["active"] += 1
        state["most"] = max(state["most"], state["active"])
        count = state["count"]
        sum(range(20_000))  # a little work so that threads would interleave without the lock
        state["count"] = count + 1
        state["active"] -= 1
        return f"n{count}"

    model = ScriptedModel(reply, record=True)
    barrier = threading.Barrier(8)
    got: list[str] = []
    got_lock = threading.Lock()

    def work() -> None:
        barrier.wait(WAIT)
        for _ in range(25):
            content = model.chat([{"role": "user", "content": "x"}]).content
            with got_lock:
                got.append(str(content))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(t.is_alive() for t in threads)
    assert state["most"] == 1
    assert state["count"] == 200
    assert sorted(got) == sorted(f"n{i}" for i in range(200))
    assert len(model.calls) == 200


def test_tool_call_helper_shape() -> None:
    assert tool_call("c9", "lookup") == {
        "id": "c9",
        "type": "function",
        "function": {"name": "lookup", "arguments": "{}"},
    }


# --------------------------------------------------------------------------- HTTP test server


@dataclass
class Canned:
    """One canned answer: status, headers, body (dict -> JSON, bytes as is), or hang."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    hang: bool = False


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


def completion(
    content: str | None = "hi",
    tool_calls: list[dict[str, Any]] | None = None,
    usage: dict[str, int] | None = None,
    finish_reason: str | None = "stop",
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    data: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if usage is not None:
        data["usage"] = usage
    return data


class FakeAPI:
    """The server's script and record; answers with ``default`` once the script is done."""

    def __init__(self) -> None:
        self.script: list[Canned] = []
        self.default = Canned(500, {"error": "script exhausted"})
        self.requests: list[Seen] = []
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.url = ""

    def answer(self, *canned: Canned) -> None:
        with self.lock:
            self.script.extend(canned)

    def take(self, seen: Seen) -> Canned:
        with self.lock:
            self.requests.append(seen)
            return self.script.pop(0) if self.script else self.default


def make_handler(api: FakeAPI) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # one request per connection: no lingering threads

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw
            headers = {k.lower(): v for k, v in self.headers.items()}
            canned = api.take(Seen(self.path, headers, body))
            if canned.hang:
                api.release.wait(WAIT)  # far longer than the client's timeout
                return
            payload = (
                canned.body if isinstance(canned.body, bytes) else json.dumps(canned.body).encode()
            )
            try:
                self.send_response(canned.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                for key, value in canned.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    fake = FakeAPI()
    server = QuietServer(("127.0.0.1", 0), make_handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.01}, name="fake-openai"
    )
    thread.start()
    try:
        yield fake
    finally:
        fake.release.set()
        server.shutdown()
        server.server_close()
        thread.join(WAIT)


@pytest.fixture
def client(api: FakeAPI) -> Iterator[Callable[..., tuple[OpenAIClient, list[float]]]]:
    """A factory of clients pointed at the fake API; each records its retry delays."""
    made: list[OpenAIClient] = []

    def make(**kwargs: Any) -> tuple[OpenAIClient, list[float]]:
        delays: list[float] = []
        kwargs.setdefault("api_key", "sk-test")
        kwargs.setdefault("timeout", 5.0)
        made.append(OpenAIClient("test-model", api.url, sleep=delays.append, **kwargs))
        return made[-1], delays

    yield make
    for item in made:
        item.close()


Make = Callable[..., tuple[OpenAIClient, list[float]]]
USER = [{"role": "user", "content": "hello"}]

# --------------------------------------------------------------------------- OpenAIClient


def test_openai_request_body_shape(api: FakeAPI, client: Make) -> None:
    api.answer(Canned(body=completion("ok")))
    model, delays = client()
    messages = [
        {"role": "system", "content": "be brief", "metadata": {"pinned": True}},
        {"role": "user", "content": "add 7 and 8", "metadata": {"ts": 1}},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [tool_call("c1", "add", '{"a": 7, "b": 8}')],
            "metadata": {"x": 1},
        },
        {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "15", "metadata": {}},
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Add.",
                "parameters": {"type": "object", "properties": {}, "required": []},
            },
        }
    ]
    response = model.chat(messages, tools, temperature=0.2, max_tokens=64)
    assert response.content == "ok"
    assert delays == []
    [seen] = api.requests
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["content-type"] == "application/json"
    assert seen.body == {
        "model": "test-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "add 7 and 8"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [tool_call("c1", "add", '{"a": 7, "b": 8}')],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "15"},
        ],
        "tools": tools,
        "tool_choice": "auto",
        "temperature": 0.2,
        "max_tokens": 64,
    }
    # the caller's messages keep their metadata
    assert messages[0]["metadata"] == {"pinned": True}


def test_openai_without_tools_sends_no_tools_or_tool_choice(api: FakeAPI, client: Make) -> None:
    api.answer(Canned(body=completion("a")), Canned(body=completion("b")))
    model, _ = client()
    model.chat(USER)
    model.chat(USER, [])
    for seen in api.requests:
        assert "tools" not in seen.body
        assert "tool_choice" not in seen.body
        assert seen.body["messages"] == USER


def test_openai_explicit_tool_choice_is_kept(api: FakeAPI, client: Make) -> None:
    api.answer(Canned(body=completion("a")))
    model, _ = client()
    spec = [{"type": "function", "function": {"name": "t", "parameters": {}}}]
    model.chat(USER, spec, tool_choice="required")
    assert api.requests[0].body["tool_choice"] == "required"


def test_openai_authorization_header_from_api_key(api: FakeAPI, client: Make) -> None:
    api.answer(Canned(body=completion()))
    model, _ = client(api_key="sk-secret-1")
    model.chat(USER)
    assert api.requests[0].headers["authorization"] == "Bearer sk-secret-1"


def test_openai_api_key_from_env_and_none_without(
    api: FakeAPI, client: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.answer(Canned(body=completion()), Canned(body=completion()))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    with_env, _ = client(api_key=None)
    with_env.chat(USER)
    monkeypatch.delenv("OPENAI_API_KEY")
    without, _ = client(api_key=None)
    without.chat(USER)
    assert api.requests[0].headers["authorization"] == "Bearer sk-from-env"
    assert "authorization" not in api.requests[1].headers


def test_openai_response_mapping(api: FakeAPI, client: Make) -> None:
    api.answer(
        Canned(
            body=completion(
                content="thinking aloud",
                tool_calls=[
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 7, "b": 8}'},
                    },
                    {
                        # some servers send the arguments as an object
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "mul", "arguments": {"a": 2, "b": 3}},
                    },
                ],
                usage={"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
                finish_reason="tool_calls",
            )
        )
    )
    model, _ = client()
    response = model.chat(USER)
    assert response.content == "thinking aloud"
    assert response.finish_reason == "tool_calls"
    assert response.usage == {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
    assert len(response.tool_calls) == 2
    first, second = response.tool_calls
    assert first == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a": 7, "b": 8}'},
    }
    assert second["id"] == "call_2"
    assert second["function"]["name"] == "mul"
    assert isinstance(second["function"]["arguments"], str)
    assert json.loads(second["function"]["arguments"]) == {"a": 2, "b": 3}


def test_openai_plain_answer_without_usage(api: FakeAPI, client: Make) -> None:
    api.answer(Canned(body=completion(content="just text", finish_reason=None)))
    model, _ = client()
    response = model.chat(USER)
    assert response == ChatResponse(content="just text", tool_calls=(), usage=None)
    assert response.finish_reason == "stop"


@pytest.mark.parametrize("status", [429, 503])
def test_openai_retries_honouring_retry_after_seconds(
    api: FakeAPI, client: Make, status: int
) -> None:
    api.answer(
        Canned(status, {"error": "slow down"}, {"Retry-After": "2"}),
        Canned(status, {"error": "slow down"}, {"Retry-After": "3"}),
        Canned(body=completion("finally")),
    )
    model, delays = client(max_retries=3, backoff=0.5)
    assert model.chat(USER).content == "finally"
    assert delays == [2.0, 3.0]
    assert len(api.requests) == 3
    # the retried requests are identical
    assert api.requests[0].body == api.requests[1].body == api.requests[2].body


def test_openai_retry_after_http_date(api: FakeAPI, client: Make) -> None:
    when = datetime.now(UTC) + timedelta(seconds=6)
    api.answer(
        Canned(429, {"error": "x"}, {"Retry-After": email.utils.format_datetime(when, True)}),
        Canned(body=completion("ok")),
    )
    model, delays = client(max_retries=1)
    assert model.chat(USER).content == "ok"
    assert len(delays) == 1
    assert 4.0 <= delays[0] <= 6.0


def test_openai_retry_after_is_capped_by_max_backoff(api: FakeAPI, client: Make) -> None:
    api.answer(Canned(503, {}, {"Retry-After": "100"}), Canned(body=completion("ok")))
    model, delays = client(max_backoff=7.0)
    assert model.chat(USER).content == "ok"
    assert delays == [7.0]


def test_openai_exponential_backoff_without_retry_after(api: FakeAPI, client: Make) -> None:
    api.answer(
        Canned(503, {"error": "a"}),
        Canned(500, {"error": "b"}),
        Canned(502, {"error": "c"}),
        Canned(body=completion("up")),
    )
    model, delays = client(max_retries=3, backoff=0.5)
    assert model.chat(USER).content == "up"
    assert delays == [0.5, 1.0, 2.0]


def test_openai_backoff_capped_by_max_backoff(api: FakeAPI, client: Make) -> None:
    api.answer(*[Canned(503, {}) for _ in range(4)], Canned(body=completion("up")))
    model, delays = client(max_retries=4, backoff=1.0, max_backoff=3.0)
    assert model.chat(USER).content == "up"
    assert delays == [1.0, 2.0, 3.0, 3.0]


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 504])
def test_openai_retryable_statuses(api: FakeAPI, client: Make, status: int) -> None:
    api.answer(Canned(status, {"error": "transient"}), Canned(body=completion("ok")))
    model, delays = client(max_retries=1, backoff=0.25)
    assert model.chat(USER).content == "ok"
    assert delays == [0.25]
    assert len(api.requests) == 2


def test_openai_gives_up_after_max_retries(api: FakeAPI, client: Make) -> None:
    api.default = Canned(503, {"error": "down"}, {"Retry-After": "1"})
    model, delays = client(max_retries=2)
    with pytest.raises(ModelError) as info:
        model.chat(USER)
    assert info.value.retryable is True
    assert "503" in str(info.value)
    assert "3 attempt" in str(info.value)
    assert len(api.requests) == 3
    assert delays == [1.0, 1.0]  # no sleep after the last attempt


def test_openai_max_retries_zero_is_one_attempt(api: FakeAPI, client: Make) -> None:
    api.default = Canned(429, {"error": "busy"})
    model, delays = client(max_retries=0)
    with pytest.raises(ModelError) as info:
        model.chat(USER)
    assert info.value.retryable is True
    assert len(api.requests) == 1
    assert delays == []


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_openai_client_error_raises_at_once(api: FakeAPI, client: Make, status: int) -> None:
    api.answer(
        Canned(status, {"error": {"message": "bad request body"}}), Canned(body=completion())
    )
    model, delays = client(max_retries=3)
    with pytest.raises(ModelError) as info:
        model.chat(USER)
    assert info.value.status == status
    assert info.value.retryable is False
    assert "bad request body" in str(info.value)
    assert len(api.requests) == 1
    assert delays == []


@pytest.mark.parametrize(
    "body",
    [
        b"this is not json{",
        b"",
        json.dumps({"choices": []}).encode(),
        json.dumps({"no_choices": True}).encode(),
        json.dumps({"choices": [{"finish_reason": "stop"}]}).encode(),
        json.dumps([1, 2, 3]).encode(),
    ],
)
def test_openai_malformed_body_is_a_model_error(api: FakeAPI, client: Make, body: bytes) -> None:
    api.answer(Canned(200, body))
    model, delays = client(max_retries=2)
    with pytest.raises(ModelError, match="unexpected response body"):
        model.chat(USER)
    assert len(api.requests) == 1
    assert delays == []


@pytest.mark.parametrize(
    "body",
    [
        {"choices": [{"message": "just a string", "finish_reason": "stop"}]},
        {"choices": [{"message": {"content": "x", "tool_calls": ["not an object"]}}]},
        {"choices": [{"message": {"content": "x"}}], "usage": "lots"},
    ],
    ids=["message-not-object", "tool-call-not-object", "usage-not-object"],
)
def test_openai_wrong_shape_body_is_a_model_error(
    api: FakeAPI, client: Make, body: dict[str, Any]
) -> None:
    api.answer(Canned(200, body))
    model, _ = client(max_retries=2)
    with pytest.raises(ModelError):
        model.chat(USER)
    assert len(api.requests) == 1


def test_openai_null_token_counts_read_as_zero(api: FakeAPI, client: Make) -> None:
    body = {"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": None}}
    api.answer(Canned(200, body))
    model, _ = client(max_retries=0)
    assert model.chat(USER).usage == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}


def test_openai_usage_keeps_a_cost_the_server_reports(api: FakeAPI, client: Make) -> None:
    usage = {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3, "cost": 0.0015}
    api.answer(Canned(200, {"choices": [{"message": {"content": "x"}}], "usage": usage}))
    model, _ = client(max_retries=0)
    assert model.chat(USER).to_message()["metadata"]["usage"] == {**usage, "cost": "0.0015"}


def test_openai_timeout_retries_then_model_error(api: FakeAPI, client: Make) -> None:
    api.default = Canned(hang=True)
    model, delays = client(timeout=0.2, max_retries=1, backoff=0.5)
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        model.chat(USER)
    elapsed = time.monotonic() - started
    assert info.value.retryable is True
    assert "timed out" in str(info.value)
    assert len(api.requests) == 2
    assert delays == [0.5]
    assert elapsed < WAIT  # the client gave up on its own timeout, not the server's


def test_openai_timeout_then_success(api: FakeAPI, client: Make) -> None:
    api.answer(Canned(hang=True), Canned(body=completion("second try")))
    model, delays = client(timeout=0.2, max_retries=1, backoff=0.1)
    assert model.chat(USER).content == "second try"
    assert delays == [0.1]
    assert len(api.requests) == 2


def test_openai_connection_refused_is_a_model_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    delays: list[float] = []
    model = OpenAIClient(
        "m",
        f"http://127.0.0.1:{port}/v1",
        api_key="k",
        timeout=2.0,
        max_retries=2,
        backoff=0.5,
        sleep=delays.append,
    )
    try:
        with pytest.raises(ModelError) as info:
            model.chat(USER)
    finally:
        model.close()
    assert info.value.retryable is True
    assert "connection failed" in str(info.value)
    assert delays == [0.5, 1.0]


def test_openai_client_validates_arguments() -> None:
    with pytest.raises(ValueError):
        OpenAIClient("", "http://127.0.0.1:9/v1")
    with pytest.raises(ValueError):
        OpenAIClient("m", "http://127.0.0.1:9/v1", max_retries=-1)
    with pytest.raises(ValueError):
        OpenAIClient("m", "http://127.0.0.1:9/v1", timeout=0)
    model = OpenAIClient("m", "http://127.0.0.1:9/v1/", api_key="k")
    try:
        assert model.url == "http://127.0.0.1:9/v1/chat/completions"
        assert isinstance(model, ChatModel)
    finally:
        model.close()


# --------------------------------------------------------------------------- retry_after_seconds


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", 0.0), ("5", 5.0), ("1.5", 1.5), ("120", 120.0), ("-3", 0.0)],
)
def test_retry_after_seconds_parses_seconds(value: str, expected: float) -> None:
    assert retry_after_seconds(value) == expected


@pytest.mark.parametrize("value", [None, "", "soon", "Mon, 99 Foo 2020"])
def test_retry_after_seconds_unparseable_is_none(value: str | None) -> None:
    assert retry_after_seconds(value) is None


def test_retry_after_seconds_parses_http_dates() -> None:
    future = datetime.now(UTC) + timedelta(seconds=90)
    got = retry_after_seconds(email.utils.format_datetime(future, usegmt=True))
    assert got is not None
    assert 88.0 <= got <= 90.0
    past = datetime(2001, 1, 1, tzinfo=UTC)
    assert retry_after_seconds(email.utils.format_datetime(past, usegmt=True)) == 0.0
    # the RFC 7231 example form
    assert retry_after_seconds("Fri, 31 Dec 1999 23:59:59 GMT") == 0.0


def test_scripted_model_takes_a_function_of_the_messages_alone() -> None:
    """DESIGN.md documents fn(messages); fn(messages, tools) works too."""
    one = ScriptedModel(lambda messages: f"saw:{len(messages)}")
    two = ScriptedModel(lambda messages, tools: f"tools:{tools}")
    defaulted = ScriptedModel(lambda messages, tools=None: f"tools:{tools}")
    hello = [{"role": "user", "content": "hi"}]
    assert one.chat(hello).content == "saw:1"
    assert two.chat(hello).content == "tools:None"
    assert defaulted.chat(hello, [{"type": "function"}]).content.startswith("tools:[")


def test_a_scripted_function_runs_off_the_schedulers_unless_it_says_it_never_blocks() -> None:
    from otpmem.agents import Agent
    from otpmem.memory import DefaultProvider
    from otpmem.stores import MemoryStore

    seen: list[str] = []
    store = MemoryStore.start_link()

    def answer(messages: list[dict[str, Any]], tools: Any) -> str:
        seen.append(threading.current_thread().name)
        return "ok"

    for blocks in (None, False):
        model = ScriptedModel(answer) if blocks is None else ScriptedModel(answer, blocks=False)
        agent = Agent.start_link(
            llm=model, memory=DefaultProvider(store), conversation_id=f"where-{blocks}"
        )
        try:
            agent.run("hi")
        finally:
            agent.stop()
    store.stop()
    pooled, inline = seen
    assert pooled.startswith("otpmem-blocking"), pooled  # may wait on anything: the pool
    assert not inline.startswith("otpmem-blocking"), inline  # said it never waits: inline
    assert ScriptedModel(["a"]).blocks is False and ScriptedModel(answer).blocks is True
