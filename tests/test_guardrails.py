"""Budgets over recorded usage, checked before every model call: a violation reaches the
caller before the model is called, the refused turn stores nothing the next turn would
send, and the agent stays up."""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otpmem.agents import Agent, AgentHandle
from otpmem.guardrails import (
    CostBudget,
    PolicyViolation,
    Request,
    TokenBudget,
    check_guardrails,
)
from otpmem.kernel import Context, Kernel, guardrails_filter, memory_filter
from otpmem.llm import Pricing, ScriptedModel, tool_call
from otpmem.memory import HeuristicCounter, valid_context
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, Usage
from tests.longterm_support import answered, both_stores, user

store_fixture = both_stores()
ANN = Conv("ann", "chat")


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def fixed(total: int) -> dict[str, Any]:
    """A scripted answer that reports ``total`` tokens."""
    return {"content": "ok", "usage": {"prompt_tokens": total - 1, "completion_tokens": 1}}


def start(store: Any, model: ScriptedModel, policies: list[Any], **options: Any) -> AgentHandle:
    options.setdefault("user_id", "ann")
    options.setdefault("conversation_id", "chat")
    return Agent.start_link(llm=model, memory={"store": store}, guardrails=policies, **options)


def test_conversation_budget_refuses_the_turn_after_it_is_spent(store: Any) -> None:
    model = ScriptedModel([fixed(40), fixed(40), fixed(40)], record=True)
    agent = start(store, model, [TokenBudget(70, scope="conversation")])
    try:
        agent.run("one")  # 0 <= 70: passes, records 40
        agent.run("two")  # 40 <= 70: passes, records 40 (80: over, the next is refused)
        stored = store.get(ANN)
        with pytest.raises(PolicyViolation) as refused:
            agent.run("three")
        assert len(model.calls) == 2, "the model was not called for the refused turn"
        assert store.get(ANN) == stored, "the refused turn stored nothing"
        assert refused.value.stored == []
        assert refused.value.reason == "token budget exceeded: 80 / 70 tokens (scope: conversation)"
        assert refused.value.metadata == {
            "accumulated": 80, "estimated": 0, "total": 80, "max": 70, "scope": "conversation"
        }  # fmt: skip
        assert isinstance(refused.value.policy, TokenBudget)
        assert agent.alive and agent.info()["turn_count"] == 2
        # Another conversation of the same agent's store has its own budget.
        other = start(store, model, [TokenBudget(70)], conversation_id="other")
        try:
            assert other.run("fresh").content == "ok"
        finally:
            other.stop()
    finally:
        agent.stop()


def test_user_budget_counts_every_conversation_of_the_user_and_survives_clear(store: Any) -> None:
    model = ScriptedModel([fixed(30), fixed(30), fixed(30)], record=True)
    first = start(store, model, [TokenBudget(50, scope="user")], conversation_id="a")
    second = start(store, model, [TokenBudget(50, scope="user")], conversation_id="b")
    try:
        first.run("one")
        second.run("two")  # the user has 30 <= 50: passes, now 60
        first.clear_messages()  # clearing a conversation does not reset its user's spend
        with pytest.raises(PolicyViolation, match="60 / 50 tokens"):
            first.run("three")
        assert len(model.calls) == 2
        assert store.user_usage("ann").total_tokens == 60
    finally:
        first.stop()
        second.stop()


def test_estimated_mode_refuses_a_call_that_would_overshoot_before_it_is_made(store: Any) -> None:
    model = ScriptedModel(["never"], record=True)
    counter = HeuristicCounter()
    budget = TokenBudget(20, mode="estimated", counter=counter)
    agent = start(store, model, [budget], system_prompt="be brief")
    try:
        with pytest.raises(PolicyViolation) as refused:
            agent.run("x" * 200)  # 3 + 50 tokens of message alone: over 20 before any usage
        assert len(model.calls) == 0 and store.get(ANN) == []
        sent = [{"role": "system", "content": "be brief"}, user("x" * 200)]
        assert refused.value.metadata["estimated"] == sum(counter.count(m) for m in sent)
        assert refused.value.metadata["accumulated"] == 0
        assert agent.run("hi").content == "never"  # small enough: the agent goes on
    finally:
        agent.stop()


def test_a_violation_between_tool_rounds_ends_the_turn_with_a_valid_history(store: Any) -> None:
    call = tool_call("c1", "add", '{"a": 1, "b": 2}')
    big = {"prompt_tokens": 500, "completion_tokens": 5}
    model = ScriptedModel(
        [{"content": None, "tool_calls": [call], "usage": big}, "3", "next"], record=True
    )
    budget = TokenBudget(100)
    agent = start(store, model, [budget], tools=[add])
    try:
        with pytest.raises(PolicyViolation, match="505 / 100") as refused:
            agent.run("1+2?")  # the first call passes; the one after the tool round does not
        assert len(model.calls) == 1
        stored = store.get(ANN)
        assert [m["role"] for m in stored] == ["user", "assistant", "tool"]
        assert refused.value.stored == stored, "the violation says what the turn left"
        assert valid_context(stored) == stored  # what the next turn sends is valid
        budget.max = 10_000  # the caller raised it
        assert agent.run("and now?").content == "3"
    finally:
        agent.stop()


def test_missing_ids_fail_closed_with_a_reason(store: Any) -> None:
    model = ScriptedModel(["never"], record=True)
    agent = start(store, model, [TokenBudget(10**6, scope="user")], user_id=None)
    try:
        with pytest.raises(
            PolicyViolation, match=r"TokenBudget \(user\): the request names no user"
        ):
            agent.run("hi")
        assert len(model.calls) == 0
    finally:
        agent.stop()
    for policy in (TokenBudget(5), CostBudget("1"), TokenBudget(5, "time_window", window_s=9)):
        with pytest.raises(PolicyViolation, match="names no"):
            check_guardrails(Request([user("x")]), [policy], store)


def test_time_window_slides_over_recorded_usage(store: Any) -> None:
    store.add(ANN, [user("a"), answered("b", 60, 40)])
    now = time.time()
    hour = TokenBudget(50, scope="time_window", window_s=3600)
    later = TokenBudget(50, scope="time_window", window_s=3600, clock=lambda: now + 7200)
    request = Request.of([user("next")], ANN)
    with pytest.raises(PolicyViolation, match=r"100 / 50 tokens \(scope: the last 3600 s\)"):
        check_guardrails(request, [hour], store)
    assert check_guardrails(request, [later], store) is request  # two hours on: out of it
    # Without a user, the window counts the conversation's calls.
    anonymous = Conv(None, "anon")
    store.add(anonymous, [user("a"), answered("b", 30, 30)])
    with pytest.raises(PolicyViolation, match="60 / 50"):
        check_guardrails(Request.of([user("x")], anonymous), [hour], store)


def test_time_window_budget_survives_a_reopen_of_the_store(tmp_path: Path) -> None:
    path = tmp_path / "db"
    budget = TokenBudget(50, scope="time_window", window_s=3600)
    first = LevelDBStore.start_link(path)
    try:
        agent = start(first, ScriptedModel([fixed(80)]), [budget])
        try:
            agent.run("spend")
        finally:
            agent.stop()
    finally:
        first.stop()
    again = LevelDBStore.start_link(path)  # a restart: nothing in memory carries the window
    try:
        model = ScriptedModel(["never"], record=True)
        agent = start(again, model, [budget])
        try:
            with pytest.raises(PolicyViolation, match="80 / 50"):
                agent.run("more")
            assert len(model.calls) == 0
        finally:
            agent.stop()
    finally:
        again.stop()


def test_cost_budget_with_pricing_stops_at_the_exact_decimal_limit(store: Any) -> None:
    pricing = Pricing({"scripted": ("0.001", "0.002")})
    usage = {"prompt_tokens": 100, "completion_tokens": 50}  # 0.1 + 0.1 = 0.2 a call
    model = ScriptedModel([{"content": "ok", "usage": usage}] * 4, record=True)
    agent = start(store, model, [CostBudget("0.4")], pricing=pricing)
    try:
        agent.run("one")
        agent.run("two")
        agent.run("three")  # 0.4 spent: at the limit still passes (0.4 <= 0.4)
        with pytest.raises(PolicyViolation) as refused:
            agent.run("four")  # 0.6 > 0.4
        assert refused.value.metadata == {
            "accumulated": "0.600",
            "max": "0.4",
            "scope": "conversation",
        }
        assert store.usage(ANN).cost == Decimal("0.6") and len(model.calls) == 3
    finally:
        agent.stop()


def test_two_budgets_of_one_scope_read_the_store_once(store: Any) -> None:
    reads: list[Any] = []

    class Counting:
        def usage(self, conv: Any, since: float | None = None) -> Usage:
            reads.append(("usage", conv, since))
            return Usage(10, 10, 20, Decimal("0.01"))

        def user_usage(self, user_id: str, since: float | None = None) -> Usage:
            reads.append(("user", user_id, since))
            return Usage()

    request = Request.of([user("x")], ANN)
    assert check_guardrails(request, [TokenBudget(100), CostBudget("1")], Counting()) is request
    assert reads == [("usage", ANN, None)]


def test_bad_guardrail_config_is_refused_at_construction(store: Any) -> None:
    with pytest.raises(ValueError, match="scope must be one of"):
        TokenBudget(10, scope="team")
    with pytest.raises(ValueError, match="mode must be one of"):
        TokenBudget(10, mode="guess")
    with pytest.raises(ValueError, match="needs window_s"):
        TokenBudget(10, scope="time_window")
    with pytest.raises(ValueError, match="window_s is for scope='time_window'"):
        TokenBudget(10, window_s=60)
    with pytest.raises(ValueError, match="int >= 0"):
        TokenBudget(-1)
    with pytest.raises(TypeError, match="decimal str"):
        CostBudget(0.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of policies"):
        start(store, ScriptedModel([]), TokenBudget(5))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="is not a guardrail policy"):
        start(store, ScriptedModel([]), ["budget"])
    with pytest.raises(ValueError, match="guardrails read the usage a store records"):
        Agent.start_link(llm=ScriptedModel([]), memory=None, guardrails=[TokenBudget(5)])


@given(
    spent=st.integers(0, 10_000),
    limit=st.integers(0, 10_000),
    text=st.text(max_size=300),
    mode=st.sampled_from(["accumulated", "estimated"]),
)
def test_token_budget_passes_exactly_when_the_total_is_within_max(
    spent: int, limit: int, text: str, mode: str
) -> None:
    class Spent:
        def usage(self, conv: Any, since: float | None = None) -> Usage:
            return Usage(spent, 0, spent)

        def user_usage(self, user_id: str, since: float | None = None) -> Usage:
            return Usage(spent, 0, spent)

    counter = HeuristicCounter()
    request = Request.of([user(text)], ANN)
    estimate = counter.count(user(text)) if mode == "estimated" else 0
    try:
        passed = check_guardrails(
            request, [TokenBudget(limit, mode=mode, counter=counter)], Spent()
        )
    except PolicyViolation as violation:
        assert spent + estimate > limit
        assert violation.metadata["total"] == spent + estimate
    else:
        assert passed is request and spent + estimate <= limit


class Redact:
    """A policy that rewrites what is sent: every "secret" becomes "[redacted]"."""

    def check(self, request: Request, store: Any) -> Request:
        return request.with_messages(
            [
                {**m, "content": str(m.get("content")).replace("secret", "[redacted]")}
                for m in request.messages
            ]
        )


def test_a_policy_that_rewrites_sends_exactly_its_messages_and_stores_the_original(
    store: Any,
) -> None:
    model = ScriptedModel(["ok"], record=True)
    agent = start(store, model, [Redact()], system_prompt="the secret rules")
    try:
        agent.run("my secret is 42")
    finally:
        agent.stop()
    sent = model.calls[0][0]
    assert [m["content"] for m in sent] == ["the [redacted] rules", "my [redacted] is 42"]
    assert store.get(ANN)[0] == user("my secret is 42")  # the store keeps what was said


def test_kernel_guardrails_filter_refuses_before_the_memory_filter_stores(store: Any) -> None:
    model = ScriptedModel([fixed(90), "never"], record=True)
    kernel = Kernel(model, [guardrails_filter([TokenBudget(50, mode="estimated")], store),
                            memory_filter(store)])  # fmt: skip
    kernel.invoke([user("hi")], Context(conversation_id=ANN))
    stored = store.get(ANN)
    with pytest.raises(PolicyViolation) as refused:
        kernel.invoke([user("again")], Context(conversation_id=ANN))
    assert store.get(ANN) == stored and len(model.calls) == 1
    # In delta mode it checked what would be sent: the stored conversation and the new one.
    counter = HeuristicCounter()
    assert refused.value.metadata["estimated"] == sum(
        counter.count(m) for m in [*stored, user("again")]
    )
    with pytest.raises(ValueError, match="must come before memory_filter"):
        Kernel(model, [memory_filter(store), guardrails_filter([TokenBudget(5)], store)])


def test_kernel_guardrails_filter_in_full_mode_checks_and_rewrites(store: Any) -> None:
    model = ScriptedModel(["ok"], record=True)
    kernel = Kernel(model, [guardrails_filter([Redact(), TokenBudget(5)], store)])
    kernel.invoke([user("a secret")], Context(conversation_id=ANN))
    assert model.calls[0][0] == [user("a [redacted]")]
    store.add(ANN, [user("x"), answered("y", 5, 5)])
    with pytest.raises(PolicyViolation, match="10 / 5"):
        kernel.invoke([user("more")], Context(conversation_id=ANN))
    assert len(model.calls) == 1
