"""Every answer an agent or the kernel stores carries the model's usage, and the stores sum
it: from ScriptedModel, from an OpenAI-compatible server, priced by Pricing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otpmem.agents import Agent
from otpmem.kernel import Context, Kernel, memory_filter
from otpmem.llm import (
    ChatResponse,
    OpenAIClient,
    Pricing,
    ScriptedModel,
    normalize_usage,
    tool_call,
)
from otpmem.messages import Conv
from otpmem.stores import Usage, usage_of
from otpmem.stores.longterm import batch_usage
from tests.longterm_support import both_stores
from tests.support import loopback, send_json

ANN = Conv("ann", "chat")
store_fixture = both_stores()


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def stored_usage(store: Any, conv: Conv) -> Usage:
    """The usage summed from the stored messages themselves (the independent check)."""
    total = Usage()
    for message in store.get(conv):
        found = usage_of(message)
        if found is not None:
            total = total + found
    return total


def test_agent_stores_scripted_usage_on_every_answer_and_the_store_sums_it(store: Any) -> None:
    call = tool_call("c1", "add", '{"a": 2, "b": 3}')
    model = ScriptedModel([{"content": "adding", "tool_calls": [call]}, "It is 5."])
    agent = Agent.start_link(llm=model, memory={"store": store}, user_id="ann",
                             conversation_id="chat", tools=[add])  # fmt: skip
    try:
        agent.run("what is 2+3?")
    finally:
        agent.stop()
    answers = [m for m in store.get(ANN) if m["role"] == "assistant"]
    assert len(answers) == 2 and all("usage" in m["metadata"] for m in answers)
    # What ScriptedModel was sent is what it counted: the second call saw the tool round.
    first, second = (a["metadata"]["usage"] for a in answers)
    assert second["prompt_tokens"] > first["prompt_tokens"] > 0
    assert store.usage(ANN) == stored_usage(store, ANN)
    assert store.usage(ANN).total_tokens == first["total_tokens"] + second["total_tokens"]
    assert store.user_usage("ann") == store.usage(ANN)


def test_pricing_records_the_cost_as_a_decimal_string_and_sums_exactly(store: Any) -> None:
    pricing = Pricing({"scripted": ("0.000001", "0.000003")})
    usage = {"prompt_tokens": 1000, "completion_tokens": 100}
    model = ScriptedModel([{"content": "a", "usage": usage}, {"content": "b", "usage": usage}])
    agent = Agent.start_link(llm=model, memory={"store": store}, user_id="ann",
                             conversation_id="chat", pricing=pricing)  # fmt: skip
    try:
        agent.run("one")
        agent.run("two")
    finally:
        agent.stop()
    costs = [m["metadata"]["usage"]["cost"] for m in store.get(ANN) if m["role"] == "assistant"]
    assert costs == ["0.001300", "0.001300"]  # 1000 x 0.000001 + 100 x 0.000003, exactly
    assert store.usage(ANN) == Usage(2000, 200, 2200, Decimal("0.0026"))


def test_a_cost_the_model_reports_is_kept_not_repriced(store: Any) -> None:
    pricing = Pricing({"scripted": ("1", "1")})
    usage = {"prompt_tokens": 5, "completion_tokens": 5, "cost": "0.5"}
    model = ScriptedModel([{"content": "a", "usage": usage}])
    agent = Agent.start_link(llm=model, memory={"store": store}, user_id="ann",
                             conversation_id="chat", pricing=pricing)  # fmt: skip
    try:
        agent.run("one")
    finally:
        agent.stop()
    assert store.usage(ANN).cost == Decimal("0.5")


def test_kernel_memory_filter_path_stores_usage_with_each_answer(store: Any) -> None:
    model = ScriptedModel(
        [{"content": "hi", "usage": {"prompt_tokens": 4, "completion_tokens": 2}}]
    )
    kernel = Kernel(model, filters=[memory_filter(store)],
                    pricing=Pricing.per_million({"scripted": ("1", "2")}))  # fmt: skip
    kernel.invoke([{"role": "user", "content": "hello"}], Context(conversation_id=ANN))
    assert store.get(ANN)[-1]["metadata"]["usage"] == {
        "prompt_tokens": 4,
        "completion_tokens": 2,
        "total_tokens": 6,
        "cost": "0.000008",
    }
    assert store.usage(ANN) == Usage(4, 2, 6, Decimal("0.000008"))


class _Chat(BaseHTTPRequestHandler):
    """An OpenAI-compatible server that reports usage 3 + 2 with every answer."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        reply = {
            "choices": [{"message": {"role": "assistant", "content": "ok"}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
        send_json(self, 200, reply)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    with loopback(_Chat) as url:
        yield url


def test_openai_client_usage_is_stored_and_priced(store: Any, server: str) -> None:
    client = OpenAIClient("tiny", base_url=server, api_key="k", max_retries=0)
    pricing = Pricing({"tiny": ("0.01", "0.02")})
    agent = Agent.start_link(llm=client, memory={"store": store}, user_id="ann",
                             conversation_id="chat", pricing=pricing)  # fmt: skip
    try:
        for text in ("one", "two", "three"):
            agent.run(text)
    finally:
        agent.stop()
        client.close()
    assert store.usage(ANN) == Usage(9, 6, 15, Decimal("0.21"))  # 3 x (3 x 0.01 + 2 x 0.02)
    assert store.get(ANN)[1]["metadata"]["usage"]["cost"] == "0.07"


def test_pricing_refuses_floats_and_bad_prices_at_construction() -> None:
    with pytest.raises(TypeError, match="decimal str"):
        Pricing({"m": (0.1, "0.2")})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="not a decimal number"):
        Pricing({"m": ("cheap", "0.2")})
    with pytest.raises(ValueError, match=">= 0"):
        Pricing({"m": ("-1", "0")})
    with pytest.raises(TypeError, match="pricing must be a Pricing"):
        Kernel(ScriptedModel([]), pricing={"m": ("1", "1")})  # type: ignore[arg-type]
    assert Pricing({"m": ("1", "2")}).cost("other", 1, 1) is None


def test_a_response_without_usage_stores_no_usage() -> None:
    assert "metadata" not in ChatResponse(content="x").to_message()
    assert normalize_usage({"prompt_tokens": None, "weird": 3}) is None


tokens = st.one_of(st.none(), st.integers(-5, 10**9), st.text(max_size=3), st.booleans())


@given(
    st.dictionaries(
        st.sampled_from(
            [
                "prompt_tokens",
                "completion_tokens",
                "total_tokens",
                "input_tokens",
                "output_tokens",
                "cost",
                "other",
            ]
        ),
        st.one_of(tokens, st.decimals(allow_nan=True).map(str)),
    )
)
def test_normalized_usage_is_what_stores_sum(usage: dict[str, Any]) -> None:
    normal = normalize_usage(usage)
    if normal is None:
        return
    message = {"role": "assistant", "content": "x", "metadata": {"usage": normal}}
    summed = usage_of(message)
    assert summed is not None
    assert summed.prompt_tokens == normal["prompt_tokens"]
    assert summed.completion_tokens == normal["completion_tokens"]
    assert summed.total_tokens == normal["total_tokens"]
    assert summed.cost == Decimal(normal.get("cost", "0"))
    assert all(type(normal[k]) is int and normal[k] >= 0 for k in normal if k != "cost")
    json.dumps(normal)  # JSON data, as messages are


def answer(**usage: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "ok", "metadata": {"usage": usage}}


def test_a_batch_carries_the_sum_of_its_answers_usage_or_none() -> None:
    user = {"role": "user", "content": "hi", "metadata": {"usage": {"total_tokens": 5}}}
    assert batch_usage([]) is None
    assert batch_usage([user]) is None, "only an assistant's usage counts"
    assert batch_usage([answer(prompt_tokens=0, completion_tokens=0)]) is None
    both = [answer(prompt_tokens=3, completion_tokens=4, cost="0.5"), user, answer(total_tokens=2)]
    assert batch_usage(both) == Usage(
        3, 4, 9, Decimal("0.5")
    )  # a missing total: prompt + completion
