"""The store commands on a PostgreSQL schema named by ``--dsn`` / ``--namespace``, as a user
runs them: ``inspect``, ``export`` and ``search`` read what they read from a LevelDB
directory (the same listing, document and hits), never write (a role that may only SELECT
runs them; an older schema is not migrated), ``import`` stores each conversation of a
document once however often and however concurrently it runs, and every wrong flag, bad DSN,
missing schema or unreachable server is one line that never shows the DSN's password."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from otpmem.messages import Conv
from otpmem.stores import MemoryStore
from otpmem.stores.postgres import PostgresStore, connected, schema_exists
from tests.cli_support import (
    CONVERSATIONS,
    Result,
    fails_with,
    make_store,
    no_traceback,
    otpmem,
    tree_state,
)

SECRET = "s3cret-pw"


def with_password(dsn: str, password: str = SECRET) -> str:
    """``dsn`` with a password (the test server trusts local users: any password gets in)."""
    parts = urlsplit(dsn)
    return dsn.replace(f"//{parts.username}:@", f"//{parts.username}:{password}@", 1)


def ok(result: Result) -> Result:
    """A command that succeeded, printing no traceback and never the password."""
    no_traceback(result)
    assert result.returncode == 0, str(result)
    assert SECRET not in result.stdout + result.stderr, str(result)
    return result


@pytest.fixture
def dsn(postgres_dsn: str) -> str:
    """The test server's DSN, with a password in it (never to be printed back)."""
    given = with_password(postgres_dsn)
    assert SECRET in given
    return given


@pytest.fixture
def pg_store(postgres_dsn: str, pg_namespace: str) -> str:
    """A schema holding CONVERSATIONS (its store stopped again); its name."""
    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace, pool_size=2)
    try:
        for conv, messages in CONVERSATIONS.items():
            store.add(conv, messages)
    finally:
        store.stop()
    return pg_namespace


@pytest.fixture
def dropped_schemas(postgres_dsn: str) -> Iterator[list[str]]:
    """Schemas a test makes beyond pg_namespace, dropped at its end."""
    made: list[str] = []
    yield made
    with connected(postgres_dsn) as conn:
        for name in made:
            conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


def listed(stdout: str) -> dict[tuple[str, str], int]:
    """``inspect``'s listing: (user, conversation) -> message count."""
    rows = [line.split("\t") for line in stdout.splitlines()[:-1]]
    return {(row[0], row[1]): int(row[2].split()[0]) for row in rows}


def schema_state(dsn: str, namespace: str) -> list[object]:
    """Every row of the schema's tables and the row versions of its functions and tables:
    what any write, even a CREATE OR REPLACE that changes nothing, would change."""
    with connected(dsn) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (namespace,)
            ).fetchall()
        ]
        state: list[object] = [
            conn.execute(
                "SELECT array_agg(p.proname || ':' || p.xmin::text ORDER BY p.proname) "
                "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = %s",
                (namespace,),
            ).fetchone(),
            conn.execute(
                "SELECT array_agg(c.relname || ':' || c.xmin::text ORDER BY c.relname) "
                "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s",
                (namespace,),
            ).fetchone(),
        ]
        for table in tables:
            state.append(
                (
                    table,
                    conn.execute(
                        f"SELECT t::text FROM {namespace}.{table} t ORDER BY 1"
                    ).fetchall(),
                )
            )
    return state


def exported_by_memory_store() -> dict[str, Any]:
    """The export document of CONVERSATIONS, as a MemoryStore writes it."""
    store = MemoryStore.start_link()
    try:
        for conv, messages in CONVERSATIONS.items():
            store.add(conv, messages)
        return store.export(all_users=True)
    finally:
        store.stop()


def by_conversation(document: dict[str, Any]) -> dict[str, Any]:
    """An export document with its conversations in one order (each store has its own)."""
    return {**document, "conversations": sorted(document["conversations"], key=repr)}


def test_inspect_export_and_search_read_a_schema_as_they_read_a_directory(
    tmp_path: Path, dsn: str, pg_store: str
) -> None:
    on_pg = ("--dsn", dsn, "--namespace", pg_store)

    listing = ok(otpmem("inspect", *on_pg))
    assert listed(listing.stdout) == {
        (c.user_id or "-", c.conversation_id): len(m) for c, m in CONVERSATIONS.items()
    }
    assert listing.stdout.splitlines()[-1] == "4 conversations"
    # CONV where DATA was, the options before or after it, --opt=value: as users type them.
    for args in (
        ("inspect", "c1", "--last", "2", *on_pg, "--user", "alice"),
        ("inspect", f"--dsn={dsn}", f"--namespace={pg_store}", "--user=alice", "c1", "--last=2"),
    ):
        shown = ok(otpmem(*args))
        assert [json.loads(line) for line in shown.stdout.splitlines()] == (
            CONVERSATIONS[Conv("alice", "c1")][-2:]
        )
    exported = json.loads(ok(otpmem("export", *on_pg, "--all")).stdout)
    assert by_conversation(exported) == by_conversation(exported_by_memory_store())
    found = ok(otpmem("search", "weather", *on_pg, "--user", "alice", "--limit", "3"))
    leveldb = make_store(tmp_path / "store")
    by_dir = ok(otpmem("search", leveldb, "weather", "--user", "alice", "--limit", "3"))
    assert found.stdout == by_dir.stdout
    assert found.stdout.splitlines()[-1] == "3 hits"


def test_reads_write_nothing_and_need_no_more_than_select(postgres_dsn: str, pg_store: str) -> None:
    role = f"reader_{uuid.uuid4().hex[:8]}"
    with connected(postgres_dsn) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {pg_store} TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {pg_store} TO {role}")
    reader = postgres_dsn.replace(f"//{urlsplit(postgres_dsn).username}:", f"//{role}:", 1)
    before = schema_state(postgres_dsn, pg_store)
    try:
        on_pg = ("--dsn", reader, "--namespace", pg_store)
        assert len(listed(ok(otpmem("inspect", *on_pg)).stdout)) == len(CONVERSATIONS)
        ok(otpmem("export", *on_pg, "--user", "alice"))
        assert "bob's secret" in ok(otpmem("search", *on_pg, "secret", "--user", "bob")).stdout
        # A write is the server's to refuse this role: it says so, on one line.
        fails_with(otpmem("import", *on_pg, "-", stdin=json.dumps(export_of("x"))), 2, "refused")
        after = schema_state(postgres_dsn, pg_store)
    finally:
        with connected(postgres_dsn) as conn:
            conn.execute(f"DROP OWNED BY {role}")
            conn.execute(f"DROP ROLE {role}")
    assert after == before


def test_a_read_does_not_migrate_an_older_schema(
    postgres_dsn: str, dsn: str, pg_store: str
) -> None:
    with connected(postgres_dsn) as conn:
        conn.execute(f"UPDATE {pg_store}.schema_version SET version = 3")
    before = schema_state(postgres_dsn, pg_store)

    fails_with(otpmem("inspect", "--dsn", dsn, "--namespace", pg_store), 2, "version 3", "older")

    assert schema_state(postgres_dsn, pg_store) == before


def export_of(conversation_id: str, n: int = 3) -> dict[str, object]:
    """An export document of one conversation of ``n`` messages, and one of no user."""
    return {
        "format": "otpmem.export",
        "version": 1,
        "conversations": [
            {
                "user_id": "ann",
                "conversation_id": conversation_id,
                "messages": [{"role": "user", "content": f"message {i}"} for i in range(n)],
            },
            {
                "user_id": None,
                "conversation_id": "anon",
                "messages": [{"role": "user", "content": "no user's"}],
            },
        ],
    }


def test_import_stores_each_conversation_once_however_often_it_runs(
    tmp_path: Path, dsn: str, postgres_dsn: str, dropped_schemas: list[str]
) -> None:
    namespace = f"t_import_{uuid.uuid4().hex[:8]}"
    dropped_schemas.append(namespace)
    document = tmp_path / "doc.json"
    document.write_text(json.dumps(export_of("c1")))
    on_pg = ("--dsn", dsn, "--namespace", namespace)

    first = ok(otpmem("import", *on_pg, document))
    assert first.stdout.startswith(
        f"stored 4 messages, skipped 0 already there, from 2 conversations into schema "
        f"'{namespace}'"
    )
    assert schema_exists(postgres_dsn, namespace)  # a write makes its schema
    ok(otpmem("import", document, *on_pg))  # again, the options after FILE
    results: list[Result] = []
    threads = [
        threading.Thread(target=lambda: results.append(otpmem("import", *on_pg, document)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert not any(t.is_alive() for t in threads) and len(results) == 3
    for result in results:
        ok(result)

    # Five imports stored c1 and anon once; one more message makes c1 a new entry, stored
    # after the first, and anon's entry is the same one again.
    document.write_text(json.dumps(export_of("c1", 4)))
    ok(otpmem("import", *on_pg, "-", stdin=document.read_text()))
    exported = json.loads(ok(otpmem("export", *on_pg, "--all")).stdout)
    contents = {
        c["conversation_id"]: [m["content"] for m in c["messages"]]
        for c in exported["conversations"]
    }
    assert contents == {
        "c1": [f"message {i}" for i in (0, 1, 2, 0, 1, 2, 3)],
        "anon": ["no user's"],
    }


def test_wrong_flags_are_one_line_each(tmp_path: Path, dsn: str, pg_store: str) -> None:
    store = make_store(tmp_path / "store")

    fails_with(otpmem("inspect", store, "c1", "--dsn", dsn), 2, "drop DATA or --dsn")
    fails_with(
        otpmem("inspect", store, "--dsn", dsn, "--namespace", pg_store),
        2,
        f"{store} is a directory, but --dsn names the store",
    )
    fails_with(otpmem("export", store, "--all", "--namespace", pg_store), 2, "give --dsn")
    fails_with(otpmem("inspect"), 2, "name the store: DATA", "or --dsn")
    fails_with(
        otpmem("inspect", "--dsn", dsn, "--namespace", "Not-A-Schema"),
        2,
        "--namespace",
        "lowercase",
    )


def test_a_bad_dsn_a_missing_schema_and_a_lost_server_never_show_the_password(
    postgres_dsn: str, dsn: str, pg_store: str
) -> None:
    bad = fails_with(
        otpmem("inspect", "--dsn", f"postgresql://app:{SECRET}@db/x?bogus=1"),
        2,
        "--dsn",
        "not a PostgreSQL DSN",
    )
    quoted = fails_with(
        otpmem(
            "export",
            "--all",
            "--dsn",
            f"host=127.0.0.1 port=9 password='{SECRET} two' connect_timeout=2",
        ),
        2,
        "cannot reach PostgreSQL at host=127.0.0.1 port=9 password=*** connect_timeout=2",
    )
    missing = fails_with(
        otpmem("search", "hello", "--dsn", dsn, "--namespace", "never_made_here"),
        2,
        "there is no otpmem schema 'never_made_here'",
        "try --namespace",
    )
    for message in (bad, quoted, missing):
        assert SECRET not in message and "two'" not in message, message
        # One line: the reason (a usage error adds the house's pointer to --help).
        lines = message.strip().splitlines()
        assert len(lines) == 1 or (len(lines) == 2 and "--help" in lines[1]), message
    assert not schema_exists(postgres_dsn, "never_made_here")  # a read never makes one


def test_completion_offers_the_conversations_of_the_schema_on_the_line(
    dsn: str, pg_store: str
) -> None:
    words = f"otpmem inspect --dsn {dsn} --namespace {pg_store} --user alice c"
    result = ok(
        otpmem(
            env={
                "_OTPMEM_COMPLETE": "bash_complete",
                "COMP_WORDS": words,
                "COMP_CWORD": str(len(words.split(" ")) - 1),
            }
        )
    )
    assert [line.split(",", 1)[1] for line in result.stdout.splitlines()] == ["c1", "c2"]


def test_a_run_of_simulate_on_a_dsn_reads_the_same_by_its_directory_and_by_dsn(
    tmp_path: Path, postgres_dsn: str, dsn: str, dropped_schemas: list[str]
) -> None:
    run = tmp_path / "run"
    ok(otpmem("simulate", "--store", f"postgres={dsn}", "--agents", 2, "--turns", 2, "--data", run))
    store = json.loads((run / "run.json").read_text())["store"]
    assert store["kind"] == "postgres" and SECRET not in store["dsn"] and "***" in store["dsn"]
    namespace = store["namespace"]
    dropped_schemas.append(namespace)
    before = (tree_state(run), schema_state(postgres_dsn, namespace))
    on_pg = ("--dsn", dsn, "--namespace", namespace)

    by_dir = ok(otpmem("inspect", run, env={"PGPASSWORD": SECRET}))
    by_dsn = ok(otpmem("inspect", *on_pg))
    assert by_dir.stdout == by_dsn.stdout
    assert set(listed(by_dsn.stdout)) == {("sim", "sim-0"), ("sim", "sim-1")}
    assert (
        ok(otpmem("export", run, "--all", env={"PGPASSWORD": SECRET})).stdout
        == ok(otpmem("export", "--all", *on_pg)).stdout
    )

    assert (tree_state(run), schema_state(postgres_dsn, namespace)) == before
