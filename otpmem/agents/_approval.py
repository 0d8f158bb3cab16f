"""Human approval: a turn suspended on tool calls a human must approve, kept in the store.

The record is the turn's own write. When the model calls a tool that needs approval
(``Tool.needs_approval``), the assistant message with the calls is stored as any model
answer is (its step's key, so a retried turn finds it), with ``metadata.approval``:
``{"turn_id": ..., "pending": [call ids]}``. Nothing else is stored and no call of that
round runs. A turn is suspended while the conversation's newest message is such an
answer whose calls no result answers yet: it survives a kill of the agent and a restart of
the node because it is the stored conversation itself.

``agent.resume(turn_id, approve=...)`` continues it: the round's results are stored as the
turn's next step (approved calls run; refused ones answer ``refusal(name)``), and the tool
loop goes on. Once the results are stored the turn is no longer suspended, so a resume
retried after it is a retry of the turn (it answers from the store; nothing runs twice).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..kernel import Context, Kernel, refusal
from ..memory import MemoryProvider
from ..messages import Conv, short_repr
from ._turn import TurnWriter, check_retry
from .errors import TurnNotSuspended, TurnSuspended

APPROVAL = "approval"
"""The metadata field of a stored answer whose calls wait for a human."""


@dataclass(frozen=True)
class PendingCall:
    """A tool call awaiting a human's decision: its id, tool and arguments (parsed when
    they are a JSON object, else the text the model sent)."""

    id: str
    name: str
    arguments: Any


def mark(message: dict[str, Any], turn_id: str, pending: Sequence[Mapping[str, Any]]) -> None:
    """Record on the answer ``message`` that ``pending`` of its calls await approval."""
    metadata = dict(message.get("metadata") or {})
    metadata[APPROVAL] = {"turn_id": turn_id, "pending": [str(c["id"]) for c in pending]}
    message["metadata"] = metadata


def awaiting(message: Mapping[str, Any]) -> tuple[str, list[str]] | None:
    """The turn id and the call ids an answer's calls await approval for, else None."""
    metadata = message.get("metadata")
    if message.get("role") != "assistant" or not isinstance(metadata, Mapping):
        return None
    record = metadata.get(APPROVAL)
    if not isinstance(record, Mapping):
        return None
    turn_id, pending = record.get("turn_id"), record.get("pending")
    if not isinstance(turn_id, str) or not isinstance(pending, Sequence):
        return None
    return turn_id, [str(call_id) for call_id in pending]


def suspended(history: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]] | None:
    """The turn a conversation's history is suspended on (its id and pending call ids):
    its newest message awaits approval and no result follows it."""
    if not history:
        return None
    return awaiting(history[-1])


def pending_calls(message: Mapping[str, Any], ids: Sequence[str]) -> tuple[PendingCall, ...]:
    """The calls of answer ``message`` named by ``ids``, as the caller sees them."""
    wanted = set(ids)
    found = []
    for call in message.get("tool_calls") or ():
        if call.get("id") not in wanted:
            continue
        function = call.get("function") or {}
        arguments = function.get("arguments", "{}")
        if isinstance(arguments, str):
            try:
                parsed = json.loads(arguments)
            except ValueError:
                parsed = arguments
            arguments = parsed if isinstance(parsed, dict) else arguments
        elif isinstance(arguments, Mapping):
            arguments = dict(arguments)
        found.append(PendingCall(str(call["id"]), str(function.get("name", "")), arguments))
    return tuple(found)


def refuse_new_turn(conv: Conv, history: Sequence[Mapping[str, Any]]) -> None:
    """``TurnSuspended`` if ``history`` is suspended on a turn: a new turn would have to
    answer its calls without the human's decision."""
    point = suspended(history)
    if point is not None:
        turn_id, ids = point
        raise TurnSuspended(conv, turn_id, pending_calls(history[-1], ids))


def refuse_while_suspended(keyed: MemoryProvider | None, conv: Conv) -> None:
    """``TurnSuspended`` if the stored conversation's newest message awaits approval."""
    if keyed is not None:
        refuse_new_turn(conv, keyed.window(conv, 1).tail)


def check_approve(approve: object) -> bool | dict[str, bool]:
    """``approve`` if it is a bool or a dict of call ids to bools; else a TypeError."""
    if type(approve) is bool:
        return approve
    if isinstance(approve, Mapping) and all(
        isinstance(k, str) and type(v) is bool for k, v in approve.items()
    ):
        return dict(approve)
    raise TypeError(
        "approve must be True, False or a dict of call ids to True/False, got "
        f"{short_repr(approve)}"
    )


def decisions(
    approve: bool | dict[str, bool],
    turn_id: str,
    pending: Sequence[str],
    answered: set[str],
) -> dict[str, bool] | None:
    """Each pending call's decision; None when ``approve`` names only calls this turn has
    answered already (a retried resume of an earlier suspension: nothing to apply)."""
    if isinstance(approve, bool):
        return dict.fromkeys(pending, approve)
    unknown = sorted(set(approve) - set(pending))
    if unknown and set(approve) <= answered:
        return None
    if unknown:
        raise TurnNotSuspended(
            f"turn {turn_id!r} has no pending call {', '.join(map(repr, unknown))}: it awaits "
            f"{', '.join(map(repr, pending))}"
        )
    missing = [call_id for call_id in pending if call_id not in approve]
    if missing:
        raise TurnNotSuspended(
            f"approve decides no call {', '.join(map(repr, missing))} of turn {turn_id!r}: "
            "give True/False for all, or a decision for every pending call"
        )
    return {call_id: approve[call_id] for call_id in pending}


def was_suspended(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether any answer of a turn's stored ``messages`` awaited approval."""
    return any(awaiting(m) is not None for m in messages)


def resume_point(
    writer: TurnWriter, approve: bool | dict[str, bool]
) -> tuple[list[dict[str, Any]], list[str], dict[str, bool] | None]:
    """Where a resume of ``writer``'s turn goes on from: what the turn stored, the calls it
    healed, and its pending round's decisions (None: a retried resume, nothing to decide)."""
    turn_id, conv = writer.turn_id, writer.conv
    earlier = writer.earlier()
    if earlier is None:
        raise TurnNotSuspended(f"conversation {conv} holds no turn {turn_id!r} to resume")
    text = next((m.get("content") for m in earlier if m.get("role") == "user"), None)
    healed = check_retry(earlier, str(text), turn_id)
    point = awaiting(earlier[-1])
    if point is not None:
        answered = {str(m.get("tool_call_id")) for m in earlier if m.get("role") == "tool"}
        return earlier, healed, decisions(approve, turn_id, point[1], answered)
    if not was_suspended(earlier):
        raise TurnNotSuspended(
            f"turn {turn_id!r} of conversation {conv} awaits no approval: none of its tool "
            "calls needed one"
        )
    # Its round was decided and stored already: a retried resume goes on as a retried
    # turn does (a finished turn answers from the store, nothing runs again).
    return earlier, healed, None


def decided_result(
    kernel: Kernel, call: Mapping[str, Any], context: Context, decided: dict[str, bool] | None
) -> dict[str, Any]:
    """The tool message of ``call``: run unless the human refused it (the decision kept
    in the message's metadata, for whoever audits the conversation)."""
    call_id = str(call["id"])
    decision = None if decided is None else decided.get(call_id)
    result: dict[str, Any]
    if decision is False:
        name = str((call.get("function") or {}).get("name", ""))
        result = {"role": "tool", "tool_call_id": call_id, "name": name, "content": refusal(name)}
    else:
        result = kernel.run_tool(call, context)
    if decision is not None:
        result["metadata"] = {APPROVAL: {"approved": decision}}
    return result
