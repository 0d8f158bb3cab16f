"""A turn's tool loop: prepare -> model -> store the answer -> run the tools -> store their
results, until the model answers (or a round awaits a human's approval).

Apart from the Agent server (its door, its writer claim, its lifecycle): the loop runs
with the agent's configuration and the turn's writer, and touches no server state.
"""

from __future__ import annotations

from typing import Any

from ..guardrails import PolicyViolation
from ..kernel import Context, MaxToolIterations
from ..llm import ChatResponse
from ._approval import awaiting, decided_result, mark, pending_calls
from ._handle import TurnResult
from ._options import AgentConfig
from ._turn import TurnWriter
from .errors import TurnFailed


def run_rounds(
    config: AgentConfig,
    writer: TurnWriter,
    meta: dict[str, Any],
    history: list[Any],
    added: list[dict[str, Any]],
    healed: list[str],
    first: tuple[list[Any], str | None] | None,
    decided: dict[str, bool] | None,
) -> TurnResult:
    """The tool loop from what the turn has stored (``added``) to its answer, or to a
    round that awaits a human's approval (``decided``: that round's decisions)."""
    conv, kernel, turn_id = config.conv, config.kernel, writer.turn_id
    context = Context(conversation_id=conv, vars={"turn_id": turn_id})  # keys edits
    if first is not None:  # a new turn: its repairs and its user message, nothing else yet
        iterations = calls = 0
    else:
        iterations = sum(1 for m in added if m.get("role") == "assistant")
        calls = sum(1 for m in added if m.get("role") == "tool") - len(healed)
    response: ChatResponse | None = None
    while True:
        last = added[-1]
        if last.get("role") == "assistant" and last.get("tool_calls"):
            point = awaiting(last)
            if point is not None and decided is None:
                if response is None:  # suspended by an earlier attempt: as stored
                    response = ChatResponse(last.get("content"), tuple(last["tool_calls"]))
                pending = pending_calls(last, point[1])
                return TurnResult(
                    None, added, response, iterations, calls, healed, turn_id, pending
                )
            results = []
            for call in last["tool_calls"]:
                config.callbacks.fire("on_tool_call", meta, call)
                result = decided_result(kernel, call, context, decided)
                config.callbacks.fire("on_tool_result", meta, result)
                results.append(result)
            decided = None  # for this round only: a later one waits for its own resume
            calls += len(results)
            store(writer, results, history, added)
            continue
        answered = response is not None and not response.tool_calls  # empty: not stored
        if last.get("role") == "assistant" or answered:
            if response is None:  # finished by an earlier attempt: answer from the store
                response = ChatResponse(content=last.get("content"))
            return TurnResult(response.content, added, response, iterations, calls, healed, turn_id)
        if iterations >= kernel.max_tool_iterations:
            raise TurnFailed(str(MaxToolIterations(kernel.max_tool_iterations, calls)))
        iterations += 1
        # Guardrails are checked before every model call: a refusal mid-turn ends the
        # turn like a failed model call (what it stored is a valid history).
        to_send, system_prompt = first or build(config, history, added)
        first = None
        config.callbacks.fire("on_model_call", meta, to_send)
        response, context = kernel.chat(to_send, context, system_prompt)
        config.callbacks.fire("on_model_result", meta, response)
        if response.content is not None or response.tool_calls:
            message = response.to_message()
            asking = kernel.awaiting_approval(response.tool_calls)
            if asking:  # stored as suspended, in the same write as the calls
                mark(message, turn_id, asking)
            store(writer, [message], history, added)
        config.sending.settle()  # the answer's usage is recorded: its hold goes


def build(
    config: AgentConfig, history: list[Any], stored: list[dict[str, Any]]
) -> tuple[list[Any], str | None]:
    """The next model call's messages and system prompt; a guardrail's refusal says what
    the refused turn leaves stored."""
    try:
        return config.sending.build(history)
    except PolicyViolation as violation:
        violation.stored = list(stored)  # what the refused turn leaves in the store
        raise


def store(
    writer: TurnWriter,
    messages: list[dict[str, Any]],
    history: list[Any],
    added: list[dict[str, Any]],
) -> None:
    """Store a batch of the turn and note it as the history's and the turn's."""
    writer.store(messages)
    history.extend(messages)
    added.extend(messages)
