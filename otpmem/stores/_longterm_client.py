"""The long-term half of every store handle: writes as calls, and the servers' checks.

A store's handle mixes ``LongTermClient`` in beside ``StoreClient`` and provides the reads;
its server answers the requests ``parse_longterm`` accepts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..messages import Conv, ConvLike, as_conv, short_repr
from ._fact_plan import KEEP_FACT_HISTORY, as_seconds, check_closes, check_keep
from .longterm import (
    MAX_FACTS_PER_USER,
    Fact,
    Profile,
    Usage,
    check_fact,
    check_fact_key,
    check_limit,
    check_owner,
    check_profile,
    scope_usage,
)
from .scopes import Scope, Who, check_member, owner_key, public_id, tenant_of

LONGTERM_ARITIES: dict[str, tuple[int, ...]] = {
    "save_facts": (7, 8),
    "save_profile": (1,),
    "delete_profile": (1,),
    "request_extraction": (2,),
    "join_scope": (2,),
}
"""The long-term requests every store answers, by the argument counts each takes."""
LONGTERM_KINDS = frozenset(LONGTERM_ARITIES)


class LongTermClient:
    """Facts, profiles and extraction jobs, written through the store's server."""

    __slots__ = ()

    if TYPE_CHECKING:

        def call(self, message: Any, timeout: float | None = 5.0) -> Any: ...

    def save_fact(
        self,
        fact: Fact,
        *,
        max_facts: int = MAX_FACTS_PER_USER,
        evict: bool = False,
        timeout: float | None = 10.0,
    ) -> Fact:
        """Upsert on (user_id, key): a changed value gets the next version and the old one
        goes to ``fact_history``; a new key past ``max_facts`` raises ``FactLimitReached``
        (or, with ``evict``, replaces the least recently updated fact)."""
        fact = check_fact(fact)
        saved = self.save_facts(
            fact.user_id, [fact], max_facts=max_facts, evict=evict, timeout=timeout
        )
        return saved[0]

    def save_facts(
        self,
        user_id: Who,
        facts: Sequence[Fact],
        deletes: Sequence[str] = (),
        *,
        cursor: tuple[ConvLike, int] | None = None,
        max_facts: int = MAX_FACTS_PER_USER,
        evict: bool = False,
        closes: Mapping[str, float | datetime] | None = None,
        cursor_from: int | None = None,
        keep_history: int = KEEP_FACT_HISTORY,
        timeout: float | None = 10.0,
    ) -> list[Fact]:
        """Upsert ``facts``, close the facts of ``closes`` (key -> when they stopped being
        true), delete ``deletes`` and move an extraction ``cursor`` (conv, position), all
        in one write: all of it happens, or none. With ``cursor_from`` the cursor moves
        only from there (compare-and-set): elsewhere, ``CursorMoved`` and nothing saved.
        Each key keeps its newest ``keep_history`` superseded values; older ones go."""
        if cursor_from is not None:
            if cursor is None:
                raise ValueError("cursor_from needs a cursor to move")
            if not (type(cursor) is tuple and len(cursor) == 2):
                raise ValueError(f"a cursor is (conv, position), got {short_repr(cursor)}")
            cursor = (cursor[0], cursor[1], cursor_from)  # type: ignore[assignment]
        request = parse_save_facts(
            (
                user_id,
                list(facts),
                list(deletes),
                cursor,
                max_facts,
                evict,
                dict(closes or {}),
                keep_history,
            )
        )
        saved, _removed = self.call(_wire(request), timeout)
        return list(saved)

    def close_fact(
        self,
        user_id: Who,
        key: str,
        valid_to: float | datetime | None = None,
        timeout: float | None = 10.0,
    ) -> bool:
        """The fact stopped being true at ``valid_to`` (default now): it leaves the current
        facts and stays in the history, answered by ``get_facts(as_of=)`` before then;
        False if there was none."""
        at = as_seconds(valid_to, f"fact {key!r}: valid_to")
        closes = {key: time.time() if at is None else at}
        request = parse_save_facts((user_id, [], [], None, MAX_FACTS_PER_USER, False, closes))
        _saved, removed = self.call(_wire(request), timeout)
        return key in removed

    def delete_fact(self, user_id: Who, key: str, timeout: float | None = 10.0) -> bool:
        """Delete the fact (its history stays); False if there was none."""
        request = parse_save_facts((user_id, [], [key], None, MAX_FACTS_PER_USER, False, {}))
        _saved, removed = self.call(_wire(request), timeout)
        return key in removed

    def save_profile(self, profile: Profile, timeout: float | None = 10.0) -> Profile:
        """Replace the user's profile; return it as stored (with ``updated_at``)."""
        stored: Profile = self.call(("save_profile", check_profile(profile)), timeout)
        return stored

    def delete_profile(self, user_id: Who, timeout: float | None = 10.0) -> bool:
        """Delete the user's profile; False if there was none."""
        deleted: bool = self.call(("delete_profile", public_id(check_owner(user_id))), timeout)
        return deleted

    def request_extraction(self, conv: ConvLike, upto: int, timeout: float | None = 10.0) -> None:
        """Durably ask for the conversation's messages before ``upto`` to be extracted."""
        self.call(("request_extraction", *check_job((conv, upto))), timeout)

    def join_scope(self, scope: Scope, conv: ConvLike, timeout: float | None = 10.0) -> None:
        """Make ``conv`` one of the scope's conversations (idempotent): recall and usage by
        scope then cover it. Only a conversation of the scope's user joins it."""
        parse_join((scope, conv))
        self.call(("join_scope", scope, as_conv(conv)), timeout)

    def scope_usage(self, scope: Scope | str, since: float | None = None) -> Usage:
        """What the scope's conversations recorded (a user id: ``user_usage``); ``since``:
        only what was recorded then or later."""
        return scope_usage(self, scope, since)


def _wire(request: tuple[Any, ...]) -> tuple[Any, ...]:
    """A checked ``save_facts`` as sent: whose facts in the form the server's own check
    takes (an owner key is not a user id: checked again, it would name another)."""
    return ("save_facts", public_id(request[0]), *request[1:])


def parse_save_facts(args: Sequence[Any]) -> tuple[Any, ...]:
    """Check a ``save_facts`` request (the handle's and the server's own check)."""
    user_id, facts, deletes, cursor, max_facts, evict, closes = args[:7]
    keep = check_keep(args[7]) if len(args) > 7 else KEEP_FACT_HISTORY
    user_id = check_owner(user_id)
    if type(facts) not in (list, tuple) or type(deletes) not in (list, tuple):
        raise ValueError("save_facts takes a list of facts and a list of keys to delete")
    checked = [check_fact(f) for f in facts]
    if any(owner_key(f.user_id) != user_id for f in checked):
        raise ValueError(
            f"save_facts for {public_id(user_id)!r} was given another user's (or scope's) fact"
        )
    keys = [check_fact_key(k) for k in deletes]
    if cursor is not None:
        # (conv, position), or (conv, position, where it must be now) on the wire
        if not (type(cursor) is tuple and len(cursor) in (2, 3)):
            raise ValueError(f"a cursor is (conv, position), got {short_repr(cursor)}")
        conv, position = check_job(cursor[:2])
        if conv.user_id != tenant_of(public_id(user_id)):
            raise ValueError(f"the cursor of {conv} is not {public_id(user_id)!r}'s to move")
        expected = cursor[2] if len(cursor) == 3 else None
        if expected is not None and (type(expected) is not int or expected < 0):
            raise ValueError(f"cursor_from is an int >= 0, got {short_repr(expected)}")
        cursor = (conv, position, expected)
    if not isinstance(evict, bool):
        raise ValueError(f"evict must be a bool, got {short_repr(evict)}")
    closed = check_closes(closes)
    for key in closed:
        check_fact_key(key)
    return user_id, checked, keys, cursor, check_limit(max_facts), evict, closed, keep


def check_job(job: tuple[Any, Any]) -> tuple[Conv, int]:
    """(conv, position) with a position that is an int >= 0."""
    conv, position = as_conv(job[0]), job[1]
    if type(position) is not int or position < 0:
        raise ValueError(f"a message position is an int >= 0, got {short_repr(position)}")
    return conv, position


def parse_join(args: Sequence[Any]) -> tuple[str, Conv]:
    """Check a ``join_scope`` request: (the scope's owner key, the conversation)."""
    scope, conv = args[0], as_conv(args[1])
    if type(scope) is not Scope:
        raise ValueError(f"join_scope takes a Scope, got {short_repr(scope)}")
    check_member(scope, conv)
    return owner_key(scope), conv


def parse_longterm(kind: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    """The server's check of a long-term request whose shape ``parse_request`` checked;
    ``ValueError`` names what is wrong."""
    if kind == "save_facts":
        return kind, parse_save_facts(args)
    if kind == "save_profile":
        checked = check_profile(args[0])
        return kind, Profile(checked.user_id, checked.summary, checked.metadata, time.time())
    if kind == "delete_profile":
        return kind, check_owner(args[0])
    if kind == "join_scope":
        return kind, parse_join(args)
    return kind, check_job((args[0], args[1]))
