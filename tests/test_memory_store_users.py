"""MemoryStore's per-user conversation index: one user's listing never reads the others',
stays true through clear/forget_user/import, and survives a crash (derived on adoption)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.actors import faults
from otpmem.messages import Conv
from otpmem.stores import MemoryStore, MemoryStoreHandle
from otpmem.stores.memory._users import UserKey
from otpmem.supervisors import Supervisor


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


class NoScan(dict[Any, Any]):
    """A table mapping that refuses to be iterated: a listing that scans fails."""

    def __iter__(self) -> Any:
        raise AssertionError("the whole table was iterated")


def test_a_users_listing_never_iterates_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    store = MemoryStore.start_link()
    try:
        for u in range(50):
            store.add(Conv(f"u{u}", "a"), [msg("x")])
        store.add(Conv("ann", "first"), [msg("1")])
        store.add(Conv("u3", "b"), [msg("x")])
        store.add(Conv("ann", "second"), [msg("2")])
        store.add("anonymous", [msg("3")])
        real = MemoryStoreHandle._mapping
        monkeypatch.setattr(MemoryStoreHandle, "_mapping", lambda self: NoScan(real(self)))
        assert store.conversations("ann") == [Conv("ann", "first"), Conv("ann", "second")]
        assert store.conversations("nobody") == []
        with pytest.raises(AssertionError, match="iterated"):
            store.conversations()  # every conversation: that one is a scan, as it must be
        monkeypatch.undo()
        everything = store.conversations()
        assert Conv(None, "anonymous") in everything and len(everything) == 54
        assert not any(isinstance(c, UserKey) for c in everything)
    finally:
        store.stop()


def test_clear_forget_user_and_import_keep_the_listing_true() -> None:
    store = MemoryStore.start_link()
    try:
        a, b, c = Conv("ann", "a"), Conv("ann", "b"), Conv("bob", "a")
        for conv in (a, b, c):
            store.add(conv, [msg("hi")])
        store.clear(a)
        assert store.conversations("ann") == [b]
        store.add(a, [msg("again")])  # recreated: listed again, as the newest
        assert store.conversations("ann") == [b, a]
        store.clear(Conv("ann", "never"))  # clearing nothing changes nothing
        store.forget_user("ann")
        assert store.conversations("ann") == [] and store.conversations("bob") == [c]
        document = store.export(c)
        document["conversations"][0]["conversation_id"] = "imported"
        store.import_(document)
        assert store.conversations("bob") == [c, Conv("bob", "imported")]
        assert store.get(Conv("bob", "a")) == [msg("hi")]
    finally:
        store.stop()


class TornStore(MemoryStore):
    """A store that can be made to write a conversation without listing it, as an
    incarnation killed between the two writes would leave it."""

    def handle_call(self, message: Any) -> Any:
        if isinstance(message, tuple) and message[:1] == ("torn",):
            conv = message[1]
            self.table[conv] = ([msg("torn")], 1, (), None, 0)
            return None
        return super().handle_call(message)


def test_the_listing_survives_a_crash_and_a_torn_write_is_repaired_on_adoption() -> None:
    sup = Supervisor.start_link([TornStore.child_spec("torn-store")])
    store: MemoryStoreHandle = MemoryStore.named("torn-store")
    try:
        store.add(Conv("ann", "a"), [msg("kept")])
        store.call(("torn", Conv("ann", "b")))
        assert store.conversations("ann") == [Conv("ann", "a")]  # torn: not listed yet
        faults.crash(store, RuntimeError("injected"))
        pair = sup.child("torn-store")
        assert pair is not None
        pair.sync()
        assert store.call(("adopted",)) is True
        assert store.conversations("ann") == [Conv("ann", "a"), Conv("ann", "b")]
        store.add(Conv("ann", "c"), [msg("after")])
        assert store.conversations("ann")[-1] == Conv("ann", "c")
    finally:
        sup.stop()


USERS = ["ann", "bob", "a:b", "\x00"]
CONVS = [Conv(u, c) for u in USERS for c in ("a", "b", "c")] + [Conv(None, "a")]
operation = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(CONVS)),
    st.tuples(st.just("clear"), st.sampled_from(CONVS)),
    st.tuples(st.just("forget_user"), st.sampled_from(USERS)),
    st.tuples(st.just("crash"), st.none()),
)


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(operation, max_size=30))
def test_listings_equal_a_model_through_any_sequence(ops: list[tuple[str, Any]]) -> None:
    sup = Supervisor.start_link([MemoryStore.child_spec("users-model")])
    store: MemoryStoreHandle = MemoryStore.named("users-model")
    model: list[Conv] = []  # the conversations held, in the order they were created
    try:
        for kind, arg in ops:
            if kind == "add":
                store.add(arg, [msg("m")])
                if arg not in model:
                    model.append(arg)
            elif kind == "clear":
                store.clear(arg)
                model = [c for c in model if c != arg]
            elif kind == "forget_user":
                store.forget_user(arg)
                model = [c for c in model if c.user_id != arg]
            else:
                faults.crash(store, RuntimeError("injected"))
                pair = sup.child("users-model")
                assert pair is not None
                pair.sync()
            for user in USERS:
                assert store.conversations(user) == [c for c in model if c.user_id == user]
            assert sorted(store.conversations(), key=repr) == sorted(model, key=repr)
    finally:
        sup.stop()
