"""``PostgresStore.start_link(read_only=True)``, what ``otpmem inspect --dsn`` opens: it reads
what a writer stored, creates and migrates nothing, refuses every write with a StoreError
(storing nothing), and its sessions are read-only, so the server refuses a write too."""

from __future__ import annotations

import pytest

from otpmem.messages import Conv
from otpmem.stores import StoreError, StoreUnavailable
from otpmem.stores.postgres import PostgresStore, connected, schema_exists

CONV = Conv("ann", "c1")


def test_a_read_only_store_reads_what_a_writer_stored_and_refuses_every_write(
    postgres_dsn: str, pg_namespace: str
) -> None:
    writer = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace, pool_size=1)
    try:
        writer.add(CONV, [{"role": "user", "content": "hi"}])
    finally:
        writer.stop()
    reader = PostgresStore.start_link(
        postgres_dsn, namespace=pg_namespace, pool_size=1, read_only=True
    )
    try:
        assert reader.conversations() == [CONV]
        assert [m["content"] for m in reader.get(CONV)] == ["hi"]
        document = reader.export(all_users=True)
        for write in (
            lambda: reader.add(CONV, [{"role": "user", "content": "more"}]),
            lambda: reader.import_(document),
            lambda: reader.clear(CONV),
            lambda: reader.forget_user("ann"),
        ):
            with pytest.raises(StoreError, match="read_only=True"):
                write()
        # Past the store's own door, the session itself is read-only.
        with reader.connection() as conn, pytest.raises(Exception, match="read-only"):
            conn.execute(f"DELETE FROM {pg_namespace}.messages")
        assert [m["content"] for m in reader.get(CONV)] == ["hi"]
        assert reader.alive
    finally:
        reader.stop()


def test_a_read_only_store_makes_no_schema_and_migrates_none(
    postgres_dsn: str, pg_namespace: str
) -> None:
    with pytest.raises(StoreUnavailable, match=f"no otpmem schema '{pg_namespace}'"):
        PostgresStore.start_link(postgres_dsn, namespace=pg_namespace, read_only=True)
    assert not schema_exists(postgres_dsn, pg_namespace)

    PostgresStore.start_link(postgres_dsn, namespace=pg_namespace, pool_size=1).stop()
    with connected(postgres_dsn) as conn:
        conn.execute(f"UPDATE {pg_namespace}.schema_version SET version = 3")
    with pytest.raises(StoreUnavailable, match="version 3, made by an older otpmem"):
        PostgresStore.start_link(postgres_dsn, namespace=pg_namespace, read_only=True)
    with connected(postgres_dsn) as conn:
        row = conn.execute(f"SELECT version FROM {pg_namespace}.schema_version").fetchone()
    assert row == (3,)


def test_read_only_must_be_a_bool(postgres_dsn: str, pg_namespace: str) -> None:
    with pytest.raises(TypeError, match="read_only must be a bool, got 'yes'"):
        PostgresStore.start_link(postgres_dsn, namespace=pg_namespace, read_only="yes")  # type: ignore[arg-type]
    assert not schema_exists(postgres_dsn, pg_namespace)
