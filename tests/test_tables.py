"""Tables: owned by a process, deleted with it, or inherited by a live heir."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from otpmem.actors import (
    GenServer,
    Handle,
    NotInProcess,
    ServerExited,
    Table,
    TableError,
    TableKeeper,
    TableTransfer,
    claim_table,
    faults,
    give_away,
    new_table,
    set_heir,
)
from otpmem.supervisors import ChildSpec, Supervisor
from tests.support import WAIT, Trace


class Owner(GenServer):
    """Owns one table; calls: ("put", k, v), ("table",), ("give", handle), ("heir", handle)."""

    def init(
        self, name: str = "t", heir: Handle | None = None, keeper: Handle | None = None
    ) -> None:
        table = claim_table(keeper, name) if keeper is not None else None
        self.adopted = table is not None
        self.table: Table[Any, Any] = table or new_table(name, heir=heir, heir_data=("from", name))

    def handle_call(self, message: Any) -> Any:
        kind, *args = message
        if kind == "put":
            self.table[args[0]] = args[1]
            return None
        if kind == "table":
            return self.table
        if kind == "adopted":
            return self.adopted
        if kind == "give":
            give_away(self.table, args[0], "gift")
            return None
        if kind == "heir":
            set_heir(self.table, args[0], "new heir data")
            return None
        raise ValueError(message)


class Receiver(GenServer):
    def init(self, trace: Trace) -> None:
        self.trace = trace

    def handle_info(self, message: Any) -> Any:
        self.trace(message)

    def handle_call(self, message: Any) -> Any:
        table: Table[Any, Any] = message
        table["written-by-receiver"] = True
        return dict(table.items())


def test_table_dies_with_its_owner_without_heir() -> None:
    owner = Owner.start()
    owner.call(("put", "k", 1))
    table = owner.call(("table",))
    assert table["k"] == 1
    faults.kill(owner)
    assert table.deleted
    with pytest.raises(TableError, match="deleted"):
        table.get("k")


def test_readers_on_other_threads_see_writes_but_cannot_write() -> None:
    owner = Owner.start()
    try:
        owner.call(("put", "k", "v"))
        table = owner.call(("table",))
        assert table.get("k") == "v" and "k" in table and len(table) == 1
        with pytest.raises(TableError, match="protected"):
            table["x"] = 1
    finally:
        owner.stop()


def test_heir_inherits_table_with_its_data_when_owner_crashes() -> None:
    trace = Trace()
    heir = Receiver.start(trace)
    owner = Owner.start("inherited", heir=heir)
    owner.call(("put", "k", 1))
    table = owner.call(("table",))
    faults.crash(owner, "owner crashed")
    try:
        (transfer,) = trace.wait_for(lambda items: len(items) == 1)
        assert isinstance(transfer, TableTransfer)
        assert transfer.table is table and transfer.from_pid == owner.pid
        assert transfer.data == ("from", "inherited")
        assert table.owner is not None and table.owner.pid == heir.pid
        assert heir.call(table) == {"k": 1, "written-by-receiver": True}
    finally:
        heir.stop()
    assert table.deleted  # the heir had no heir of its own


def test_dead_heir_means_the_table_is_deleted() -> None:
    heir = Receiver.start(Trace())
    owner = Owner.start("t", heir=heir)
    table = owner.call(("table",))
    heir.stop()
    owner.stop()
    assert table.deleted


def test_give_away_transfers_ownership_and_sends_the_gift() -> None:
    trace = Trace()
    receiver = Receiver.start(trace)
    owner = Owner.start()
    try:
        table = owner.call(("table",))
        owner.call(("give", receiver))
        (transfer,) = trace.wait_for(lambda items: len(items) == 1)
        assert transfer.data == "gift" and table.owner.pid == receiver.pid
        # The former owner may no longer write: doing so is a bug in it, so it crashes.
        with pytest.raises(ServerExited) as info:
            owner.call(("put", "k", 1))
        assert isinstance(info.value.reason, TableError)
        assert receiver.call(table) == {"written-by-receiver": True}
    finally:
        receiver.stop()


def test_only_the_owner_may_give_away_or_set_heir() -> None:
    owner = Owner.start()
    try:
        table = owner.call(("table",))
        with pytest.raises(NotInProcess):
            new_table("outside")
        with pytest.raises(TableError, match="only the owner"):
            give_away(table, owner)
        with pytest.raises(TableError, match="only the owner"):
            set_heir(table, None)
    finally:
        owner.stop()


def test_set_heir_changes_who_inherits() -> None:
    trace = Trace()
    heir = Receiver.start(trace)
    owner = Owner.start()
    try:
        owner.call(("heir", heir))
        table = owner.call(("table",))
        faults.kill(owner)
        (transfer,) = trace.wait_for(lambda items: len(items) == 1)
        assert transfer.data == "new heir data" and not table.deleted
    finally:
        heir.stop()


def test_supervised_owner_gets_its_table_back_from_the_keeper_after_crashes() -> None:
    """The pattern MemoryStore uses: rest_for_one, keeper first, owner claims in init."""
    keeper = Handle.named("keeper")
    sup = Supervisor.start_link(
        [
            ChildSpec("keeper", start=lambda: TableKeeper.start_link(name="keeper")),
            ChildSpec("owner", start=lambda: Owner.start_link("data", keeper, keeper)),
        ],
        strategy="rest_for_one",
        intensity=100,
    )
    try:
        for i in range(20):
            owner = sup.child("owner")
            assert owner is not None
            owner.call(("put", i, i * i))
            faults.kill(owner)
            sup.sync()
        owner = sup.child("owner")
        assert owner is not None
        assert owner.call(("adopted",)) is True
        table = owner.call(("table",))
        assert dict(table.items()) == {i: i * i for i in range(20)}
    finally:
        sup.stop()


def test_keeper_rejects_requests_it_does_not_understand_without_crashing() -> None:
    keeper = TableKeeper.start()
    try:
        with pytest.raises(ValueError, match="does not understand"):
            keeper.call("nonsense")
        assert keeper.call(("held", None)) == []
    finally:
        keeper.stop()


def test_owner_writes_while_readers_read_concurrently() -> None:
    owner = Owner.start()
    table = owner.call(("table",))
    stop = threading.Event()
    seen_max: list[int] = []

    def reader() -> None:
        best = -1
        while not stop.is_set():
            value = table.get("n", -1)
            assert value >= best  # a reader never sees the counter go back
            best = value
            stop.wait(0.0001)  # pacing, not synchronisation: spinning readers starve the owner
        seen_max.append(best)

    readers = [threading.Thread(target=reader) for _ in range(4)]
    for thread in readers:
        thread.start()
    for n in range(300):
        owner.call(("put", "n", n))
    stop.set()
    for thread in readers:
        thread.join(WAIT)
    owner.stop()
    assert len(seen_max) == 4 and max(seen_max) <= 299
