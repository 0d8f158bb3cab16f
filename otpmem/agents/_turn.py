"""A turn's writes, keyed so that a retried turn stores nothing twice.

Every batch a turn stores is keyed ``turn:<turn_id>:<step>`` (step 0: the user message and
any repairs of a crashed turn before it; then each model answer and each round of tool
results). A turn retried with the same ``turn_id`` after ``ServerExited`` or
``CallTimeout`` finds the batches its first attempt stored and continues after them; and
every batch after the first is stored only while the first is still there, so a turn whose
conversation was cleared under it cannot bring the conversation back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..actors import Killed
from ..memory import CANCELLED, BasicMemoryProvider, MemoryProvider
from ..messages import Conv, short_repr
from ..stores import ConversationCleared
from ._writers import writer_key, writers
from .errors import TurnCleared, TurnIdReused

MAX_TURN_ID = 200


def check_turn_id(turn_id: object) -> str | None:
    """``turn_id`` if it is None or a non-empty str of at most 200 characters."""
    if turn_id is None:
        return None
    if not isinstance(turn_id, str) or not turn_id or len(turn_id) > MAX_TURN_ID:
        raise ValueError(
            f"turn_id must be None or a non-empty str of at most {MAX_TURN_ID} characters, "
            f"got {short_repr(turn_id)}"
        )
    return turn_id


class TurnWriter:
    """Stores one turn's batches through the provider, each under its step's key (a
    ``BasicMemoryProvider``'s without keys: it takes none)."""

    __slots__ = ("conv", "keyed", "provider", "step", "turn_id")

    def __init__(
        self,
        provider: BasicMemoryProvider | None,
        keyed: MemoryProvider | None,
        conv: Conv,
        turn_id: str,
    ) -> None:
        self.provider = provider
        self.keyed = keyed  # the provider, when it keeps the exactly-once contract
        self.conv = conv
        self.turn_id = turn_id
        self.step = 0

    def key(self, step: int) -> str:
        """The idempotency key of the turn's batch ``step``."""
        return f"turn:{self.turn_id}:{step}"

    def store(self, messages: list[dict[str, Any]]) -> None:
        """Store the next batch; ``TurnCleared`` if the conversation was cleared meanwhile."""
        provider = self.provider
        if provider is None:
            return
        keyed = self.keyed
        try:
            if keyed is None:
                provider.append(self.conv, messages)
                return
            follows = None if self.step == 0 else self.key(0)
            keyed.append(self.conv, messages, self.key(self.step), follows=follows)
        except Killed:
            # Dead, but the write may still land: the conversation stays this turn's until
            # it has answered, so that nothing reads the conversation without it.
            writers.linger(writer_key(self.conv))
            raise
        except ConversationCleared as exc:
            raise TurnCleared(
                f"conversation {self.conv} was cleared while turn {self.turn_id!r} ran; "
                "the turn's remaining writes were refused"
            ) from exc
        self.step += 1

    def earlier(self) -> list[dict[str, Any]] | None:
        """What an earlier attempt of this turn stored (its messages, oldest first), or
        None if no attempt stored anything; the next step continues after it."""
        provider = self.keyed
        if provider is None:
            return None
        start = provider.key_position(self.conv, self.key(0))
        if start is None:
            return None
        stored = messages_from(provider, self.conv, start)
        last, steps = start, 1
        while (position := provider.key_position(self.conv, self.key(steps))) is not None:
            if position >= start + len(stored):
                # A batch of a killed attempt, still in flight then, landed after the read
                # (its key and its messages land together): read again, to include it.
                stored = messages_from(provider, self.conv, start)
            last, steps = position, steps + 1
        self.step = steps
        # The conversation may go on past this turn: an owner that lost it while this
        # attempt was frozen stored the turns after it. The turn ends with its last batch.
        return stored[: batch_end(stored, last - start, first=steps == 1)]


def messages_from(provider: MemoryProvider, conv: Conv, position: int) -> list[dict[str, Any]]:
    """The stored conversation's messages from ``position`` on, from one read: a count and
    then a ``get(last=...)`` would be shifted by a batch landing between the two."""
    last = provider.count(conv) - position
    while True:
        window = provider.window(conv, last)
        if window.start <= position:
            tail: list[dict[str, Any]] = window.tail[position - window.start :]
            return tail
        last = window.total - position


def batch_end(messages: Sequence[Mapping[str, Any]], begin: int, first: bool) -> int:
    """Where the turn batch stored at ``messages[begin]`` ends: step 0 (``first``) is the
    repairs and the user message; a later step is one model answer, or one round of tool
    results (as many as the answer before it made calls)."""
    if first:
        for index in range(begin, len(messages)):
            if messages[index].get("role") == "user":
                return index + 1
        return len(messages)
    if begin >= len(messages) or messages[begin].get("role") != "tool":
        return min(begin + 1, len(messages))
    calls = (messages[begin - 1].get("tool_calls") or ()) if begin > 0 else ()
    end = begin
    while end < len(messages) and end - begin < len(calls) and messages[end].get("role") == "tool":
        end += 1
    return max(end, begin + 1)


def check_retry(earlier: Sequence[Mapping[str, Any]], text: str, turn_id: str) -> list[str]:
    """Refuse a turn id reused for another message; return the calls the turn healed."""
    for index, message in enumerate(earlier):
        if message.get("role") == "user":
            if message.get("content") != text:
                raise TurnIdReused(
                    f"turn_id {turn_id!r} was used for another message "
                    f"({short_repr(message.get('content'))}), not {short_repr(text)}"
                )
            return [
                str(m.get("tool_call_id"))
                for m in earlier[:index]
                if m.get("role") == "tool" and m.get("content") == CANCELLED
            ]
    raise TurnIdReused(f"turn_id {turn_id!r} names a turn that stored no user message")


def dangling(history: Sequence[Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Tool calls of the last assistant message that no result answers, if only results
    follow it: what a turn that died mid-loop leaves (healed with cancelled results)."""
    for index in range(len(history) - 1, -1, -1):
        message = history[index]
        if message.get("role") == "tool":
            continue
        calls = message.get("tool_calls") or ()
        if message.get("role") != "assistant" or not calls:
            return []
        answered = {m.get("tool_call_id") for m in history[index + 1 :]}
        return [
            (c["id"], str(c.get("function", {}).get("name", "")))
            for c in calls
            if c["id"] not in answered
        ]
    return []
