"""The client side of a RecallIndex: its handle, the checks run in the caller's thread,
and ``ranked_search`` (``store.search``'s contract answered by an index).

Every argument is checked here, before a call is sent, so a bad one raises in the caller;
the server checks every request again at its door (``check_request``), so a raw call with
garbage is refused there and never reaches (or crashes) the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...actors import Handle, split_request
from ...messages import Conv, ConvLike, as_conv, check_user_id, short_repr
from ...stores import Scope, SearchHit
from ...stores.scopes import check_view
from .base import Filter, Hit, check_filter

Owner = str | None
Only = Conv | tuple[Scope, ...] | None
"""What a query is kept to within its tenant: one conversation, the conversations of some
scopes, or none (every conversation of the tenant)."""

SEARCH_MODES = ("ranked", "substring")


def check_scope(user_id: object, conversation: ConvLike | None) -> tuple[Owner, Conv | None]:
    """(the tenant, the one conversation or None); a conversation must be ``user_id``'s."""
    owner = check_user_id(user_id)
    if conversation is None:
        return owner, None
    key = as_conv(conversation)
    if user_id is not None and key.user_id != owner:
        raise ValueError(
            f"conversation {key.conversation_id!r} belongs to {key.user_id!r}, not {owner!r}"
        )
    return key.user_id, key


def check_scopes(
    scope: object, user_id: object, conversation: object
) -> tuple[Owner, tuple[Scope, ...]]:
    """(the tenant, the scopes) of ``get_relevant(scope=...)``: one user's, and the same
    user as ``user_id`` when both are given; never with a ``conversation``."""
    view = check_view(scope, "scope")
    if conversation is not None:
        raise ValueError("give get_relevant a conversation or a scope, not both")
    owner = view[0].user
    if user_id is not None and user_id != owner:
        raise ValueError(
            f"scope {view[0]!r} is not {short_repr(user_id)}'s: no query crosses users"
        )
    return owner, view


def check_query(query: object, limit: object, min_score: object) -> tuple[str, int, float]:
    """``get_relevant``'s query, limit and min_score, checked; ``ValueError`` names the field."""
    if type(query) is not str:
        raise ValueError(f"a query must be a str, got {short_repr(query)}")
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {short_repr(limit)}")
    if isinstance(min_score, bool) or not isinstance(min_score, int | float):
        raise ValueError(f"min_score must be a number in [0, 1], got {short_repr(min_score)}")
    if not 0.0 <= float(min_score) <= 1.0:
        raise ValueError(f"min_score must be in [0, 1] (scores are), got {min_score!r}")
    return query, limit, float(min_score)


REQUESTS: dict[str, tuple[int, ...]] = {
    "relevant": (7,),
    "lexical": (4,),
    "substring": (4,),
    "group": (2,),
    "refresh": (2,),
    "forget": (1,),
    "forget_user": (1,),
    "stats": (0,),
    "flush": (0,),
}
"""What a RecallIndex answers, by the argument counts each takes."""


def check_request(message: object) -> tuple[str, tuple[Any, ...]]:
    """The server's own check of a request (a handle's are well formed already): a raw
    call with garbage gets ``ValueError`` naming what is wrong, and never reaches the
    index. Checks what the handle checked, on what it sends."""
    kind, args = split_request(message, "RecallIndex", REQUESTS)
    if kind in ("relevant", "lexical", "substring", "refresh"):
        owner, only = _tenant(args[0], args[1])
        if kind != "relevant" and type(only) is tuple:
            raise ValueError(f"{kind} is kept to a tenant or a conversation, not to scopes")
        if kind == "refresh":
            return kind, (owner, only)
        if kind != "relevant":
            query, limit = args[2], args[3]
            if type(query) is not str or not query:
                raise ValueError(f"a search query must be a non-empty str, got {short_repr(query)}")
            check_query(query, limit, 0.0)
            return kind, (owner, only, query, limit)
        query, limit, floor = check_query(args[2], args[3], args[4])
        predicate, distinct = args[5], args[6]
        if predicate is not None and not callable(predicate):
            raise ValueError(f"a filter is a predicate or None, got {short_repr(predicate)}")
        if type(distinct) is not bool:
            raise ValueError(f"distinct must be True or False, got {short_repr(distinct)}")
        return kind, (owner, only, query, limit, floor, predicate, distinct)
    if kind == "group":
        position = args[1]
        if type(position) is not int or position < 0:
            raise ValueError(f"position must be an int >= 0, got {short_repr(position)}")
        return kind, (as_conv(args[0]), position)
    if kind == "forget":
        return kind, (as_conv(args[0]),)
    if kind == "forget_user":
        if args[0] is None:
            raise ValueError("forget_user needs a user_id (None would mean every anonymous one)")
        return kind, (check_user_id(args[0]),)
    return kind, args


def _tenant(owner: object, only: object) -> tuple[Owner, Only]:
    # As check_scope resolved them: the tenant, and a conversation that is the tenant's
    # (or, for a query, scopes that are).
    owner = check_user_id(owner)
    if only is None:
        return owner, None
    if type(only) is tuple and only and all(type(s) is Scope for s in only):
        if any(s.user != owner for s in only):
            raise ValueError(f"scopes {only!r} are not all {short_repr(owner)}'s")
        return owner, only
    key = as_conv(only)
    if key.user_id != owner:
        raise ValueError(f"conversation {key} is not {short_repr(owner)}'s: no query crosses users")
    return owner, key


class RecallIndexHandle(Handle):
    """The client face of a RecallIndex: every method is a call with a timeout."""

    __slots__ = ()

    def get_relevant(
        self,
        query: str,
        *,
        user_id: str | None = None,
        conversation: ConvLike | None = None,
        limit: int = 5,
        min_score: float = 0.0,
        filter: Filter | None = None,
        distinct: bool = True,
        scope: Scope | Sequence[Scope] | None = None,
        timeout: float | None = 30.0,
    ) -> list[Hit]:
        """The ``limit`` messages most relevant to ``query`` within one tenant, best first.

        The scope is ``user_id``'s conversations (None: those of no user), or just
        ``conversation``, or the conversations of a ``scope`` (a ``Scope``, or a view of
        several of one user: those that joined any of them; the user's own: all of theirs).
        Scores are fused ranks in (0, 1] (see ``fusion``); ``min_score``
        drops lower ones; ``filter`` keeps roles and metadata fields (``check_filter``).
        With ``distinct`` (the default) messages of the same role and text count once, as
        their best-ranked (newest) copy: ten copies of "thanks!" would tell nothing more
        than one and take the places of ten other messages.
        """
        only: Only
        if scope is None:
            owner, only = check_scope(user_id, conversation)
        else:
            owner, only = check_scopes(scope, user_id, conversation)
        text, limit, floor = check_query(query, limit, min_score)
        predicate = check_filter(filter)
        if type(distinct) is not bool:
            raise ValueError(f"distinct must be True or False, got {short_repr(distinct)}")
        hits: list[Hit] = self.call(
            ("relevant", owner, only, text, limit, floor, predicate, distinct), timeout
        )
        return hits

    def search(
        self,
        query: str,
        user_id: str | None = None,
        conv: ConvLike | None = None,
        limit: int = 20,
        *,
        mode: str = "ranked",
        timeout: float | None = 30.0,
    ) -> list[SearchHit]:
        """``store.search``'s contract as a query of this index (see ``ranked_search``)."""
        return ranked_search(self, query, user_id, conv, limit, mode=mode, timeout=timeout)

    def group(
        self, conversation: ConvLike, position: int, timeout: float | None = 30.0
    ) -> list[tuple[int, dict[str, Any]]]:
        """The span a cut may not split that holds ``position``: the message alone, or its
        whole tool group (the calling assistant message and its results); [] for a tool
        result with no call in front of it."""
        if type(position) is not int or position < 0:
            raise ValueError(f"position must be an int >= 0, got {short_repr(position)}")
        found: list[tuple[int, dict[str, Any]]] = self.call(
            ("group", as_conv(conversation), position), timeout
        )
        return found

    def refresh(
        self,
        user_id: str | None = None,
        conversation: ConvLike | None = None,
        timeout: float | None = 300.0,
    ) -> int:
        """Catch up on one tenant (or conversation) now; return its indexed message count."""
        owner, only = check_scope(user_id, conversation)
        count: int = self.call(("refresh", owner, only), timeout)
        return count

    def forget(self, conversation: ConvLike, timeout: float | None = 30.0) -> None:
        """Drop a conversation from the index now (after clearing it in the store)."""
        self.call(("forget", as_conv(conversation)), timeout)

    def forget_user(self, user_id: str, timeout: float | None = 30.0) -> None:
        """Drop every conversation of ``user_id`` from the index now."""
        if user_id is None:
            raise ValueError("forget_user needs a user_id (None would mean every anonymous one)")
        self.call(("forget_user", check_user_id(user_id)), timeout)

    def flush(self, timeout: float | None = 300.0) -> bool:
        """Write every snapshot chunk still queued now (they are written shortly after each
        query anyway); whether all of it went (True with nothing to keep)."""
        done: bool = self.call(("flush",), timeout)
        return done

    def stats(self, timeout: float | None = 30.0) -> dict[str, Any]:
        """What is indexed: tenants, conversations, live and dead documents."""
        result: dict[str, Any] = self.call(("stats",), timeout)
        return result


def ranked_search(
    index: RecallIndexHandle,
    query: str,
    user_id: str | None = None,
    conv: ConvLike | None = None,
    limit: int = 20,
    *,
    mode: str = "ranked",
    timeout: float | None = 30.0,
) -> list[SearchHit]:
    """``StoreClient.search``'s signature and scope, answered by the index, never a scan.

    ``mode="ranked"``: by BM25, best first (``SearchHit.score`` is the message's BM25
    score, a float; ties go to the newer message). ``mode="substring"``: bx-ai's semantics,
    case-insensitive substring, most occurrences first (``score`` is the count), then
    newest, over the tenant's indexed messages.
    """
    owner, only = check_scope(user_id, conv)
    if not isinstance(query, str) or not query:
        raise ValueError(f"a search query must be a non-empty str, got {short_repr(query)}")
    if type(limit) is not int or limit < 1:
        raise ValueError(f"limit must be an int >= 1, got {short_repr(limit)}")
    if type(mode) is not str or mode not in SEARCH_MODES:
        raise ValueError(f"mode must be one of {SEARCH_MODES}, got {short_repr(mode)}")
    kind = "substring" if mode == "substring" else "lexical"
    hits: list[SearchHit] = index.call((kind, owner, only, query, limit), timeout)
    return hits
