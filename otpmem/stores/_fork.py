"""What every store's fork shares, written once: the checks at the door, the rule for a
retry and for a target that holds something, and the pinned index of a copied prefix.

A fork copies the first ``at`` messages of a conversation into a new conversation of the
same user, as one write of the store's writer. The copy is stored as if it were added as
one batch (the pinned index, the newest summary and the counters follow the store's add
rules), with two differences an add does not have:

- it records **no usage**: the spend in the copied messages' ``metadata.usage`` was the
  source's, and stays counted once, in the source's and the user's sums; the fork's own
  usage starts at zero and counts only what is added to it afterwards;
- its ``idempotency_key`` also remembers how many messages the fork copied, so a retry
  returns what the first call did (after a restart of the store too), and never forks
  twice. A key held by the target from an ordinary add is no fork: ``ConversationExists``.

The target keeps nothing else of the source: no extraction cursor (fact extraction may
read the copied messages again), no scope memberships, no idempotency keys of the source's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages import Conv, ConvLike, as_conv, is_pinned, is_summary, short_repr
from ._base import ConversationExists, check_key

CheckedFork = tuple[Conv, Conv, int | None, str | None]
"""A fork, validated: the source, the target, how many messages (None: all), its key."""


def check_at(at: object) -> int | None:
    """Return ``at`` if it is None or an int >= 0, else raise ``ValueError``."""
    if at is None:
        return None
    if type(at) is not int or at < 0:
        raise ValueError(f"at must be None or an int >= 0, got {short_repr(at)}")
    return at


def check_fork(conv: ConvLike, into: ConvLike, at: object, idempotency_key: object) -> CheckedFork:
    """A fork's arguments, checked; ``ValueError`` (or ``TypeError``) names what is wrong."""
    source, target = as_conv(conv), as_conv(into)
    if source.user_id != target.user_id:
        raise ValueError(
            f"a fork stays with its user: the source is {name(source)}, the target "
            f"{name(target)}; fork into a conversation of {_whose(source)}"
        )
    if source == target:
        raise ValueError(f"a fork needs a new conversation: {name(target)} is the source")
    return source, target, check_at(at), check_key(idempotency_key)


def _whose(conv: Conv) -> str:
    return "no user" if conv.user_id is None else f"user {conv.user_id!r}"


def name(conv: Conv) -> str:
    """``'c1' of user 'ann'``: a conversation as an error names it."""
    return f"{conv.conversation_id!r} of {_whose(conv)}"


def prefix_length(count: int, at: int | None) -> int:
    """How many messages a fork at ``at`` copies of a conversation of ``count``."""
    return count if at is None else min(at, count)


def bounds(count: int, last: int | None, as_of: int | None) -> tuple[int, int]:
    """The positions ``[start, stop)`` that ``get(last=, as_of=)`` reads of ``count``."""
    stop = count if as_of is None else min(as_of, count)
    return (0 if last is None else max(0, stop - last)), stop


def target_holds(into: Conv, count: int) -> ConversationExists:
    """The error of a fork into a conversation that holds ``count`` messages."""
    return ConversationExists(
        f"cannot fork into {name(into)}: it holds {count} message{'s' if count != 1 else ''} "
        "already; nothing was written (fork into a new conversation, or clear it first)"
    )


def not_a_fork(into: Conv, key: str) -> ConversationExists:
    """The error of a fork whose key the target holds from an add, not from a fork."""
    return ConversationExists(
        f"cannot fork into {name(into)}: it holds the batch keyed {key!r} from an add, not a "
        "fork; nothing was written"
    )


def pinned_positions(messages: Sequence[Any]) -> tuple[list[int], int, int]:
    """The pinned index of ``messages`` added as one batch: the positions pinned (a later
    summary supersedes an earlier one), how many are pinned (superseded summaries too),
    and the newest summary's position (-1: none)."""
    pins: list[int] = []
    pinned_count = 0
    summary = -1
    for position, message in enumerate(messages):
        if not is_pinned(message):
            continue
        pinned_count += 1
        if is_summary(message):
            if summary >= 0:
                pins.remove(summary)
            summary = position
        pins.append(position)
    return pins, pinned_count, summary


__all__ = [
    "CheckedFork",
    "bounds",
    "check_at",
    "check_fork",
    "name",
    "not_a_fork",
    "pinned_positions",
    "prefix_length",
    "target_holds",
]
