"""LevelDBStore's scope records: the encoded owners each user has, and who joined a scope.

    o <user> <owner>                  ->  b"": a scope of the user's that holds anything
    g <owner> <user> <conversation>   ->  b"": a conversation that joined the scope

``<user>`` is the raw user id (``00``: none), ``<owner>`` an owner key (``scopes.owner_key``),
each encoded as ``keys.user_prefix`` encodes a user: length-prefixed, so a user's scopes are
one range scan, and a scope's members another. A write to an encoded owner (its facts, its
profile, a block edit, a join) puts its ``o`` key in the same WriteBatch, so
``forget_user`` finds every record of the user's scopes without a scan of the database.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import msgpack

from ...messages import Conv
from ..scopes import MARK, Scope, is_encoded, owner_key, registered_user, sorted_scopes
from . import _blocks, keys
from . import _longterm as lt
from ._committer import Op

REGISTRY = b"o"
MEMBER = b"g"
OWNER_KINDS = (*lt.OWNER_KINDS, _blocks.BLOCK, MEMBER)
"""Every kind of record keyed by an owner key: what goes when its user is forgotten."""


def _owner_part(owner: str) -> bytes:
    return keys.user_prefix(b"", owner)


def listed(owner: str) -> list[Op]:
    """The put that lists an encoded owner under its user (none for a plain user id)."""
    if not is_encoded(owner):
        return []
    return [(keys.user_prefix(REGISTRY, registered_user(owner)) + _owner_part(owner), b"")]


def member_key(owner: str, conv: Conv) -> bytes:
    """Where ``conv``'s membership of the scope keyed ``owner`` is kept."""
    return keys.user_prefix(MEMBER, owner) + keys.conv_prefix(b"", conv)


def join_ops(db: Any, owner: str, conv: Conv) -> list[Op]:
    """What ``conv`` joining the scope keyed ``owner`` writes (nothing when it has joined:
    read from ``db`` with every earlier write on disk, as the server flushes first)."""
    entry = member_key(owner, conv)
    if db.get(entry) is not None:
        return []
    return [(entry, b""), *listed(owner)]


def registered(db: Any, user_id: str | None) -> list[str]:
    """The owner keys listed under ``user_id`` (one range scan)."""
    prefix = keys.user_prefix(REGISTRY, user_id)
    found = []
    for key in db.iterator(prefix=prefix, include_value=False):
        owner = keys.decode_part(key, len(prefix))
        assert owner is not None  # an owner key is a non-empty str
        found.append(owner)
    return found


def forget_prefixes(db: Any, user_id: str) -> list[bytes]:
    """Every owner-keyed prefix ``forget_user(user_id)`` deletes: the user's own records
    (under its owner key, which is not the raw id when that begins with ``scopes.MARK``),
    those of every scope listed under the user, and the list."""
    owners = dict.fromkeys([owner_key(user_id), *registered(db, user_id)])
    prefixes = [keys.user_prefix(REGISTRY, user_id)]
    for owner in owners:
        prefixes += [keys.user_prefix(kind, owner) for kind in OWNER_KINDS]
    return prefixes


def rekey_ops(db: Any) -> list[Op]:
    """The ops that bring a layout-3 directory's records of user ids that begin with
    ``scopes.MARK`` (kept under the raw id then; their owner key is encoded now, and the
    raw id may be another scope's key) to their owner keys, listed under their users.
    Found by a few seeks per kind (``keys.keys_of_users_beginning``): none to move is
    the common case, and costs no scan."""
    # Every delete before every put: one raw id may be the owner key another moves to.
    deletes: list[Op] = []
    puts: list[Op] = []
    owners: set[str] = set()
    for kind in OWNER_KINDS:
        for key, value in list(keys.keys_of_users_beginning(db, kind, MARK)):
            user = keys.decode_part(key, len(kind))
            assert user is not None
            owner = owner_key(user)
            rest = key[len(keys.user_prefix(kind, user)) :]
            if kind in (lt.FACT, lt.HISTORY):  # a fact names whose it is: its owner key now
                record = msgpack.unpackb(value)
                record[0] = owner
                value = msgpack.packb(record)
            deletes.append((key, None))
            puts.append((keys.user_prefix(kind, owner) + rest, value))
            owners.add(owner)
    for owner in sorted(owners):
        puts += listed(owner)
    return deletes + puts


class LevelDBScopeReads:
    """The scope reads of a LevelDB store handle, on the caller's thread."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _db(self) -> AbstractContextManager[Any]: ...

        def conversations(self, user_id: str | None = None) -> list[Conv]: ...

    def scope_conversations(self, scope: Scope) -> list[Conv]:
        """The conversations that joined the scope, by id (a user's scope: all of theirs)."""
        if type(scope) is not Scope:
            raise ValueError(f"scope_conversations takes a Scope, got {scope!r}")
        if scope.is_user:
            return sorted(self.conversations(scope.user))
        prefix = keys.user_prefix(MEMBER, owner_key(scope))
        with self._db() as db:
            found = [
                keys.decode_conv(k, len(prefix))
                for k in db.iterator(prefix=prefix, include_value=False)
            ]
        return sorted(found)  # key order is by length first

    def scopes(self, user_id: str | None) -> list[Scope]:
        """The user's scopes beyond their own that hold anything, in key order."""
        if user_id is not None:
            owner_key(user_id)
        with self._db() as db:
            return sorted_scopes(registered(db, user_id))
