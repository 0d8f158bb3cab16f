"""The kernel: tools from functions, onion filters, the tool loop, memory (delta) mode.

Ports beamai's kernel/filter basics (reference §4 F), the memory filter cases driven
directly (§4 D), and the kernel-plus-memory integration cases (§4 E, era A semantics:
ephemeral conversations and a kernel-level tool loop).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, Optional

import pytest

from otpmem.kernel import (
    ChatRequest,
    Context,
    Filter,
    Kernel,
    KernelError,
    MaxToolIterations,
    Tool,
    ToolRequest,
    encode_result,
    memory_filter,
    tool,
    tool_error,
    toolset,
)
from otpmem.kernel.filters import run_chat_chain, run_tool_chain
from otpmem.llm import ChatResponse, ScriptedModel, tool_call
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore, MemoryStoreHandle

Msg = dict[str, Any]


def user(text: str) -> Msg:
    return {"role": "user", "content": text}


def roles(messages: list[Msg]) -> list[str]:
    return [m["role"] for m in messages]


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    try:
        yield handle
    finally:
        handle.stop()


def add(a: int, b: int) -> int:
    """Add two integers.

    Returns their sum.
    """
    return a + b


# --------------------------------------------------------------------------- tools


def search(
    query: str,
    limit: int = 5,
    tags: Optional[list[int]] = None,  # noqa: UP045 - Optional is what is under test
    mode: Literal["fast", "slow"] = "fast",
    ratio: float | None = None,
    strict: bool = False,
    options: dict[str, Any] | None = None,
    anything: Any = None,
    *args: Any,
    **kwargs: Any,
) -> list[str]:
    """Search the archive for a query.

    The second paragraph is not part of the description.
    """
    return [query]


def test_tool_schema_from_function_hints_and_docstring() -> None:
    built = tool(search)
    assert built.name == "search"
    assert built.description == "Search the archive for a query."
    assert built.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "integer"}},
            "mode": {"enum": ["fast", "slow"]},
            "ratio": {"type": "number"},
            "strict": {"type": "boolean"},
            "options": {"type": "object"},
            "anything": {},
        },
        "required": ["query"],
    }


def test_tool_schema_required_are_the_parameters_without_defaults() -> None:
    def f(a: str, b: list[str], c: int = 1) -> None:
        """F."""

    built = tool(f)
    assert built.parameters["required"] == ["a", "b"]
    assert built.parameters["properties"]["b"] == {"type": "array", "items": {"type": "string"}}


def test_tool_schema_union_of_several_types_is_any_of() -> None:
    def f(x: int | str, y: Optional[int | str] = None) -> None:  # noqa: UP045
        pass

    properties = tool(f).parameters["properties"]
    assert properties["x"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}
    assert properties["y"] == {"anyOf": [{"type": "integer"}, {"type": "string"}]}


def test_tool_without_docstring_or_hints() -> None:
    def bare(x, y=2):  # type: ignore[no-untyped-def]
        return x

    built = tool(bare)
    assert built.description == ""
    assert built.parameters == {
        "type": "object",
        "properties": {"x": {}, "y": {}},
        "required": ["x"],
    }


def test_tool_name_and_description_overrides_and_spec() -> None:
    built = tool(add, name="plus", description="Sum.")
    assert built.spec() == {
        "type": "function",
        "function": {
            "name": "plus",
            "description": "Sum.",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
    assert tool(built) is built
    with pytest.raises(TypeError):
        tool(42)  # type: ignore[arg-type]


def test_tool_run_with_json_and_mapping_arguments() -> None:
    built = tool(add)
    assert built.run('{"a": 2, "b": 3}') == "5"
    assert built.run({"a": 4, "b": 5}) == "9"


def test_tool_run_raising_tool_gives_error_json() -> None:
    def broken(x: int) -> int:
        raise ValueError(f"cannot handle {x}")

    result = json.loads(tool(broken).run('{"x": 3}'))
    assert result == {"error": {"type": "tool_error", "message": "ValueError: cannot handle 3"}}


@pytest.mark.parametrize("arguments", ["[1, 2]", "7", '"text"', "null"])
def test_tool_run_non_object_arguments_is_an_error(arguments: str) -> None:
    result = json.loads(tool(add).run(arguments))
    assert result["error"]["type"] == "tool_error"
    assert "TypeError" in result["error"]["message"]


@pytest.mark.parametrize("arguments", ["{not json", '{"a": 1}', '{"a": 1, "b": 2, "c": 3}'])
def test_tool_run_bad_json_or_wrong_arguments_is_an_error(arguments: str) -> None:
    result = json.loads(tool(add).run(arguments))
    assert result["error"]["type"] == "tool_error"
    assert result["error"]["message"]


def test_tool_error_kind() -> None:
    assert json.loads(tool_error(LookupError("gone"), kind="tool_not_found")) == {
        "error": {"type": "tool_not_found", "message": "LookupError: gone"}
    }


def test_encode_result() -> None:
    assert encode_result("plain text") == "plain text"
    assert encode_result(15) == "15"
    assert json.loads(encode_result({"a": [1, 2], "b": None})) == {"a": [1, 2], "b": None}
    assert encode_result(None) == "null"
    assert encode_result(True) == "true"
    odd = object()
    assert encode_result(odd) == repr(odd)
    assert encode_result({1, 2}) == repr({1, 2})


def test_toolset_refuses_duplicate_names() -> None:
    assert list(toolset([add, search])) == ["add", "search"]
    with pytest.raises(ValueError, match="add"):
        toolset([add, tool(search, name="add")])


# --------------------------------------------------------------------------- chat filters


def tracing_filter(name: str, trace: list[str]) -> Filter:
    def around_chat(request: ChatRequest, next_: Any) -> tuple[ChatResponse, Context]:
        trace.append(f"{name}_before")
        result = next_(request)
        trace.append(f"{name}_after")
        return result

    return Filter(name, around_chat=around_chat)


def tracing_model(trace: list[str], reply: str = "ok") -> ScriptedModel:
    def answer(messages: list[Msg], tools: Any) -> str:
        trace.append("terminal")
        return reply

    return ScriptedModel(answer, record=True)


def test_onion_order() -> None:
    trace: list[str] = []
    kernel = Kernel(
        tracing_model(trace), filters=[tracing_filter("a", trace), tracing_filter("b", trace)]
    )
    response, _ = kernel.chat([user("hi")])
    assert response.content == "ok"
    assert trace == ["a_before", "b_before", "terminal", "b_after", "a_after"]


def test_registration_order_is_layer_order() -> None:
    trace: list[str] = []
    kernel = Kernel(
        tracing_model(trace), filters=[tracing_filter("b", trace), tracing_filter("a", trace)]
    )
    kernel.chat([user("hi")])
    assert trace == ["b_before", "a_before", "terminal", "a_after", "b_after"]


def test_onion_order_run_chat_chain_directly() -> None:
    trace: list[str] = []

    def terminal(request: ChatRequest) -> tuple[ChatResponse, Context]:
        trace.append("terminal")
        return ChatResponse(content="t"), request.context

    request = ChatRequest([user("x")], Context())
    chain = [tracing_filter("a", trace), tracing_filter("b", trace)]
    response, _ = run_chat_chain(chain, terminal, request)
    assert response.content == "t"
    assert trace == ["a_before", "b_before", "terminal", "b_after", "a_after"]
    trace.clear()
    run_chat_chain(list(reversed(chain)), terminal, request)
    assert trace == ["b_before", "a_before", "terminal", "a_after", "b_after"]


def test_empty_chain_runs_terminal() -> None:
    trace: list[str] = []
    model = tracing_model(trace, "direct")
    response, context = Kernel(model).chat([user("hi")])
    assert response.content == "direct"
    assert trace == ["terminal"]
    assert list(model.calls) == [([user("hi")], None)]
    assert isinstance(context, Context)


def test_irrelevant_filter_skipped() -> None:
    trace: list[str] = []

    def around_tool(request: ToolRequest, next_: Any) -> str:
        trace.append("tool_hook")
        return str(next_(request))

    kernel = Kernel(
        tracing_model(trace),
        filters=[
            Filter("tools_only", around_tool=around_tool),
            tracing_filter("a", trace),
            Filter("nothing"),
        ],
    )
    kernel.chat([user("hi")])
    assert trace == ["a_before", "terminal", "a_after"]


def test_short_circuit() -> None:
    trace: list[str] = []

    def halt(request: ChatRequest, next_: Any) -> tuple[ChatResponse, Context]:
        trace.append("halted")
        return ChatResponse(content="from cache"), request.context

    model = tracing_model(trace)
    kernel = Kernel(
        model,
        filters=[tracing_filter("o", trace), Filter("halt", around_chat=halt)],
    )
    response, _ = kernel.chat([user("hi")])
    assert response.content == "from cache"
    assert trace == ["o_before", "halted", "o_after"]
    assert len(model.calls) == 0


def test_filter_can_rewrite_request_and_response() -> None:
    def rewrite(request: ChatRequest, next_: Any) -> tuple[ChatResponse, Context]:
        response, context = next_(request.with_messages([*request.messages, user("added")]))
        return dataclasses.replace(response, content=response.content.upper()), context

    model = ScriptedModel(lambda messages, tools: f"saw {len(messages)}", record=True)
    response, _ = Kernel(model, filters=[Filter("rw", around_chat=rewrite)]).chat([user("a")])
    assert response.content == "SAW 2"
    assert model.calls[0][0] == [user("a"), user("added")]


def test_terminal_error_propagates_through_filters() -> None:
    trace: list[str] = []
    kernel = Kernel(
        ScriptedModel([RuntimeError("boom")], record=True), filters=[tracing_filter("a", trace)]
    )
    with pytest.raises(RuntimeError, match="boom"):
        kernel.chat([user("hi")])
    assert trace == ["a_before"]


def test_context_and_options_reach_the_filters_and_model() -> None:
    seen: list[Any] = []

    def look(request: ChatRequest, next_: Any) -> tuple[ChatResponse, Context]:
        seen.append((request.context.vars.get("k"), dict(request.options)))
        request.context.filter_states["look"] = "was here"
        return next_(request)

    class OptionModel:
        def chat(self, messages: Any, tools: Any = None, **options: Any) -> ChatResponse:
            seen.append(options)
            return ChatResponse(content="x")

    context = Context(vars={"k": "v"})
    _, out = Kernel(OptionModel(), filters=[Filter("look", around_chat=look)]).chat(
        [user("hi")], context, temperature=0.5
    )
    assert seen == [("v", {"temperature": 0.5}), {"temperature": 0.5}]
    assert out.filter_states == {"look": "was here"}


# --------------------------------------------------------------------------- tool filters


def doubling_arguments(request: ToolRequest, next_: Any) -> str:
    arguments = {k: v * 2 for k, v in json.loads(request.arguments).items()}
    return str(next_(dataclasses.replace(request, arguments=json.dumps(arguments))))


def doubling_result(request: ToolRequest, next_: Any) -> str:
    return str(int(next_(request)) * 2)


def add_call(call_id: str = "c1", a: int = 5, b: int = 10) -> Msg:
    return tool_call(call_id, "add", json.dumps({"a": a, "b": b}))


def test_around_tool_pre_doubles_arguments() -> None:
    kernel = Kernel(
        ScriptedModel([], record=True),
        filters=[Filter("pre", around_tool=doubling_arguments)],
        tools=[add],
    )
    result = kernel.run_tool(add_call(), Context())
    assert result == {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "30"}


def test_around_tool_post_doubles_result() -> None:
    kernel = Kernel(
        ScriptedModel([], record=True),
        filters=[Filter("post", around_tool=doubling_result)],
        tools=[add],
    )
    assert kernel.run_tool(add_call(), Context())["content"] == "30"


def test_around_tool_short_circuit_returns_cached_result() -> None:
    ran: list[Any] = []

    def counted(a: int, b: int) -> int:
        ran.append((a, b))
        return a + b

    def cached(request: ToolRequest, next_: Any) -> str:
        return '{"cached": 42}'

    kernel = Kernel(
        ScriptedModel([], record=True),
        filters=[Filter("cache", around_tool=cached)],
        tools=[tool(counted, name="add")],
    )
    assert kernel.run_tool(add_call(), Context())["content"] == '{"cached": 42}'
    assert ran == []


def test_around_tool_onion_order_and_chat_only_filters_skipped() -> None:
    trace: list[str] = []

    def layer(name: str) -> Callable[[ToolRequest, Any], str]:
        def around_tool(request: ToolRequest, next_: Any) -> str:
            trace.append(f"{name}_before")
            result = str(next_(request))
            trace.append(f"{name}_after")
            return result

        return around_tool

    def terminal(request: ToolRequest) -> str:
        trace.append("terminal")
        return request.tool.run(request.arguments)

    filters = [
        Filter("a", around_tool=layer("a")),
        tracing_filter("chat_only", trace),
        Filter("b", around_tool=layer("b")),
    ]
    request = ToolRequest(tool(add), add_call(), '{"a": 1, "b": 2}', Context())
    assert run_tool_chain(filters, terminal, request) == "3"
    assert trace == ["a_before", "b_before", "terminal", "b_after", "a_after"]


def test_around_tool_filters_apply_inside_the_loop() -> None:
    def answer(messages: list[Msg], tools: Any) -> Any:
        if messages[-1]["role"] == "tool":
            return f"The answer is {messages[-1]['content']}"
        return {"tool_calls": [add_call()]}

    kernel = Kernel(
        ScriptedModel(answer, record=True),
        filters=[
            Filter("pre", around_tool=doubling_arguments),
            Filter("post", around_tool=doubling_result),
        ],
        tools=[add],
    )
    response, _ = kernel.invoke([user("5 + 10?")])
    assert response.content == "The answer is 60"


# --------------------------------------------------------------------------- validation


def test_kernel_rejects_a_non_chat_model() -> None:
    with pytest.raises(TypeError, match="ChatModel"):
        Kernel(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Kernel(lambda messages: "x")  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "3", None])
def test_kernel_rejects_bad_max_tool_iterations(bad: Any) -> None:
    with pytest.raises(ValueError, match="max_tool_iterations"):
        Kernel(ScriptedModel([], record=True), max_tool_iterations=bad)


def test_kernel_rejects_non_filter_filters() -> None:
    def hook(request: ChatRequest, next_: Any) -> Any:
        return next_(request)

    with pytest.raises(TypeError, match="Filter"):
        Kernel(ScriptedModel([], record=True), filters=[hook])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        Kernel(ScriptedModel([], record=True), filters=[Filter("ok"), {"name": "x"}])  # type: ignore[list-item]


def test_kernel_rejects_duplicate_tool_names() -> None:
    with pytest.raises(ValueError, match="add"):
        Kernel(ScriptedModel([], record=True), tools=[add, Tool("add", "other", {}, fn=lambda: 0)])


def test_kernel_sends_tool_specs_to_the_model() -> None:
    model = ScriptedModel(["x"], record=True)
    Kernel(model, tools=[add]).chat([user("hi")])
    assert model.calls[0][1] == [tool(add).spec()]


# --------------------------------------------------------------------------- D: memory filter


def echo_terminal(seen: list[list[Msg]], reply: str = "reply") -> Any:
    def terminal(request: ChatRequest) -> tuple[ChatResponse, Context]:
        seen.append([dict(m) for m in request.messages])
        return ChatResponse(content=reply), request.context

    return terminal


OLD = {"role": "user", "content": "old question"}
NEW = {"role": "user", "content": "new question"}


def check_pre_chat_stores_and_expands(memory: Any) -> None:
    memory.add("c", [OLD])
    seen: list[list[Msg]] = []
    request = ChatRequest([NEW], Context(conversation_id="c"))
    response, _ = run_chat_chain([memory_filter(memory)], echo_terminal(seen), request)
    assert response.content == "reply"
    assert seen == [[OLD, NEW]]
    assert memory.count("c") == 3
    assert memory.get("c") == [OLD, NEW, {"role": "assistant", "content": "reply"}]


def test_pre_chat_stores_and_expands(store: MemoryStoreHandle) -> None:
    check_pre_chat_stores_and_expands(store)


def test_memory_filter_with_leveldb(tmp_path: Path) -> None:
    disk = LevelDBStore.start_link(tmp_path / "db")
    try:
        check_pre_chat_stores_and_expands(disk)
    finally:
        disk.stop()


def test_no_conv_id_passthrough(store: MemoryStoreHandle) -> None:
    store.add("c", [OLD])
    seen: list[list[Msg]] = []
    request = ChatRequest([NEW], Context())
    response, _ = run_chat_chain([memory_filter(store)], echo_terminal(seen), request)
    assert response.content == "reply"
    assert seen == [[NEW]]
    assert store.get("c") == [OLD]
    assert store.conversations() == [Conv(None, "c")]


def test_post_chat_stores_response(store: MemoryStoreHandle) -> None:
    seen: list[list[Msg]] = []
    request = ChatRequest([], Context(conversation_id="c"))
    run_chat_chain([memory_filter(store)], echo_terminal(seen), request)
    assert seen == [[]]
    assert store.get("c") == [{"role": "assistant", "content": "reply"}]


def test_memory_filter_through_kernel_chat(store: MemoryStoreHandle) -> None:
    store.add("c", [OLD])
    model = ScriptedModel(["reply"], record=True)
    kernel = Kernel(model, filters=[memory_filter(store)])
    response, _ = kernel.chat([NEW], Context(conversation_id="c"))
    assert response.content == "reply"
    assert model.calls[0][0] == [OLD, NEW]
    assert store.count("c") == 3


def test_memory_filter_does_not_store_an_empty_reply(store: MemoryStoreHandle) -> None:
    kernel = Kernel(
        ScriptedModel([ChatResponse(content=None)], record=True), filters=[memory_filter(store)]
    )
    kernel.chat([NEW], Context(conversation_id="c"))
    assert store.get("c") == [NEW]


def test_memory_filter_keeps_the_delta_when_the_model_fails(store: MemoryStoreHandle) -> None:
    kernel = Kernel(
        ScriptedModel([RuntimeError("down")], record=True), filters=[memory_filter(store)]
    )
    with pytest.raises(RuntimeError, match="down"):
        kernel.chat([NEW], Context(conversation_id="c"))
    assert store.get("c") == [NEW]  # stored before the call; nothing rolled back


def test_memory_filter_accepts_a_conv_with_user(store: MemoryStoreHandle) -> None:
    conv = Conv("alice", "c")
    Kernel(
        ScriptedModel(["hi alice"], usage=False, record=True), filters=[memory_filter(store)]
    ).chat([NEW], Context(conversation_id=conv))
    assert store.get(conv) == [NEW, {"role": "assistant", "content": "hi alice"}]
    assert store.conversations("alice") == [conv]


# --------------------------------------------------------------------------- E: kernel + memory


def saw_n() -> ScriptedModel:
    return ScriptedModel(lambda messages, tools: f"saw:{len(messages)}", record=True)


@pytest.mark.parametrize("method", ["invoke", "chat"])
def test_cross_invoke_accumulation(store: MemoryStoreHandle, method: str) -> None:
    kernel = Kernel(saw_n(), filters=[memory_filter(store)])
    call = getattr(kernel, method)
    first, _ = call([user("one")], Context(conversation_id="conv-1"))
    second, _ = call([user("two")], Context(conversation_id="conv-1"))
    assert first.content == "saw:1"
    assert second.content == "saw:3"
    stored = store.get("conv-1")
    assert roles(stored) == ["user", "assistant", "user", "assistant"]
    assert [m["content"] for m in stored] == ["one", "saw:1", "two", "saw:3"]


def test_ephemeral_cleanup(store: MemoryStoreHandle) -> None:
    model = saw_n()
    kernel = Kernel(model, filters=[memory_filter(store)])
    response, context = kernel.invoke([user("hello")])
    assert response.content == "saw:1"
    assert model.calls[0][0] == [user("hello")]
    assert context.conversation_id is not None
    assert context.ephemeral is True
    assert store.get(context.conversation_id) == []
    assert store.conversations() == []
    # a second ephemeral invocation gets a fresh conversation
    _, again = kernel.invoke([user("hello")])
    assert again.conversation_id != context.conversation_id


def test_ephemeral_cleanup_with_given_context_without_conv_id(store: MemoryStoreHandle) -> None:
    given = Context(vars={"k": 1})
    _, context = Kernel(saw_n(), filters=[memory_filter(store)]).invoke([user("x")], given)
    assert context.ephemeral is True
    assert context.vars == {"k": 1}
    assert store.conversations() == []


def test_ephemeral_cleanup_when_the_model_raises_mid_invoke(store: MemoryStoreHandle) -> None:
    seen: list[tuple[Any, list[Msg]]] = []

    def spy(request: ChatRequest, next_: Any) -> tuple[ChatResponse, Context]:
        conv = request.context.conversation_id
        seen.append((conv, store.get(conv)))
        return next_(request)

    model = ScriptedModel(
        [{"tool_calls": [add_call("c1", 7, 8)]}, RuntimeError("model died")], record=True
    )
    kernel = Kernel(
        model, filters=[memory_filter(store), Filter("spy", around_chat=spy)], tools=[add]
    )
    with pytest.raises(RuntimeError, match="model died"):
        kernel.invoke([user("7 + 8?")])
    assert len(seen) == 2
    conv = seen[0][0]
    assert isinstance(conv, Conv)
    assert seen[1][0] == conv
    # during the invocation the conversation was stored ...
    assert roles(seen[1][1]) == ["user", "assistant", "tool"]
    # ... and it is gone now
    assert store.get(conv) == []
    assert store.conversations() == []


def test_named_conversation_is_not_cleared_on_error(store: MemoryStoreHandle) -> None:
    kernel = Kernel(ScriptedModel([RuntimeError("x")], record=True), filters=[memory_filter(store)])
    with pytest.raises(RuntimeError):
        kernel.invoke([user("keep me")], Context(conversation_id="named"))
    assert store.get("named") == [user("keep me")]


def test_no_memory_no_ephemeral_id() -> None:
    _, context = Kernel(ScriptedModel(["x"], record=True)).invoke([user("a")])
    assert context.conversation_id is None
    assert context.ephemeral is False


def answer_with_tool_result(messages: list[Msg], tools: Any) -> Any:
    """First round: call add(7, 8); once a tool result is there: report it."""
    if messages and messages[-1]["role"] == "tool":
        return f"The answer is {messages[-1]['content']}"
    return {"tool_calls": [add_call("c1", 7, 8)]}


ASSISTANT_CALL = {"role": "assistant", "content": None, "tool_calls": [add_call("c1", 7, 8)]}
TOOL_RESULT = {"role": "tool", "tool_call_id": "c1", "name": "add", "content": "15"}


def test_mock_tool_call_loop_full_mode() -> None:
    model = ScriptedModel(answer_with_tool_result, usage=False, record=True)
    kernel = Kernel(model, tools=[add])
    response, context = kernel.invoke([user("7 + 8?")])
    assert response.content == "The answer is 15"
    assert context.conversation_id is None
    assert len(model.calls) == 2
    assert model.calls[0] == ([user("7 + 8?")], [tool(add).spec()])
    assert model.calls[1][0] == [user("7 + 8?"), ASSISTANT_CALL, TOOL_RESULT]


def test_mock_tool_call_loop_delta_mode(store: MemoryStoreHandle) -> None:
    model = ScriptedModel(answer_with_tool_result, usage=False, record=True)
    kernel = Kernel(model, filters=[memory_filter(store)], tools=[add])
    response, _ = kernel.invoke([user("7 + 8?")], Context(conversation_id="calc"))
    assert response.content == "The answer is 15"
    final = {"role": "assistant", "content": "The answer is 15"}
    assert store.get("calc") == [user("7 + 8?"), ASSISTANT_CALL, TOOL_RESULT, final]
    assert model.calls[0][0] == [user("7 + 8?")]
    # the second call sees the whole stored conversation, not only the tool result
    assert model.calls[1][0] == [user("7 + 8?"), ASSISTANT_CALL, TOOL_RESULT]


def test_delta_mode_sends_only_the_delta_through_outer_filters(
    store: MemoryStoreHandle,
) -> None:
    outer: list[list[Msg]] = []

    def record(request: ChatRequest, next_: Any) -> tuple[ChatResponse, Context]:
        outer.append([dict(m) for m in request.messages])
        return next_(request)

    kernel = Kernel(
        ScriptedModel(answer_with_tool_result, record=True),
        filters=[Filter("outer", around_chat=record), memory_filter(store)],
        tools=[add],
    )
    kernel.invoke([user("7 + 8?")], Context(conversation_id="calc"))
    assert outer == [[user("7 + 8?")], [TOOL_RESULT]]


@pytest.mark.parametrize("delta", [False, True])
def test_assistant_text_alongside_tool_calls_is_kept(store: MemoryStoreHandle, delta: bool) -> None:
    def answer(messages: list[Msg], tools: Any) -> Any:
        if messages[-1]["role"] == "tool":
            return "done"
        return {"content": "Let me add those.", "tool_calls": [add_call("c1", 7, 8)]}

    model = ScriptedModel(answer, usage=False, record=True)
    filters = [memory_filter(store)] if delta else []
    kernel = Kernel(model, filters=filters, tools=[add])
    kernel.invoke([user("7 + 8?")], Context(conversation_id="c" if delta else None))
    expected = {
        "role": "assistant",
        "content": "Let me add those.",
        "tool_calls": [add_call("c1", 7, 8)],
    }
    assert model.calls[1][0][1] == expected
    if delta:
        assert store.get("c")[1] == expected


def test_system_prompt_innermost_and_never_stored(store: MemoryStoreHandle) -> None:
    outer: list[list[Msg]] = []

    def record(request: ChatRequest, next_: Any) -> tuple[ChatResponse, Context]:
        outer.append([dict(m) for m in request.messages])
        return next_(request)

    model = ScriptedModel(answer_with_tool_result, usage=False, record=True)
    kernel = Kernel(
        model,
        filters=[Filter("outer", around_chat=record), memory_filter(store)],
        tools=[add],
    )
    system = {"role": "system", "content": "Be brief."}
    response, _ = kernel.invoke(
        [user("7 + 8?")], Context(conversation_id="sys"), system_prompt="Be brief."
    )
    assert response.content == "The answer is 15"
    # the model sees the system prompt first, on every round
    assert [call[0][0] for call in model.calls] == [system, system]
    assert model.calls[1][0] == [system, user("7 + 8?"), ASSISTANT_CALL, TOOL_RESULT]
    # the store never has it, the outer filter never sees it
    stored = store.get("sys")
    assert "system" not in roles(stored)
    assert len(stored) == 4
    assert all(m["role"] != "system" for batch in outer for m in batch)
    # a second turn still does not store or duplicate it
    kernel.invoke([user("again")], Context(conversation_id="sys"), system_prompt="Be brief.")
    assert [m["role"] for m in model.calls[-1][0]].count("system") == 1
    assert "system" not in roles(store.get("sys"))


def test_system_prompt_in_full_mode_not_seen_by_filters() -> None:
    trace: list[str] = []
    outer: list[list[Msg]] = []

    def record(request: ChatRequest, next_: Any) -> tuple[ChatResponse, Context]:
        outer.append(list(request.messages))
        return next_(request)

    model = tracing_model(trace)
    kernel = Kernel(model, filters=[Filter("rec", around_chat=record)])
    kernel.chat([user("hi")], system_prompt="Sys.")
    assert model.calls[0][0] == [{"role": "system", "content": "Sys."}, user("hi")]
    assert outer == [[user("hi")]]
    # an empty system prompt adds nothing
    kernel.chat([user("hi")], system_prompt="")
    assert model.calls[1][0] == [user("hi")]


def endless_tool_calls() -> ScriptedModel:
    counter = iter(range(1000))
    return ScriptedModel(
        lambda messages, tools: {"tool_calls": [add_call(f"c{next(counter)}")]}, record=True
    )


def test_max_tool_iterations_raises() -> None:
    model = endless_tool_calls()
    kernel = Kernel(model, tools=[add], max_tool_iterations=3)
    with pytest.raises(MaxToolIterations) as info:
        kernel.invoke([user("loop")])
    assert isinstance(info.value, KernelError)
    assert info.value.limit == 3
    assert info.value.calls == 3
    assert len(model.calls) == 3


def test_max_tool_iterations_in_delta_mode_clears_ephemeral(store: MemoryStoreHandle) -> None:
    model = endless_tool_calls()
    kernel = Kernel(model, filters=[memory_filter(store)], tools=[add], max_tool_iterations=2)
    with pytest.raises(MaxToolIterations):
        kernel.invoke([user("loop")])
    assert len(model.calls) == 2
    assert store.conversations() == []


def test_max_tool_iterations_one_allows_a_plain_answer() -> None:
    response, _ = Kernel(ScriptedModel(["fine"], record=True), max_tool_iterations=1).invoke(
        [user("a")]
    )
    assert response.content == "fine"


def test_unknown_tool_error_goes_back_to_the_model() -> None:
    def answer(messages: list[Msg], tools: Any) -> Any:
        if messages[-1]["role"] == "tool":
            return "recovered"
        return {"tool_calls": [tool_call("c1", "nope", "{}")]}

    model = ScriptedModel(answer, record=True)
    response, _ = Kernel(model, tools=[add]).invoke([user("call nope")])
    assert response.content == "recovered"
    result = model.calls[1][0][-1]
    assert result["role"] == "tool"
    assert result["tool_call_id"] == "c1"
    assert result["name"] == "nope"
    error = json.loads(result["content"])["error"]
    assert error["type"] == "tool_not_found"
    assert "nope" in error["message"]


def test_raising_tool_error_goes_back_to_the_model(store: MemoryStoreHandle) -> None:
    def divide(a: int, b: int) -> float:
        """Divide."""
        return a / b

    def answer(messages: list[Msg], tools: Any) -> Any:
        if messages[-1]["role"] == "tool":
            return "handled"
        return {"tool_calls": [tool_call("d1", "divide", '{"a": 1, "b": 0}')]}

    kernel = Kernel(
        ScriptedModel(answer, record=True), filters=[memory_filter(store)], tools=[divide]
    )
    response, _ = kernel.invoke([user("1/0")], Context(conversation_id="div"))
    assert response.content == "handled"
    stored_result = store.get("div")[2]
    assert stored_result["name"] == "divide"
    assert json.loads(stored_result["content"])["error"]["type"] == "tool_error"
    assert "ZeroDivisionError" in json.loads(stored_result["content"])["error"]["message"]


def test_several_tool_calls_in_one_round_run_in_order() -> None:
    order: list[int] = []

    def note(n: int) -> int:
        """Note n."""
        order.append(n)
        return n

    def answer(messages: list[Msg], tools: Any) -> Any:
        if messages[-1]["role"] == "tool":
            return "ok"
        return {
            "tool_calls": [
                tool_call("n1", "note", '{"n": 1}'),
                tool_call("n2", "note", '{"n": 2}'),
                tool_call("n3", "note", '{"n": 3}'),
            ]
        }

    model = ScriptedModel(answer, record=True)
    Kernel(model, tools=[note]).invoke([user("go")])
    assert order == [1, 2, 3]
    results = model.calls[1][0][2:]
    assert [(m["tool_call_id"], m["content"]) for m in results] == [
        ("n1", "1"),
        ("n2", "2"),
        ("n3", "3"),
    ]
