"""Filters: onion layers around every model call and every tool call.

The first filter in the list is the outermost layer. A filter's hook receives the request
and ``next``; it may change the request, call ``next`` (or not: a short-circuit), and
change what comes back.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from ..llm import ChatResponse
from ..messages import Conv, ConvLike
from ..stores import ChatMemory
from .tools import Tool


@dataclass
class Context:
    """What a kernel invocation carries: the conversation, variables, per-filter state."""

    conversation_id: ConvLike | None = None
    vars: dict[str, Any] = field(default_factory=dict)
    filter_states: dict[str, Any] = field(default_factory=dict)
    ephemeral: bool = False


@dataclass(frozen=True)
class ChatRequest:
    """One model call on its way in: the messages, the context, the call's options."""

    messages: Sequence[Mapping[str, Any]]
    context: Context
    options: Mapping[str, Any] = field(default_factory=dict)

    def with_messages(self, messages: Sequence[Mapping[str, Any]]) -> ChatRequest:
        """The same request with other messages."""
        return replace(self, messages=list(messages))


@dataclass(frozen=True)
class ToolRequest:
    """One tool call on its way in."""

    tool: Tool
    call: Mapping[str, Any]
    arguments: str
    context: Context


ChatNext = Callable[[ChatRequest], tuple[ChatResponse, Context]]
ToolNext = Callable[[ToolRequest], str]


@dataclass(frozen=True)
class Filter:
    """A named layer with an ``around_chat`` hook, an ``around_tool`` hook, or both."""

    name: str
    around_chat: Callable[[ChatRequest, ChatNext], tuple[ChatResponse, Context]] | None = None
    around_tool: Callable[[ToolRequest, ToolNext], str] | None = None
    memory: ChatMemory | None = None  # set by memory_filter: the kernel switches to delta mode
    # Set by filters that must run before anything is stored (guardrails_filter): such a
    # filter goes before any memory filter, and in delta mode the kernel uses the filter
    # this returns instead (it sees the stored conversation plus the new messages).
    before_memory: Callable[[], Filter] | None = None


R = TypeVar("R")
T = TypeVar("T")


def _onion(hooks: list[Callable[[R, Callable[[R], T]], T]], terminal: Callable[[R], T]) -> Any:
    call = terminal
    for hook in reversed(hooks):
        call = _layer(hook, call)
    return call


def _layer(hook: Callable[[R, Callable[[R], T]], T], inner: Callable[[R], T]) -> Callable[[R], T]:
    return lambda request: hook(request, inner)


def run_chat_chain(filters: Sequence[Filter], terminal: ChatNext, request: ChatRequest) -> Any:
    """Run ``request`` through the ``around_chat`` hooks, outermost first, to ``terminal``."""
    hooks = [f.around_chat for f in filters if f.around_chat is not None]
    return _onion(hooks, terminal)(request)


def run_tool_chain(filters: Sequence[Filter], terminal: ToolNext, request: ToolRequest) -> str:
    """Run ``request`` through the ``around_tool`` hooks, outermost first, to ``terminal``."""
    hooks = [f.around_tool for f in filters if f.around_tool is not None]
    result: str = _onion(hooks, terminal)(request)
    return result


def system_prompt_filter(prompts: Sequence[Mapping[str, Any]]) -> Filter:
    """Innermost layer: put the system prompts in front right before the model (never stored)."""
    prompts = list(prompts)

    def around_chat(request: ChatRequest, next_: ChatNext) -> tuple[ChatResponse, Context]:
        return next_(request.with_messages([*prompts, *request.messages]))

    return Filter("system_prompt", around_chat=around_chat)


def memory_filter(store: ChatMemory) -> Filter:
    """Delta mode (put it first): store the messages given, send the whole stored
    conversation instead, store the reply. Without a conversation id it passes through."""

    def around_chat(request: ChatRequest, next_: ChatNext) -> tuple[ChatResponse, Context]:
        conv = request.context.conversation_id
        if conv is None:
            return next_(request)
        store.add(conv, request.messages)
        response, context = next_(request.with_messages(store.get(conv)))
        if response.content is not None or response.tool_calls:
            store.add(conv, [response.to_message()])
        return response, context

    return Filter("memory", around_chat=around_chat, memory=store)


def ephemeral_conversation() -> Conv:
    """A conversation id for one invocation, cleared when it ends."""
    return Conv(None, f"ephemeral-{uuid.uuid4().hex}")
