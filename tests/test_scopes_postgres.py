"""Scopes on PostgresStore beyond the conformance cases: a version-3 schema migrated (its
facts kept, a marked user id moved off another scope's key), two nodes on one namespace,
a reopened store, the list written with its write or not at all, ids text cannot hold, and
forget_user racing scope writes from two nodes' threads."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import msgpack
import psycopg
import pytest

from otpmem.messages import Conv
from otpmem.stores import CursorMoved, Fact, PostgresStore, Profile
from otpmem.stores.blocks import BlockNotFound
from otpmem.stores.postgres import PostgresStoreHandle
from otpmem.stores.postgres._requests import Requests
from otpmem.stores.scopes import MARK, Scope, owner_key
from tests.support import run_threads, started_thread

WAIT = 60.0
ANN = Conv("ann", "c1")
PLANNER = Scope("ann", agent="planner")
TEAM = Scope("ann", team="alpha")
FORGED = MARK + '["ann","planner",null,null]'
"""A user id a version-3 schema may hold: read raw, it is PLANNER's key."""


@pytest.fixture
def start(postgres_dsn: str, pg_namespace: str) -> Iterator[Any]:
    """Start a PostgresStore (a node) on the test's namespace; all stopped at the end."""
    started: list[PostgresStoreHandle] = []

    def start_store() -> PostgresStoreHandle:
        started.append(PostgresStore.start_link(postgres_dsn, namespace=pg_namespace))
        return started[-1]

    yield start_store
    for handle in started:
        if handle.alive:
            handle.stop()


def test_the_documented_examples(start: Any) -> None:
    store = start()
    store.save_fact(Fact(Scope("ann", agent="planner"), "plan", "step 2"))
    assert [f.value for f in store.get_facts(Scope("ann", agent="planner"))] == ["step 2"]
    assert store.scopes("ann") == [Scope("ann", agent="planner")]
    team = Scope("ann", team="alpha")
    store.set_block(team, "notes", "", limit=2000)
    store.append_block(team, "notes", "ann: owns the parser", key="t1:call_1")
    store.replace_block(team, "notes", "the parser", "the lexer", key="t2:call_1")
    assert store.get_block(team, "notes").value == "ann: owns the lexer"


def test_two_nodes_see_each_others_scopes_and_members_and_a_reopen_keeps_them(
    start: Any,
) -> None:
    one, two = start(), start()
    one.add(ANN, [{"role": "user", "content": "hi"}])
    one.save_fact(Fact(PLANNER, "plan", "step 1"))
    one.join_scope(PLANNER, ANN)
    two.append_block(TEAM, "notes", "two wrote this")
    two.join_scope(TEAM, Conv("ann", "c2"))
    two.join_scope(PLANNER, ANN)  # joined already, on the other node: still once
    for node in (one, two):
        assert node.scopes("ann") == sorted([PLANNER, TEAM], key=owner_key)
        assert node.scope_conversations(PLANNER) == [ANN]
        assert node.scope_conversations(TEAM) == [Conv("ann", "c2")]
        assert [f.value for f in node.get_facts(PLANNER)] == ["step 1"]
        assert node.get_block(TEAM, "notes").value == "two wrote this"
    one.stop()
    two.stop()
    again = start()
    assert again.scopes("ann") == sorted([PLANNER, TEAM], key=owner_key)
    assert again.scope_conversations(PLANNER) == [ANN]
    assert [f.value for f in again.get_facts(PLANNER)] == ["step 1"]
    other = start()
    other.forget_user("ann")  # on one node: gone for the other too
    assert again.scopes("ann") == [] and again.get_facts(PLANNER) == []
    assert again.scope_conversations(TEAM) == [] and again.blocks(TEAM) == []


def test_a_refused_write_lists_no_scope(start: Any) -> None:
    store = start()
    store.add(ANN, [{"role": "user", "content": "x"}])
    with pytest.raises(CursorMoved):
        store.save_facts(PLANNER, [Fact(PLANNER, "k", "v")], cursor=(ANN, 1), cursor_from=5)
    with pytest.raises(BlockNotFound):
        store.replace_block(TEAM, "notes", "a", "b")
    with pytest.raises(ValueError, match="another user's conversation"):
        store.join_scope(Scope("bob", agent="planner"), ANN)
    assert store.scopes("ann") == [] and store.scopes("bob") == []
    assert store.get_facts(PLANNER) == [] and store.blocks(TEAM) == []


def test_an_id_with_a_nul_keeps_its_own_records_beside_its_stored_form(start: Any) -> None:
    store = start()
    nul = "ann\x00"
    lookalike = MARK + '["ann\\u0000",null,null,null]'  # spelled as the NUL id is stored
    for who in (nul, lookalike, Scope(nul, agent="planner"), "ann"):
        store.save_fact(Fact(who, "k", f"{who!r}'s"))
        store.save_profile(Profile(who, f"{who!r}'s"))
        store.append_block(who, "notes", f"{who!r}'s")
    for who in (nul, lookalike, Scope(nul, agent="planner"), "ann"):
        assert [(f.user_id, f.value) for f in store.get_facts(who)] == [(who, f"{who!r}'s")]
        assert store.get_profile(who).summary == f"{who!r}'s"
        assert store.get_profile(who).user_id == who
        assert [b.value for b in store.blocks(who)] == [f"{who!r}'s"]
    assert store.scopes(nul) == [Scope(nul, agent="planner")]
    with pytest.raises(ValueError, match="PostgreSQL cannot store this"):
        store.add(Conv(nul, "c"), [{"role": "user", "content": "x"}])  # as before
    store.forget_user(lookalike)
    assert store.get_facts(lookalike) == [] and store.blocks(lookalike) == []
    assert [f.value for f in store.get_facts(nul)] == [f"{nul!r}'s"]
    store.forget_user(nul)
    for who in (nul, Scope(nul, agent="planner")):
        assert store.get_facts(who) == [] and store.get_profile(who) is None
        assert store.blocks(who) == []
    assert store.scopes(nul) == [] and [f.value for f in store.get_facts("ann")] == ["'ann''s"]


def test_a_version_3_schema_migrates_keeping_its_facts(
    start: Any, postgres_dsn: str, pg_namespace: str
) -> None:
    store = start()
    store.save_fact(Fact("ann", "city", "Lyon"))
    store.save_fact(Fact("ann", "city", "Paris"))
    store.save_profile(Profile("ann", "likes maps"))
    store.append_block("ann", "notes", "ann's own")
    # What a version-3 store wrote for the user FORGED: stored here as "zed", then moved.
    store.save_fact(Fact("zed", "plan", "zed's"))
    store.save_fact(Fact("zed", "plan", "zed's, again"))
    store.save_profile(Profile("zed", "zed"))
    store.append_block("zed", "notes", "zed's")
    store.stop()
    _as_version_3(postgres_dsn, pg_namespace, {"zed": FORGED})
    again = start()
    [city] = again.get_facts("ann")
    assert (city.value, city.version) == ("Paris", 2)
    assert [f.value for f in again.fact_history("ann", "city")] == ["Lyon"]
    assert again.get_profile("ann").summary == "likes maps"
    assert [b.value for b in again.blocks("ann")] == ["ann's own"]
    # The marked user's records are theirs still, and never PLANNER's.
    assert [(f.user_id, f.value) for f in again.get_facts(FORGED)] == [(FORGED, "zed's, again")]
    assert [f.value for f in again.fact_history(FORGED, "plan")] == ["zed's"]
    assert again.get_profile(FORGED).user_id == FORGED
    assert [b.value for b in again.blocks(FORGED)] == ["zed's"]
    assert again.get_facts(PLANNER) == [] and again.get_profile(PLANNER) is None
    assert again.blocks(PLANNER) == [] and again.fact_history(PLANNER, "plan") == []
    # Scopes work on the migrated schema.
    again.add(ANN, [{"role": "user", "content": "x"}])
    again.save_fact(Fact(PLANNER, "plan", "planner's"))
    again.join_scope(PLANNER, ANN)
    assert again.scopes("ann") == [PLANNER] and again.scope_conversations(PLANNER) == [ANN]
    again.forget_user(FORGED)
    assert again.get_facts(FORGED) == [] and again.blocks(FORGED) == []
    assert [f.value for f in again.get_facts(PLANNER)] == ["planner's"]
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute(f"SELECT version FROM {pg_namespace}.schema_version").fetchall()
    assert rows == [(4,)]


def _as_version_3(dsn: str, ns: str, renames: dict[str, str]) -> None:
    """Make the namespace what a version-3 store left: no scope tables, and each user
    ``old`` of ``renames`` stored under the raw id ``new`` (records included)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {ns}.scopes, {ns}.scope_members")
        conn.execute(f"UPDATE {ns}.schema_version SET version = 3")
        for old, new in renames.items():
            for table in ("facts", "fact_history"):
                rows = conn.execute(
                    f"SELECT ctid, record FROM {ns}.{table} WHERE user_id = %s", (old,)
                ).fetchall()
                for ctid, raw in rows:
                    record = msgpack.unpackb(raw)
                    record[0] = new
                    conn.execute(
                        f"UPDATE {ns}.{table} SET user_id = %s, record = %s WHERE ctid = %s",
                        (new, msgpack.packb(record), ctid),
                    )
            conn.execute(f"UPDATE {ns}.profiles SET user_id = %s WHERE user_id = %s", (new, old))
            conn.execute(f"UPDATE {ns}.memory_blocks SET owner = %s WHERE owner = %s", (new, old))


def test_forget_user_racing_scope_writes_on_two_nodes_leaves_nothing_unlisted(
    start: Any,
) -> None:
    """Threads on two nodes write to ann's scopes (facts with a cursor, blocks, joins, adds)
    while another thread forgets ann again and again: whatever outlives a forget is listed,
    so one more forget leaves nothing of any scope."""
    one, two = start(), start()
    agents = [Scope("ann", agent=f"a{i}") for i in range(4)]
    barrier = threading.Barrier(5)
    writers_done = threading.Event()
    left, forgets = [len(agents)], [0]
    count = threading.Lock()

    def work(t: int) -> None:
        barrier.wait(WAIT)
        if t == len(agents):
            while not writers_done.is_set():
                two.forget_user("ann", timeout=WAIT)
                forgets[0] += 1
            return
        node, scope, conv = (one, two)[t % 2], agents[t], Conv("ann", f"c{t}")
        try:
            for n in range(15):
                node.add(conv, [{"role": "user", "content": str(n)}], timeout=WAIT)
                node.save_facts(scope, [Fact(scope, "n", str(n))], cursor=(conv, 1), timeout=WAIT)
                node.append_block(scope, "notes", str(n), timeout=WAIT)
                node.join_scope(scope, conv, timeout=WAIT)
        finally:
            with count:
                left[0] -= 1
                if left[0] == 0:
                    writers_done.set()

    assert run_threads(len(agents) + 1, work, timeout=WAIT * 2) == []
    assert forgets[0] > 0
    listed = set(one.scopes("ann"))
    for scope in agents:
        holds = one.get_facts(scope) or one.blocks(scope) or one.scope_conversations(scope)
        assert not holds or scope in listed, f"{scope!r} holds records no list names"
    two.forget_user("ann")
    for scope in agents:
        assert one.get_facts(scope) == [] and one.blocks(scope) == []
        assert one.scope_conversations(scope) == [] and one.fact_history(scope, "n") == []
    assert one.scopes("ann") == [] and one.conversations("ann") == []


def test_a_scope_write_under_way_when_forget_user_begins_is_forgotten_too(
    start: Any, postgres_dsn: str, pg_namespace: str
) -> None:
    """Another node's write to a listed scope, its transaction still open, when forget_user
    starts: the forget waits for it and takes what it wrote (else a fact of a new key
    would outlive the forget, and the list that names its scope would be gone)."""
    store = start()
    store.save_fact(Fact(PLANNER, "plan", "listed"))
    late = ("save_facts", PLANNER, [Fact(PLANNER, "late", "v")], [], None, 200, False, {})
    work, args = Requests(pg_namespace).work(late)
    forgot = threading.Event()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        try:
            with conn.transaction(), conn.cursor() as cur:
                work(cur, *args)  # written, not committed
                thread, errors = started_thread(
                    lambda: (store.forget_user("ann", timeout=WAIT), forgot.set())
                )
                assert _waits_or_ends(postgres_dsn, forgot), "forget_user neither waited nor ended"
        finally:
            thread.join(WAIT)  # the write committed (or rolled back): the forget goes on
    assert not thread.is_alive() and errors == []
    assert store.get_facts(PLANNER) == [] and store.scopes("ann") == []


def _waits_or_ends(dsn: str, ended: threading.Event, timeout: float = WAIT) -> bool:
    """Whether, within ``timeout`` s, a statement waits on a lock or ``ended`` is set
    (asked every 10 ms: a lock wait has no event of its own to wait on)."""
    with psycopg.connect(dsn, autocommit=True) as watcher:
        for _ in range(int(timeout / 0.01)):
            row = watcher.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()
            if (row and row[0]) or ended.is_set():
                return True
            ended.wait(0.01)
    return False
