"""MemoryStore's scope records: the encoded owners each user has, and who joined a scope.

    ("scopes", user)   ->  frozenset of owner keys: the user's scopes that hold anything
    ("members", owner) ->  (list of Conv in the order they joined, n, set of them)

A write to an encoded owner (a fact, a profile, a block, a join) lists it under its user in
the same ``Table.update``, so ``forget_user`` finds every record of the user's scopes
without a scan of the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...messages import Conv
from ..scopes import Scope, is_encoded, owner_key, registered_user, sorted_scopes
from . import _blocks
from . import _longterm as lt

OWNER_KINDS = ("facts", "stamp", "history", "profile", "members")
"""The long-term records of an owner key (its blocks are under ``_blocks.key``)."""


def listed(mapping: Mapping[Any, Any], owner: str) -> dict[Any, Any]:
    """The put that lists an encoded owner under its user ({} when it is, or is plain)."""
    if not is_encoded(owner):
        return {}
    record = lt.key("scopes", registered_user(owner))
    owners: frozenset[str] = mapping.get(record, frozenset())
    return {} if owner in owners else {record: owners | {owner}}


Members = tuple[list[Conv], int, set[Conv]]
"""A scope's members as the user index keeps conversations: an append-only list readers
never read past n of, and a set only the writer (under the store's write lock) asks, so a
join costs O(1) however many conversations a run or a team has."""


def join_puts(mapping: Mapping[Any, Any], owner: str, conv: Conv) -> dict[Any, Any]:
    """What ``conv`` joining the scope keyed ``owner`` writes ({} when it has joined)."""
    members: Members | None = mapping.get(lt.key("members", owner))
    if members is None:
        return {**listed(mapping, owner), lt.key("members", owner): ([conv], 1, {conv})}
    convs, n, seen = members
    if conv in seen:
        return {}
    del convs[n:]  # readers never look past n
    convs.append(conv)
    seen.add(conv)
    return {lt.key("members", owner): (convs, n + 1, seen)}


def forget_records(mapping: Mapping[Any, Any], user_id: str) -> list[Any]:
    """Every record of the user's encoded scopes, and their list."""
    record = lt.key("scopes", user_id)
    owners: frozenset[str] = mapping.get(record, frozenset())
    gone: list[Any] = [record]
    for owner in owners:
        gone += [lt.key(kind, owner) for kind in OWNER_KINDS]
        gone.append(_blocks.key(owner))
    return gone


class ScopeReads:
    """The scope reads of a MemoryStore handle, straight from the table."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _mapping(self) -> Mapping[Any, Any]: ...

        def conversations(self, user_id: str | None = None) -> list[Conv]: ...

    def scope_conversations(self, scope: Scope) -> list[Conv]:
        """The conversations that joined the scope, by id (a user's scope: all of theirs)."""
        if type(scope) is not Scope:
            raise ValueError(f"scope_conversations takes a Scope, got {scope!r}")
        if scope.is_user:
            return sorted(self.conversations(scope.user))
        members: Members | None = self._mapping().get(lt.key("members", owner_key(scope)))
        return [] if members is None else sorted(members[0][: members[1]])

    def scopes(self, user_id: str | None) -> list[Scope]:
        """The user's scopes beyond their own that hold anything, in key order."""
        if user_id is not None:
            owner_key(user_id)
        owners: frozenset[str] = self._mapping().get(lt.key("scopes", user_id), frozenset())
        return sorted_scopes(owners)
