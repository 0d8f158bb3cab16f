"""The guardrails filter: the kernel's policies, checked before every model call.

::

    kernel = Kernel(model, filters=[guardrails_filter([TokenBudget(10_000)], store),
                                    memory_filter(store)])

It must come before ``memory_filter``: there it refuses a call before the new messages are
stored. In delta mode what it checks is what will be sent, the stored conversation plus
the new messages (the system prompt, added innermost, is not among them); a violation
raises ``PolicyViolation`` out of ``invoke`` and the model is not called. The budgets'
share of the call is held in the store (``admit``) until the call returns: after the
memory filter inside it stored the answer, or once it failed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..guardrails import Guardrails, Request, check_policies, check_store
from ..llm import ChatResponse
from .filters import ChatNext, ChatRequest, Context, Filter


def guardrails_filter(policies: Iterable[Any], store: Any) -> Filter:
    """A filter that checks ``policies`` against ``store``'s recorded usage before every
    model call (put it first)."""
    guard = Guardrails(check_policies(policies), check_store(store))

    def full(request: ChatRequest, next_: ChatNext) -> tuple[ChatResponse, Context]:
        asked = _asked(request.messages, request)
        admitted = guard.admit(asked)
        try:
            if admitted.request is not asked:
                request = request.with_messages(admitted.request.messages)
            return next_(request)
        finally:
            admitted.release()

    def delta(request: ChatRequest, next_: ChatNext) -> tuple[ChatResponse, Context]:
        conv = request.context.conversation_id
        if conv is None:
            return full(request, next_)
        asked = _asked([*store.get(conv), *request.messages], request)
        admitted = guard.admit(asked)
        try:
            if admitted.request is not asked:
                raise ValueError(
                    "a guardrail rewrote the messages of a delta-mode kernel, where what is "
                    "sent is what is stored: rewrite them in full mode, or before they are given"
                )
            return next_(request)
        finally:
            admitted.release()

    return Filter(
        "guardrails",
        around_chat=full,
        before_memory=lambda: Filter("guardrails", around_chat=delta),
    )


def _asked(messages: Iterable[Any], request: ChatRequest) -> Request:
    """The guardrails' request of a call: its messages, conversation and ``max_tokens``."""
    asked = Request.of(list(messages), request.context.conversation_id)
    most = _max_tokens(request.options)
    return asked if most is None else Request(asked.messages, asked.conv, metadata=most)


def _max_tokens(options: Mapping[str, Any]) -> dict[str, int] | None:
    for name in ("max_tokens", "max_completion_tokens"):
        value = options.get(name)
        if type(value) is int and value >= 0:
            return {"max_tokens": value}
    return None
