"""The guardrails filter: the kernel's policies, checked before every model call.

::

    kernel = Kernel(model, filters=[guardrails_filter([TokenBudget(10_000)], store),
                                    memory_filter(store)])

It must come before ``memory_filter``: there it refuses a call before the new messages are
stored. In delta mode what it checks is what will be sent, the stored conversation plus
the new messages (the system prompt, added innermost, is not among them); a violation
raises ``PolicyViolation`` out of ``invoke`` and the model is not called.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..guardrails import Request, check_guardrails, check_policies, check_store
from ..llm import ChatResponse
from .filters import ChatNext, ChatRequest, Context, Filter


def guardrails_filter(policies: Iterable[Any], store: Any) -> Filter:
    """A filter that checks ``policies`` against ``store``'s recorded usage before every
    model call (put it first)."""
    checked = check_policies(policies)
    usage = check_store(store)

    def full(request: ChatRequest, next_: ChatNext) -> tuple[ChatResponse, Context]:
        asked = Request.of(request.messages, request.context.conversation_id)
        passed = check_guardrails(asked, checked, usage)
        if passed is not asked:
            request = request.with_messages(passed.messages)
        return next_(request)

    def delta(request: ChatRequest, next_: ChatNext) -> tuple[ChatResponse, Context]:
        conv = request.context.conversation_id
        if conv is None:
            return full(request, next_)
        asked = Request.of([*store.get(conv), *request.messages], conv)
        if check_guardrails(asked, checked, usage) is not asked:
            raise ValueError(
                "a guardrail rewrote the messages of a delta-mode kernel, where what is sent "
                "is what is stored: rewrite them in full mode, or before they are given"
            )
        return next_(request)

    return Filter(
        "guardrails",
        around_chat=full,
        before_memory=lambda: Filter("guardrails", around_chat=delta),
    )
