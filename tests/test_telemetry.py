"""OpenTelemetry: turns, model calls, tool calls and store writes as spans and metrics,
collected with the SDK's in-memory exporter and reader; nothing when the API is absent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from otpmem import telemetry
from otpmem.agents import Agent
from otpmem.kernel import Kernel, tool
from otpmem.llm import ModelError, ScriptedModel, tool_call
from otpmem.stores import MemoryStore

ROOT = Path(__file__).resolve().parent.parent
WAIT = 10.0


class Collected:
    """What the providers given to ``telemetry.use`` received."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        found = list(self.exporter.get_finished_spans())
        return [s for s in found if name is None or s.name == name]

    def points(self, metric: str) -> list[Any]:
        """Every data point of ``metric`` recorded so far."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for item in scope.metrics:
                    if item.name == metric:
                        found.extend(item.data.data_points)
        return found


@pytest.fixture
def otel() -> Iterator[Collected]:
    collected = Collected()
    telemetry.use(collected.tracer_provider, collected.meter_provider)
    yield collected
    telemetry.use()  # back to the global providers (none is set in the tests)
    collected.tracer_provider.shutdown()
    collected.meter_provider.shutdown()


@pytest.fixture
def store() -> Iterator[MemoryStore]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def adding_model() -> ScriptedModel:
    return ScriptedModel([{"tool_calls": [tool_call("c1", "add", '{"a": 7, "b": 8}')]}, "15"])


def has(span: ReadableSpan, expected: dict[str, Any]) -> bool:
    """Whether ``span`` has (at least) the ``expected`` attributes."""
    found = dict(span.attributes or {})
    return all(k in found and found[k] == v for k, v in expected.items())


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_a_turn_is_a_span_over_its_model_calls_tool_calls_and_writes(
    otel: Collected, store: MemoryStore
) -> None:
    agent = Agent.start_link(
        llm=adding_model(), memory={"store": store}, tools=[add],
        conversation_id="trip", user_id="alice",
    )  # fmt: skip
    result = agent.run("What is 7 + 8?", turn_id="t-1")
    agent.stop()
    assert result.content == "15"
    (turn,) = otel.spans("otpmem.turn")
    models = otel.spans("chat scripted")
    (tool_span,) = otel.spans("execute_tool add")
    writes = otel.spans("otpmem.store.add")
    assert len(models) == 2 and len(writes) == 4  # user, calls, result, answer
    own = turn.context.span_id
    assert all(parent_of(s) == own for s in [*models, tool_span, *writes]), "turn > each"
    assert {s.context.trace_id for s in otel.spans()} == {turn.context.trace_id}
    assert has(
        turn,
        {
            "otpmem.user_id": "alice",
            "otpmem.conversation_id": "trip",
            "gen_ai.conversation.id": "trip",
            "otpmem.turn_id": "t-1",
            "otpmem.turn.outcome": "answered",
            "otpmem.turn.iterations": 2,
            "otpmem.turn.tool_calls": 1,
            "otpmem.turn.resume": False,
        },
    )
    for model in models:
        assert model.attributes is not None
        assert model.attributes["gen_ai.request.model"] == "scripted"
        assert model.attributes["otpmem.turn_id"] == "t-1"
        assert model.attributes["otpmem.user_id"] == "alice"
        assert model.attributes["gen_ai.usage.input_tokens"] > 0
    assert has(
        tool_span,
        {
            "gen_ai.tool.name": "add",
            "gen_ai.tool.call.id": "c1",
            "otpmem.turn_id": "t-1",
            "otpmem.conversation_id": "trip",
        },
    )
    keys = [w.attributes["otpmem.idempotency_key"] for w in writes if w.attributes]
    assert keys == ["turn:t-1:0", "turn:t-1:1", "turn:t-1:2", "turn:t-1:3"]
    assert all(w.attributes and w.attributes["otpmem.store"] == "MemoryStore" for w in writes)


def test_the_metrics_count_turns_and_time_models_tools_and_writes(
    otel: Collected, store: MemoryStore
) -> None:
    agent = Agent.start_link(llm=adding_model(), memory={"store": store}, tools=[add])
    agent.run("What is 7 + 8?")
    agent.stop()
    (turns,) = otel.points("otpmem.turns")
    assert turns.value == 1 and dict(turns.attributes) == {"otpmem.turn.outcome": "answered"}
    (turn_time,) = otel.points("otpmem.turn.duration")
    (model_time,) = otel.points("gen_ai.client.operation.duration")
    assert model_time.count == 2 and model_time.attributes["gen_ai.request.model"] == "scripted"
    assert turn_time.count == 1 and turn_time.sum >= model_time.sum > 0
    tokens = {
        p.attributes["gen_ai.token.type"]: p for p in otel.points("gen_ai.client.token.usage")
    }
    assert set(tokens) == {"input", "output"} and tokens["input"].count == 2
    assert tokens["input"].sum > 0 and tokens["output"].sum > 0
    (tool_time,) = otel.points("otpmem.tool.duration")
    assert tool_time.count == 1 and dict(tool_time.attributes) == {"gen_ai.tool.name": "add"}
    (writes,) = otel.points("otpmem.store.write.duration")
    assert writes.count == 4 and dict(writes.attributes) == {"otpmem.store": "MemoryStore"}
    for point in [turns, turn_time, model_time, writes]:
        assert "otpmem.conversation_id" not in point.attributes, "no series per conversation"


def test_a_suspended_turn_and_its_resume_are_two_turn_spans(
    otel: Collected, store: MemoryStore
) -> None:
    agent = Agent.start_link(
        llm=adding_model(), memory={"store": store}, tools=[tool(add, needs_approval=True)]
    )
    turn = agent.run("What is 7 + 8?")
    assert turn.suspended and otel.spans("execute_tool add") == []
    agent.resume(turn.turn_id, approve=True)
    agent.stop()
    first, second = otel.spans("otpmem.turn")
    assert first.attributes and first.attributes["otpmem.turn.outcome"] == "suspended"
    assert second.attributes and second.attributes["otpmem.turn.resume"] is True
    assert second.attributes["otpmem.turn_id"] == turn.turn_id
    (tool_span,) = otel.spans("execute_tool add")
    assert parent_of(tool_span) == second.context.span_id
    outcomes = {p.attributes["otpmem.turn.outcome"]: p.value for p in otel.points("otpmem.turns")}
    assert outcomes == {"suspended": 1, "answered": 1}


def test_a_failed_model_call_marks_its_span_and_the_turn(
    otel: Collected, store: MemoryStore
) -> None:
    model = ScriptedModel([ModelError("upstream down", status=503)])
    agent = Agent.start_link(llm=model, memory={"store": store})
    with pytest.raises(Exception, match="upstream down"):
        agent.run("hello")
    agent.stop()
    (call,) = otel.spans("chat scripted")
    (turn,) = otel.spans("otpmem.turn")
    assert call.status.status_code is StatusCode.ERROR
    assert turn.status.status_code is StatusCode.ERROR
    assert any(event.name == "exception" for event in call.events)
    (failed,) = otel.points("gen_ai.client.operation.duration")
    assert failed.attributes["error.type"] == "ModelError"
    assert [p.attributes["otpmem.turn.outcome"] for p in otel.points("otpmem.turns")] == ["failed"]


def test_the_kernel_alone_traces_its_model_and_tool_calls(otel: Collected) -> None:
    kernel = Kernel(adding_model(), tools=[add])
    response, _ = kernel.invoke([{"role": "user", "content": "7 + 8?"}])
    assert response.content == "15"
    assert [s.name for s in otel.spans()] == ["chat scripted", "execute_tool add", "chat scripted"]
    assert otel.spans("otpmem.turn") == []


def test_concurrent_turns_each_keep_their_own_span_tree(
    otel: Collected, store: MemoryStore
) -> None:
    agents = [
        Agent.start_link(llm=adding_model(), memory={"store": store}, tools=[add],
                         conversation_id=f"c{i}")
        for i in range(6)
    ]  # fmt: skip
    barrier = threading.Barrier(len(agents))

    def run(index: int) -> None:
        barrier.wait(WAIT)
        agents[index].run("What is 7 + 8?", turn_id=f"t{index}", timeout=WAIT)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(agents))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads)
    for agent in agents:
        agent.stop()
    turns = {s.attributes["otpmem.turn_id"]: s for s in otel.spans("otpmem.turn") if s.attributes}
    assert sorted(turns) == [f"t{i}" for i in range(6)]
    children = [*otel.spans("chat scripted"), *otel.spans("execute_tool add")]
    assert len(children) == 18
    for child in children:
        assert child.attributes is not None
        parent = turns[child.attributes["otpmem.turn_id"]]
        assert parent_of(child) == parent.context.span_id, "each call under its own turn"
    for write in otel.spans("otpmem.store.add"):
        assert write.attributes is not None
        owner = turns["t" + str(write.attributes["otpmem.conversation_id"])[1:]]
        assert parent_of(write) == owner.context.span_id


def test_back_on_the_global_providers_none_set_nothing_is_recorded(store: MemoryStore) -> None:
    collected = Collected()
    telemetry.use(collected.tracer_provider, collected.meter_provider)
    calls = [{"tool_calls": [tool_call(f"c{i}", "add", '{"a": 7, "b": 8}')]} for i in (1, 2)]
    model = ScriptedModel([calls[0], "15", calls[1], "15"])
    agent = Agent.start_link(llm=model, memory={"store": store}, tools=[add])
    try:
        agent.run("What is 7 + 8?")
        seen = len(collected.spans())
        telemetry.use()  # no global provider is set in the tests: nobody listens
        assert agent.run("And again?").content == "15"
    finally:
        telemetry.use()
        agent.stop()
    assert seen == 8, "a turn with a tool: 1 turn, 2 model calls, 1 tool call, 4 writes"
    assert len(collected.spans()) == seen
    (turns,) = collected.points("otpmem.turns")
    assert turns.value == 1


BLOCKED = textwrap.dedent(
    """
    import json, sys

    class Refuse:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Refuse())
    from otpmem import telemetry
    from otpmem.agents import Agent
    from otpmem.llm import ScriptedModel, tool_call
    from otpmem.stores import MemoryStore

    def add(a: int, b: int) -> int:
        \"\"\"Add two numbers.\"\"\"
        return a + b

    store = MemoryStore.start_link()
    model = ScriptedModel([{"tool_calls": [tool_call("c1", "add", '{"a": 7, "b": 8}')]}, "15"])
    agent = Agent.start_link(llm=model, memory={"store": store}, tools=[add])
    answer = agent.run("What is 7 + 8?").content
    try:
        telemetry.use()
        refused = None
    except RuntimeError as exc:
        refused = str(exc)
    agent.stop()
    store.stop()
    loaded = sorted(m for m in sys.modules if m.split(".")[0] == "opentelemetry")
    print(json.dumps([telemetry.ENABLED, answer, loaded, refused]))
    """
)


def test_with_opentelemetry_absent_nothing_of_it_is_imported() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", BLOCKED], capture_output=True, text=True, env=env, timeout=60
    )
    assert child.returncode == 0, child.stderr
    enabled, answer, loaded, refused = json.loads(child.stdout.splitlines()[-1])
    assert enabled is False and answer == "15" and loaded == []
    assert refused is not None and "otpmem[otel]" in refused


GLOBAL = textwrap.dedent(
    """
    import json
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from otpmem.agents import Agent
    from otpmem.llm import ScriptedModel
    from otpmem.stores import MemoryStore

    store = MemoryStore.start_link()
    agent = Agent.start_link(llm=ScriptedModel(["a", "b"]), memory={"store": store})
    agent.run("before any provider is set")
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    trace.set_tracer_provider(provider)  # what the SDK's setup (opentelemetry-instrument) does
    agent.run("after")
    agent.stop()
    store.stop()
    print(json.dumps([s.name for s in spans.get_finished_spans()]))
    """
)


def test_a_global_provider_set_after_otpmem_started_receives_the_spans() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.run(
        [sys.executable, "-c", GLOBAL], capture_output=True, text=True, env=env, timeout=60
    )
    assert child.returncode == 0, child.stderr
    names = json.loads(child.stdout.splitlines()[-1])
    assert names == ["otpmem.store.add", "chat scripted", "otpmem.store.add", "otpmem.turn"]
