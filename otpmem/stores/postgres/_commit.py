"""How PostgresStore commits: adds in groups (fenced or not), each write one transaction,
and what a failed write means to its caller.

``Committing`` is the store's half that talks to PostgreSQL for writes; the store's server
(``PostgresStore``) gives it its pool, its composed writes and its handle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from ...actors import Handle, NoProcess
from ...messages import Conv
from .._base import ConversationCleared, LeaseLost
from .._write_rules import CALLER_ERRORS
from ._leases import Fence
from ._pool import pooled, take, unavailable
from ._writes import Add, FencesLost, Writes, check_appended

T = TypeVar("T")
DEADLOCK_RETRIES = 3
FenceOf = Callable[[Conv], Fence | None]
"""The lease an add to a conversation must hold (None: not fenced)."""
FencedAdd = tuple[Add, Fence | None]


def refused(exc: BaseException) -> ValueError:
    """What PostgreSQL cannot hold, as the caller's error (nothing was stored): a NUL
    character in a user or conversation id, or a fact's key, say."""
    first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ValueError(f"PostgreSQL cannot store this: {first}; nothing was stored")


class Committing:
    """The write side of a PostgresStore's server (a mixin: the server sets the fields)."""

    pool: Any
    writes: Writes
    handle: Handle
    dsn: str
    connect_timeout: float
    _data_error: type[BaseException]
    _rollback: type[BaseException]
    _pool_closed: type[BaseException]
    _psycopg_errors: tuple[type[BaseException], ...]

    def _commit_adds(self, items: Sequence[FencedAdd]) -> list[BaseException | None]:
        """Commit a group of adds in one statement (one alone in the lighter ``append``);
        what each caller hears (None: stored)."""
        outcomes: list[BaseException | None] = [None] * len(items)
        going = [i for i, (add, _) in enumerate(items) if add[1]]  # empty: nothing to store
        if not going:
            return outcomes
        try:
            # Autocommit statements only (each group one), so the connection goes back as
            # it came: taken and given back bare, with no context manager to pay for.
            conn = take(self.pool, self.connect_timeout)
            try:
                self._commit_group(conn.cursor(), items, going, outcomes)
            finally:
                self.pool.putconn(conn)
        except BaseException as exc:
            mapped = self._as_caller_error(exc, self.handle)
            if mapped is exc:
                raise
            raise mapped from exc
        return outcomes

    def _commit_group(
        self,
        cur: Any,
        items: Sequence[FencedAdd],
        going: list[int],
        outcomes: list[BaseException | None],
    ) -> None:
        """Commit ``items[going]``, writing what each caller hears into ``outcomes``: the
        ones that lost their lease are refused and the rest go again; one PostgreSQL
        cannot hold spoils its group, which then goes add by add."""
        while going:
            adds = [items[i][0] for i in going]
            fences = [items[i][1] for i in going]
            try:
                if len(going) == 1 and fences[0] is None:
                    self._deadlock_retried(self.writes.append, cur, *adds[0])  # one statement
                    answers = [1]
                else:
                    answers = self._deadlock_retried(self.writes.append_group, cur, adds, fences)
            except FencesLost as exc:
                lost = {going[j] for j in exc.positions}
                for i in lost:
                    outcomes[i] = _lease_lost(items[i])
                going = [i for i in going if i not in lost]
                continue
            except (ConversationCleared, self._data_error) as exc:
                if len(going) == 1:
                    outcomes[going[0]] = self._as_caller_error(exc, self.handle)
                    return
                for i in going:
                    self._commit_group(cur, items, [i], outcomes)
                return
            for i, answer in zip(going, answers, strict=True):
                outcomes[i] = _appended(answer, items[i][0])
            return

    def _deadlock_retried(self, work: Callable[..., T], *args: Any) -> T:
        """``work(*args)``, again if PostgreSQL broke a deadlock by rolling it back."""
        for _ in range(DEADLOCK_RETRIES):
            try:
                return work(*args)
            except self._rollback:
                continue
        return work(*args)

    @contextmanager
    def _cursor(self) -> Iterator[tuple[Any, Any]]:
        with pooled(self.pool, self.connect_timeout) as conn, conn.cursor() as cur:
            yield conn, cur

    def _in_transaction(self, conn: Any, work: Callable[[], Any]) -> Any:
        """``work()`` in one transaction; a deadlock PostgreSQL broke is retried."""

        def transaction() -> Any:
            with conn.transaction():
                return work()

        return self._deadlock_retried(transaction)

    @contextmanager
    def _caller_errors(self, owner: object) -> Iterator[None]:
        """Raise what a failed write means to its caller (see ``_as_caller_error``)."""
        try:
            yield
        except BaseException as exc:
            mapped = self._as_caller_error(exc, owner)
            if mapped is exc:
                raise
            raise mapped from exc

    def _as_caller_error(self, exc: BaseException, owner: object) -> BaseException:
        """What a failed write means to its caller."""
        if isinstance(exc, CALLER_ERRORS):
            return exc
        if isinstance(exc, self._data_error):
            return refused(exc)
        if isinstance(exc, self._pool_closed):
            return NoProcess(owner)
        if isinstance(exc, self._psycopg_errors):
            # The store carries on: the pool reconnects, and the caller's retry (keyed, to
            # be stored once) succeeds once the server is back. Nothing was acknowledged.
            return unavailable(exc, self.dsn, self.connect_timeout, "a write")
        return exc


def _appended(answer: int, add: Add) -> BaseException | None:
    """What the caller of an add in a group hears, from ``append``'s answer."""
    conv, _, _, follows = add
    try:
        check_appended(answer, conv, follows)
    except ConversationCleared as exc:
        return exc
    return None


def _lease_lost(item: FencedAdd) -> LeaseLost:
    (conv, _, _, _), fence = item
    assert fence is not None
    return LeaseLost(
        f"the lease {fence.name!r} is no longer {fence.owner}'s (epoch {fence.epoch}): "
        f"another owner took it over, so nothing was added to {conv}"
    )


__all__ = [
    "Committing",
    "FenceOf",
    "FencedAdd",
    "refused",
]
