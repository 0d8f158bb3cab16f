"""Scopes on LevelDB (issue 30, item 1): what a reopened store keeps of them, the layout-3
directories it opens (and the records it moves there), and forget_user racing scope
writes from real threads."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import msgpack
import plyvel

from otpmem.actors.faults import FaultPlan
from otpmem.messages import Conv
from otpmem.stores import Fact, LevelDBStore, LevelDBStoreHandle, Profile
from otpmem.stores.leveldb import keys
from otpmem.stores.scopes import MARK, Scope, owner_key, public_id
from tests.support import WAIT

Opened = Callable[..., LevelDBStoreHandle]
ANN, BOB = Conv("ann", "c1"), Conv("bob", "c1")
PLANNER = Scope("ann", agent="planner")
TEAM = Scope("ann", team="alpha")
RUN = Scope("ann", run="r1")
BOBS = Scope("bob", agent="planner")
FORGER = MARK + '["ann","planner",null,null]'
"""A user id spelled as PLANNER's owner key."""
OWNER_KINDS = (b"f", b"s", b"h", b"H", b"r", b"B")
"""The kinds of record keyed by an owner (``_longterm``'s and ``_blocks``' docstrings)."""
SCOPE_KINDS = (*OWNER_KINDS, b"g")


def _fill(store: LevelDBStoreHandle) -> None:
    store.add(ANN, [{"role": "user", "content": "x"}])
    store.add(BOB, [{"role": "user", "content": "y"}])
    for who in ("ann", PLANNER, TEAM, RUN, "bob", BOBS):
        store.save_fact(Fact(who, "k", "one"))
        store.save_fact(Fact(who, "k", "two"))
        store.save_profile(Profile(who, f"{who!r}'s"))
        store.append_block(who, "notes", f"{who!r}'s")
    store.join_scope(PLANNER, ANN)
    store.join_scope(TEAM, Conv("ann", "c2"))
    store.join_scope(BOBS, BOB)


def _holds(store: LevelDBStoreHandle, who: str | Scope) -> bool:
    return bool(
        store.get_facts(who)
        or store.fact_history(who, "k")
        or store.get_profile(who)
        or store.blocks(who)
        or (type(who) is Scope and store.scope_conversations(who))
    )


def _layout(path: Path) -> bytes | None:
    db = plyvel.DB(str(path))
    try:
        version: bytes | None = db.get(keys.VERSION)
        return version
    finally:
        db.close()


def test_a_reopened_store_keeps_scopes_members_and_the_registry(
    opened: Opened, tmp_path: Path
) -> None:
    path = tmp_path / "db"
    store = opened(path)
    _fill(store)
    store.stop()
    again = opened(path)
    for who in (PLANNER, TEAM, RUN, BOBS):
        assert [f.value for f in again.get_facts(who)] == ["two"], who
        assert [f.value for f in again.fact_history(who, "k")] == ["one"], who
        assert again.get_profile(who).user_id == who
        assert [b.owner for b in again.blocks(who)] == [who]
    assert again.scopes("ann") == sorted([PLANNER, TEAM, RUN], key=owner_key)
    assert again.scope_conversations(PLANNER) == [ANN]
    assert again.scope_conversations(TEAM) == [Conv("ann", "c2")]
    again.join_scope(PLANNER, ANN)  # joined before the stop: still once
    assert again.scope_conversations(PLANNER) == [ANN]

    again.forget_user(FORGER)  # spelled as the planner's key, and none of its records
    assert [f.value for f in again.get_facts(PLANNER)] == ["two"]
    again.forget_user("ann")
    for who in ("ann", PLANNER, TEAM, RUN):
        assert not _holds(again, who), who
    assert again.scopes("ann") == []
    again.stop()

    third = opened(path)
    for who in ("ann", PLANNER, TEAM, RUN):
        assert not _holds(third, who), who
    assert third.scopes("ann") == []
    assert third.scopes("bob") == [BOBS] and third.scope_conversations(BOBS) == [BOB]
    assert [f.value for f in third.get_facts(BOBS)] == ["two"]
    assert third.get_profile("bob") is not None and len(third.blocks("bob")) == 1
    third.stop()
    assert _layout(path) == b"4"


def test_a_layout_3_directory_opens_and_keeps_its_facts(opened: Opened, tmp_path: Path) -> None:
    path = tmp_path / "db"
    store = opened(path)
    store.add(ANN, [{"role": "user", "content": "x"}])
    store.save_fact(Fact("ann", "city", "Lyon"))
    store.save_fact(Fact("ann", "city", "Paris"))
    store.save_profile(Profile("ann", "likes trains"))
    store.append_block("ann", "notes", "mine")
    facts, history = store.get_facts("ann"), store.fact_history("ann", "city")
    store.stop()
    db = plyvel.DB(str(path))
    try:
        db.put(keys.VERSION, b"3")
        before = dict(db.iterator())
    finally:
        db.close()

    again = opened(path)
    assert again.get_facts("ann") == facts and again.fact_history("ann", "city") == history
    assert again.get_profile("ann").summary == "likes trains"
    assert [b.value for b in again.blocks("ann")] == ["mine"]
    assert again.get(ANN) == [{"role": "user", "content": "x"}]
    assert again.scopes("ann") == []
    again.save_fact(Fact(PLANNER, "plan", "step 1"))  # a layout-4 record beside them
    assert again.scopes("ann") == [PLANNER]
    again.stop()
    db = plyvel.DB(str(path))
    try:
        assert db.get(keys.VERSION) == b"4"
        after = dict(db.iterator())
    finally:
        db.close()
    assert {k: v for k, v in after.items() if k in before and k != keys.VERSION} == {
        k: v for k, v in before.items() if k != keys.VERSION
    }, "no record of layout 3 was rewritten"


def _as_layout_3(path: Path, users: list[str]) -> None:
    """Store the records of ``users`` as otpmem before scopes did: under the raw user id
    (the fact's own too), with no registry, at layout 3."""
    db = plyvel.DB(str(path))
    try:
        with db.write_batch() as batch:
            for user in users:
                for kind in OWNER_KINDS:
                    prefix = keys.user_prefix(kind, owner_key(user))
                    for key, value in db.iterator(prefix=prefix):
                        if kind in (b"f", b"h"):
                            record = msgpack.unpackb(value)
                            record[0] = user
                            value = msgpack.packb(record)
                        batch.delete(key)
                        batch.put(keys.user_prefix(kind, user) + key[len(prefix) :], value)
            for key in db.iterator(prefix=b"o", include_value=False):
                batch.delete(key)
            batch.put(keys.VERSION, b"3")
    finally:
        db.close()


def test_a_layout_3_record_of_a_user_id_that_begins_with_the_mark_moves_to_its_owner_key(
    opened: Opened, tmp_path: Path
) -> None:
    path = tmp_path / "db"
    # owner_key(FORGER) is another of them: FORGER's records move to where its were.
    marked = [FORGER, owner_key(FORGER), MARK, MARK + "x" * 300]
    store = opened(path)
    for user in (*marked, "ann"):
        store.save_fact(Fact(user, "k", "one"))
        store.save_fact(Fact(user, "k", "two"))
        store.save_profile(Profile(user, "p"))
        store.append_block(user, "notes", "n")
    store.stop()
    _as_layout_3(path, marked)

    again = opened(path)
    assert again.get_facts(PLANNER) == [], "a raw id never became the planner's"
    assert again.scopes("ann") == []
    for user in (*marked, "ann"):
        [fact] = again.get_facts(user)
        assert (fact.user_id, fact.value) == (user, "two")
        assert [f.value for f in again.fact_history(user, "k")] == ["one"]
        assert again.get_profile(user).user_id == user
        assert [(b.owner, b.value) for b in again.blocks(user)] == [(user, "n")]
    again.save_fact(Fact(PLANNER, "k", "planner's"))
    for user in marked:
        again.forget_user(user)
        assert not _holds(again, user), user
    assert [f.value for f in again.get_facts(PLANNER)] == ["planner's"]
    assert [f.value for f in again.get_facts("ann")] == ["two"]
    again.stop()
    db = plyvel.DB(str(path))
    try:
        for kind in SCOPE_KINDS:
            left = {
                public_id(keys.decode_part(k, 1) or "")
                for k in db.iterator(prefix=kind, include_value=False)
            }
            assert left <= {"ann", PLANNER}, (kind, left)
    finally:
        db.close()


def test_keys_of_users_beginning_finds_exactly_those_users(tmp_path: Path) -> None:
    users = ["a", MARK, MARK + "b", "b" * 300, MARK + "c" * 300, " x", "\x1e", "\x1e" + MARK]
    users += [MARK + MARK, "é" + MARK, MARK + "é", "z" * 70_000, MARK + "z" * 70_000]
    db = plyvel.DB(str(tmp_path / "raw"), create_if_missing=True)
    try:
        for user in users:
            for suffix in (b"", b"k1", b"k2"):
                db.put(keys.user_prefix(b"f", user) + suffix, user.encode())
            db.put(keys.user_prefix(b"e", user), b"the kind before")
            db.put(keys.user_prefix(b"g", user), b"the kind after")
        db.put(keys.user_prefix(b"f", None), b"no user")
        found = list(keys.keys_of_users_beginning(db, b"f", MARK))
    finally:
        db.close()
    marked = [u for u in users if u.startswith(MARK)]
    assert sorted(v.decode() for _, v in found) == sorted(marked * 3)
    assert all(k.startswith(b"f") for k, _ in found)


def test_forget_user_racing_scope_writes_leaves_no_scope_unlisted(
    opened: Opened, tmp_path: Path
) -> None:
    path = tmp_path / "db"
    store = opened(path)
    writers, rounds = 4, 15
    scopes = [Scope("ann", agent=f"a{i}") for i in range(writers)]
    scopes += [Scope("ann", run=f"r{i}") for i in range(writers)]
    errors: list[BaseException] = []
    started = threading.Barrier(writers + 1, timeout=10)

    def write(i: int) -> None:
        try:
            started.wait()
            for j in range(rounds):
                store.save_fact(Fact(scopes[i], "k", str(j)))
                store.append_block(scopes[i], "notes", str(j))
                store.join_scope(scopes[writers + i], Conv("ann", f"c{i}-{j}"))
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    def forget() -> None:
        try:
            started.wait()
            for _ in range(5):
                store.forget_user("ann")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    threads.append(threading.Thread(target=forget))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and errors == []

    listed = set(store.scopes("ann"))
    for scope in scopes:
        assert not _holds(store, scope) or scope in listed, scope
    store.forget_user("ann")
    assert store.scopes("ann") == [] and not any(_holds(store, s) for s in scopes)
    store.stop()
    db = plyvel.DB(str(path))
    try:
        for kind in (*SCOPE_KINDS, b"o"):
            left = [k for k in db.iterator(prefix=kind, include_value=False)]
            assert left == [], (kind, left[:3])
    finally:
        db.close()


def _until(predicate: Callable[[], bool]) -> bool:
    done = threading.Event()
    for _ in range(int(WAIT / 0.002)):
        if predicate():
            return True
        done.wait(0.002)
    return False


def test_forget_user_takes_a_scope_whose_first_write_is_still_queued(tmp_path: Path) -> None:
    """The scope's first write is handled right before the forget, its batch not yet on
    disk: the forget must read the user's scopes after it lands (it read them before, and
    the scope outlived its user's forget)."""
    release = threading.Event()
    plan = FaultPlan().hold_when(lambda m: m == ("flush",), release)
    store = LevelDBStore.start_link(tmp_path / "db", faults=plan)
    threads = [
        threading.Thread(target=store.flush),  # holds the server
        threading.Thread(target=store.save_fact, args=(Fact(PLANNER, "k", "v"),)),
        threading.Thread(target=store.join_scope, args=(TEAM, ANN)),
        threading.Thread(target=store.forget_user, args=("ann",)),
    ]
    try:
        threads[0].start()
        assert _until(lambda: plan.count("hold_when") > 0)
        for n, thread in enumerate(threads[1:], 1):
            thread.start()
            assert _until(lambda n=n: len(store.resolve().mailbox) >= n)
        release.set()
        for thread in threads:
            thread.join(WAIT)
        assert not any(t.is_alive() for t in threads)
        assert store.get_facts(PLANNER) == [] and store.scope_conversations(TEAM) == []
        assert store.scopes("ann") == []
    finally:
        release.set()
        store.stop()
