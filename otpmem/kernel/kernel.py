"""The kernel: one model call through the filters, and the tool loop around it.

Two modes, as in seed 000, each standing alone ("do not mix the two" with an agent):

- full mode (no memory filter): the kernel accumulates the messages locally across tool
  rounds and sends them all each time;
- delta mode (``memory_filter(store)`` in the filters): each round sends only what is new
  (the user's messages, then the tool results); the filter stores it and sends the whole
  stored conversation. Without a conversation id an ephemeral one is used, and cleared
  when the invocation ends, also on error.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from .. import telemetry
from ..actors import blocking
from ..llm import ChatModel, ChatResponse, Pricing
from ..memory import valid_context
from ..protocols import conforms
from .filters import (
    ChatRequest,
    Context,
    Filter,
    ToolRequest,
    ephemeral_conversation,
    run_chat_chain,
    run_tool_chain,
    system_prompt_filter,
)
from .tools import Tool, tool_error, toolset


class KernelError(RuntimeError):
    """The tool loop could not finish."""


class MaxToolIterations(KernelError):
    """The model kept calling tools past ``max_tool_iterations`` rounds."""

    def __init__(self, limit: int, calls: int) -> None:
        super().__init__(
            f"the model still called tools after {limit} round(s) ({calls} call(s) in all); "
            "raise max_tool_iterations or check the tools' answers"
        )
        self.limit = limit
        self.calls = calls


class ApprovalRequired(KernelError):
    """The model called a tool that needs a human's approval: the kernel alone keeps no turn
    to suspend (an agent does), so its tool loop stops here; ``calls`` are those calls."""

    def __init__(self, calls: Sequence[Mapping[str, Any]]) -> None:
        names = ", ".join(sorted({str(c.get("function", {}).get("name")) for c in calls}))
        super().__init__(
            f"the model called {names}, which needs a human's approval: run it through an "
            "agent (Agent.start_link(..., tools=...)), whose turn waits for agent.resume"
        )
        self.calls = list(calls)


class Kernel:
    """Model, filters and tools, invoked with a tool loop::

    kernel = Kernel(ScriptedModel(["hi"]), filters=[memory_filter(store)], tools=[add])
    response, context = kernel.invoke([{"role": "user", "content": "hello"}],
                                      Context(conversation_id="c1"))
    """

    def __init__(
        self,
        llm: ChatModel,
        filters: Iterable[Filter] = (),
        tools: Iterable[Callable[..., Any] | Tool] = (),
        max_tool_iterations: int = 10,
        *,
        pricing: Pricing | None = None,
    ) -> None:
        if not conforms(llm, ChatModel):
            raise TypeError(f"llm must be a ChatModel (with chat(messages, tools)), got {llm!r}")
        if type(max_tool_iterations) is not int or max_tool_iterations < 1:
            raise ValueError(
                f"max_tool_iterations must be an int >= 1, got {max_tool_iterations!r}"
            )
        self.llm = llm
        self.filters = list(filters)
        for item in self.filters:
            if not isinstance(item, Filter):
                raise TypeError(f"filters are Filter objects, got {item!r}")
        self.tools = toolset(tools)
        # Built once: every model call sends the same tool list.
        self.specs = [t.spec() for t in self.tools.values()] or None
        self.max_tool_iterations = max_tool_iterations
        self.memory = next((f.memory for f in self.filters if f.memory is not None), None)
        self.filters = _placed(self.filters)
        if pricing is not None and not isinstance(pricing, Pricing):
            raise TypeError(f"pricing must be a Pricing, got {pricing!r}")
        self.pricing = pricing
        # The name prices are looked up by: the API's model name, else the model's name.
        model = getattr(llm, "model", None)
        self.model_name = model if isinstance(model, str) else getattr(llm, "name", None)

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        context: Context | None = None,
        system_prompt: str | None = None,
        **options: Any,
    ) -> tuple[ChatResponse, Context]:
        """One model call through the filters (no tool loop)."""
        if not self.filters and not system_prompt:  # nothing around the call: make it
            context = context or Context()
            return self._call_model(messages, options, context), context
        filters = list(self.filters)
        if system_prompt:
            filters.append(system_prompt_filter([{"role": "system", "content": system_prompt}]))

        def terminal(request: ChatRequest) -> tuple[ChatResponse, Context]:
            return (
                self._call_model(request.messages, request.options, request.context),
                request.context,
            )

        request = ChatRequest(list(messages), context or Context(), options)
        response, out = run_chat_chain(filters, terminal, request)
        return response, out

    def _call_model(
        self, messages: Sequence[Mapping[str, Any]], options: Mapping[str, Any], context: Context
    ) -> ChatResponse:
        # The last step before the model, whatever filters and memory built the list.
        sent = valid_context(messages)
        if telemetry.ENABLED:
            return telemetry.model_call(
                lambda: self._model(sent, options),
                self.model_name,
                context.conversation_id,
                context.vars.get("turn_id"),
            )
        return self._model(sent, options)

    def _model(self, sent: list[Any], options: Mapping[str, Any]) -> ChatResponse:
        if getattr(self.llm, "blocks", True):
            # An HTTP call holds its thread for seconds: off the schedulers with it.
            response = blocking(self.llm.chat, sent, self.specs, **options)
        else:
            response = self.llm.chat(sent, self.specs, **options)
        if self.pricing is not None and response.usage is not None:
            priced = self.pricing.priced(self.model_name, response.usage)
            if priced is not None and "cost" in priced and "cost" not in response.usage:
                response = dataclasses.replace(response, usage=priced)
        return response

    def awaiting_approval(self, calls: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The calls of ``calls`` whose tool needs a human's approval before it runs."""
        tools = self.tools
        return [
            call
            for call in calls
            if (found := tools.get(str((call.get("function") or {}).get("name", "")))) is not None
            and found.needs_approval
        ]

    def run_tool(self, call: Mapping[str, Any], context: Context) -> dict[str, Any]:
        """Run one tool call through the ``around_tool`` filters; the tool message."""
        function = call.get("function") or {}
        name = str(function.get("name", ""))
        found = self.tools.get(name)
        if found is None:
            content = tool_error(LookupError(f"no tool named {name!r}"), kind="tool_not_found")
        else:
            arguments = function.get("arguments", "{}")
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)  # a model or script that sent an object
            request = ToolRequest(found, call, arguments, context)
            if telemetry.ENABLED:
                content = telemetry.tool_call(
                    lambda: run_tool_chain(self.filters, _run_tool, request),
                    name,
                    call["id"],
                    context.conversation_id,
                    context.vars.get("turn_id"),
                )
            else:
                content = run_tool_chain(self.filters, _run_tool, request)
        return {"role": "tool", "tool_call_id": call["id"], "name": name, "content": content}

    def invoke(
        self,
        messages: Sequence[Mapping[str, Any]],
        context: Context | None = None,
        system_prompt: str | None = None,
        **options: Any,
    ) -> tuple[ChatResponse, Context]:
        """Call the model, run the tools it asks for, repeat until it answers."""
        context = context or Context()
        if self.memory is not None and context.conversation_id is None:
            context = dataclasses.replace(
                context, conversation_id=ephemeral_conversation(), ephemeral=True
            )
        try:
            return self._loop(list(messages), context, system_prompt, options)
        finally:
            if context.ephemeral and self.memory is not None:
                assert context.conversation_id is not None
                self.memory.clear(context.conversation_id)

    def _loop(
        self,
        messages: list[Mapping[str, Any]],
        context: Context,
        system_prompt: str | None,
        options: dict[str, Any],
    ) -> tuple[ChatResponse, Context]:
        delta = self.memory is not None
        sent: Sequence[Mapping[str, Any]] = messages
        calls = 0
        for _ in range(self.max_tool_iterations):
            response, context = self.chat(sent, context, system_prompt, **options)
            if not response.tool_calls:
                return response, context
            awaiting = self.awaiting_approval(response.tool_calls)
            if awaiting:
                raise ApprovalRequired(awaiting)
            results = [self.run_tool(call, context) for call in response.tool_calls]
            calls += len(results)
            if delta:
                sent = results  # the memory filter stored the assistant turn already
            else:
                messages = [*messages, response.to_message(), *results]
                sent = messages
        raise MaxToolIterations(self.max_tool_iterations, calls)


_CALLING: ContextVar[ToolRequest | None] = ContextVar("otpmem.tool_request", default=None)


def current_tool_request() -> ToolRequest | None:
    """The tool call a tool that runs inline (``blocks=False``) is running for, else None:
    its call id and the invocation's context (an agent's ``vars["turn_id"]``)."""
    return _CALLING.get()


def _run_tool(request: ToolRequest) -> str:
    tool = request.tool
    if tool.blocks:
        return blocking(tool.run, request.arguments)
    token = _CALLING.set(request)
    try:
        return tool.run(request.arguments)
    finally:
        _CALLING.reset(token)


def _placed(filters: list[Filter]) -> list[Filter]:
    """Filters that must run before anything is stored, checked to come before the memory
    filter, and switched to their delta-mode form when one follows them."""
    at = next((i for i, f in enumerate(filters) if f.memory is not None), None)
    if at is None:
        return filters
    for late in filters[at + 1 :]:
        if late.before_memory is not None:
            raise ValueError(
                f"the {late.name} filter must come before memory_filter (after it, the new "
                "messages would be stored before it could refuse them)"
            )
    return [
        f.before_memory() if f.before_memory is not None and i < at else f
        for i, f in enumerate(filters)
    ]
