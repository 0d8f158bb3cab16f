"""How the commands open a store: to read, a snapshot that leaves the directory as it was;
to write, the directory itself, refusing one that holds something else.

Every read goes through ``ReadStore``, which turns whatever a damaged store raises (plyvel,
snappy or msgpack errors, garbage where a key should be) into the one ``StoreCorrupt``
message that names the store's own path, never the snapshot's.

A run of ``otpmem simulate --store postgres`` keeps its conversations in PostgreSQL, not
in its directory: its ``run.json`` names the server (the embedded one under
``DATA/postgres``, or a DSN kept without its password, which libpq then takes from
``PGPASSWORD`` or ``~/.pgpass``) and the run's schema, and the commands read and write
there.

``--dsn`` (and ``--namespace``) names a PostgreSQL store directly, in place of a directory.
A read opens it read-only (``PostgresStore(read_only=True)``: nothing created or migrated,
the server refusing any write), and is refused, with the schemas the server does hold, when
its schema is not there; ``import`` creates it. No message prints the DSN's password.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..messages import Conv, ConvLike
from ..simulate import RunParams, RunRefused
from ..stores import LevelDBStore, LevelDBStoreHandle, SearchHit, StoreError
from ..stores.leveldb import files as store_files
from .errors import CommandError
from .params import DEFAULT_NAMESPACE

if TYPE_CHECKING:
    from ..stores.postgres import PostgresStoreHandle

    StoreHandle = LevelDBStoreHandle | PostgresStoreHandle

LOCK_TIMEOUT = 1.0
T = TypeVar("T")
# What reading a damaged LevelDB raises: plyvel.Error, msgpack's errors (ValueErrors),
# UnicodeDecodeError, and whatever garbage decoded as a key or a count throws.
DAMAGE = (ValueError, TypeError, KeyError, IndexError, AttributeError)


def _damage_types() -> tuple[type[BaseException], ...]:
    import plyvel

    return (plyvel.Error, *DAMAGE)


class ReadStore:
    """The reads the commands make, on a snapshot of the store at ``path``."""

    def __init__(self, handle: StoreHandle, path: Path | None, damage: bool = True) -> None:
        self.handle = handle
        self.path = path
        self._damage = _damage_types() if damage else ()

    def _read(self, read: Callable[[], T]) -> T:
        try:
            return read()
        except StoreError:
            raise
        except self._damage as exc:
            assert self.path is not None  # damage is read only from a directory
            raise store_files.corrupt(self.path, store_files.error_text(exc)) from None

    def conversations(self, user_id: str | None = None) -> list[Conv]:
        """The conversations held: all of them, or one user's."""
        return self._read(lambda: self.handle.conversations(user_id))

    def count(self, conv: Conv) -> int:
        """How many messages ``conv`` holds."""
        return self._read(lambda: self.handle.count(conv))

    def get(self, conv: Conv, last: int | None = None) -> list[dict[str, Any]]:
        """The messages of ``conv``, or its newest ``last``."""
        return self._read(lambda: self.handle.get(conv, last=last))

    def export(self, conv: ConvLike | None, user_id: str | None, all_users: bool) -> dict[str, Any]:
        """The export document of one conversation, one user's, or everything."""
        return self._read(lambda: self.handle.export(conv, user_id=user_id, all_users=all_users))

    def search(
        self, query: str, user_id: str | None, conv: Conv | None, limit: int
    ) -> list[SearchHit]:
        """Hits for ``query`` in one tenant's messages."""
        return self._read(
            lambda: self.handle.search(query, user_id=user_id, conv=conv, limit=limit)
        )

    def owners(self, conversation_id: str) -> list[str]:
        """The users holding a conversation called ``conversation_id`` (for hints)."""
        return sorted(
            c.user_id
            for c in self.conversations()
            if c.conversation_id == conversation_id and c.user_id is not None
        )

    def users(self) -> list[str]:
        """Every user that holds a conversation."""
        return sorted({c.user_id for c in self.conversations() if c.user_id is not None})


def _relabel(exc: StoreError, copy: Path, path: Path) -> StoreError:
    """The same error, naming the store's directory instead of the snapshot's."""
    return type(exc)(str(exc).replace(os.fspath(copy), os.fspath(path)))


def postgres_run(path: Path) -> dict[str, str] | None:
    """The PostgreSQL store of the simulation run in ``path`` (its ``run.json``), or None."""
    try:
        params = RunParams.load(path)
    except (RunRefused, OSError):
        return None  # not a run's directory: whatever it is, the LevelDB path says
    if params is None or params.store.get("kind") != "postgres":
        return None
    return params.store


@contextmanager
def _postgres(
    path: Path, store: dict[str, str], read_only: bool = False
) -> Iterator[PostgresStoreHandle]:
    """The run's PostgresStore, started on its server (the embedded one started for the
    block); a run whose schema is not there yet is refused, not created."""
    from ..simulate import EMBEDDED_NAMESPACE
    from ..stores.postgres import embedded_server, redact, schema_exists, unredacted

    namespace = store.get("namespace") or EMBEDDED_NAMESPACE
    with ExitStack() as stack:
        dsn = store.get("dsn") or ""
        if dsn:
            dsn = unredacted(dsn)
        else:
            where = path / "postgres"
            if not where.is_dir():
                raise CommandError(
                    f"{path} is a run on the embedded PostgreSQL, but {where} is missing"
                )
            dsn = stack.enter_context(embedded_server(where))
        if not schema_exists(dsn, namespace):
            raise CommandError(
                f"the run in {path} has no schema {namespace!r} on {redact(dsn)}: "
                "it stored nothing yet"
            )
        with _started(dsn, namespace, read_only) as handle:
            yield handle


@contextmanager
def _started(dsn: str, namespace: str, read_only: bool) -> Iterator[PostgresStoreHandle]:
    """A PostgresStore on ``dsn`` for the block, stopped after it; every error it raises
    meanwhile said in one line, without the DSN's password."""
    from ..stores.postgres import PostgresStore

    with _unsecret(dsn):
        handle = PostgresStore.start_link(
            dsn, namespace=namespace, pool_size=2, read_only=read_only
        )
        try:
            yield handle
        finally:
            if handle.alive:
                handle.stop()


@contextmanager
def _unsecret(dsn: str) -> Iterator[None]:
    """Errors of the block as CommandErrors that hide the DSN's password; PostgreSQL's own
    (a permission refused, say) said as the server's, not as a traceback."""
    import psycopg

    from ..stores.postgres import redact

    secret = _password(dsn)

    def hidden(text: str) -> str:
        return redact(text.replace(secret, "***") if secret else text)

    try:
        yield
    except (CommandError, StoreError) as exc:
        raise CommandError(hidden(" ".join(str(exc).split()))) from None  # libpq's: 2 lines
    except Exception as exc:
        refusal = _cause(exc, psycopg.Error)  # a store that failed to start says it as cause
        if refusal is None:
            raise
        reason = " ".join(str(refusal).split()) or type(refusal).__name__
        raise CommandError(f"PostgreSQL at {hidden(dsn)} refused: {hidden(reason)}") from None


def _cause(exc: BaseException | None, kind: type[BaseException]) -> BaseException | None:
    """``exc`` or the first of its causes that is a ``kind``."""
    for _ in range(10):  # a chain, not a loop: causes are made by raising
        if isinstance(exc, kind):
            return exc
        if not isinstance(exc, BaseException):
            return None
        exc = exc.__cause__ or getattr(exc, "reason", None)
    return None


def _password(dsn: str) -> str:
    from psycopg.conninfo import conninfo_to_dict

    password = conninfo_to_dict(dsn).get("password")
    return str(password) if password and password != "***" else ""


def where(dsn: str, namespace: str | None) -> str:
    """``schema 'ns' on DSN`` (its password hidden), for messages."""
    from ..stores.postgres import redact

    return f"schema {namespace or DEFAULT_NAMESPACE!r} on {redact(dsn)}"


def _schemas(dsn: str) -> list[str]:
    """The otpmem schemas the server at ``dsn`` holds."""
    from ..stores.postgres import connected

    with connected(dsn) as conn:
        rows = conn.execute(
            "SELECT table_schema FROM information_schema.tables "
            "WHERE table_name = 'schema_version' ORDER BY 1"
        ).fetchall()
    return [row[0] for row in rows]


def _existing_schema(dsn: str, namespace: str) -> None:
    """Refuse, creating nothing, a read of a schema the server does not hold."""
    from ..stores.postgres import schema_exists

    with _unsecret(dsn):
        if schema_exists(dsn, namespace):
            return
        held = _schemas(dsn)
        message = f"there is no otpmem {where(dsn, namespace)}"
        if held:
            shown = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
            message += f"; it holds {shown} (try --namespace {held[0]})"
        else:
            message += "; it holds no otpmem schema (a write, such as otpmem import, makes one)"
        raise CommandError(message)


@contextmanager
def reading(
    path: Path | None, dsn: str | None = None, namespace: str | None = None
) -> Iterator[ReadStore]:
    """Open the store at ``path`` (or on ``dsn``, schema ``namespace``) to read, without
    writing to its directory or its schema."""
    if dsn is not None:
        namespace = namespace or DEFAULT_NAMESPACE
        _existing_schema(dsn, namespace)
        with _started(dsn, namespace, read_only=True) as on_server:
            yield ReadStore(on_server, None, damage=False)
        return
    assert path is not None  # the command line names DATA or --dsn
    store = postgres_run(path)
    if store is not None:
        with _postgres(path, store, read_only=True) as shared:
            yield ReadStore(shared, path, damage=False)
        return
    with store_files.snapshot(path, LOCK_TIMEOUT) as copy:
        try:
            store_files.check_readable(copy)  # every block's checksum: no garbage read back
            handle = LevelDBStore.start_link(copy, create=False, lock_timeout=LOCK_TIMEOUT)
        except StoreError as exc:
            raise _relabel(exc, copy, path) from None
        try:
            yield ReadStore(handle, path)
        except StoreError as exc:
            raise _relabel(exc, copy, path) from None
        finally:
            if handle.alive:  # a store that crashed on damage is already gone
                handle.stop()


@contextmanager
def writing(
    path: Path | None, dsn: str | None = None, namespace: str | None = None
) -> Iterator[StoreHandle]:
    """Open (or create) the store at ``path`` (or on ``dsn``, schema ``namespace``) to
    write. A directory that exists, is not empty and is not a store is refused; a directory
    this call created and that holds no store once the block failed is removed again."""
    if dsn is not None:
        with _started(dsn, namespace or DEFAULT_NAMESPACE, read_only=False) as on_server:
            yield on_server
        return
    assert path is not None  # the command line names DATA or --dsn
    store = postgres_run(path)
    if store is not None:
        with _postgres(path, store) as shared:
            yield shared
        return
    created = _missing_top(path)
    if path.exists():
        if not path.is_dir():
            raise CommandError(f"{path} is a file, not a store's directory")
        if not store_files.is_store(path) and any(path.iterdir()):
            raise CommandError(
                f"{path} is not empty and is not a LevelDB store (it holds "
                f"{store_files.listing(path)}); name a new or empty directory, or a store"
            )
    fresh = not store_files.is_store(path)
    if not fresh:
        store_files.check_readable(path)  # damage is found before anything is appended
    try:
        handle = LevelDBStore.start_link(path, create=True, lock_timeout=LOCK_TIMEOUT)
        try:
            yield handle
        finally:
            if handle.alive:  # a store that crashed on damage is already gone
                handle.stop()
    except BaseException:
        if fresh:
            _remove_created(path, created)
        raise


def _missing_top(path: Path) -> Path | None:
    """The outermost directory of ``path`` that does not exist yet (what a create makes)."""
    top = None
    for candidate in (path, *path.parents):
        if candidate.exists():
            break
        top = candidate
    return top


def _remove_created(path: Path, created: Path | None) -> None:
    # Only what the failed command itself made: a directory it created, or the store files
    # it wrote into an empty directory that was there before.
    if created is not None:
        shutil.rmtree(created, ignore_errors=True)
    elif path.is_dir():
        for entry in path.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


__all__ = ["ReadStore", "reading", "where", "writing"]
