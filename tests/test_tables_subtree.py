"""Supervisors are the default heirs of their children's tables, up to the root.

A table with no live heir of its own is kept by its owner's supervisor when the owner
exits, and the child restarted under the same id adopts it in ``new_table``. When a
supervisor exits, what it keeps goes to its own supervisor and comes back down when the
subtree restarts. Unsupervised, or once the child is deleted for good, or when the root
itself stops, a table dies with its owner, as in ETS.
"""

from __future__ import annotations

from typing import Any

import pytest

from otpmem.actors import (
    SHUTDOWN,
    GenServer,
    Handle,
    Stop,
    Table,
    TableKeeper,
    faults,
    new_table,
)
from otpmem.actors.faults import InjectedCrash
from otpmem.stores import MemoryStore
from otpmem.supervisors import ChildSpec, Supervisor, SupervisorHandle
from tests.support import WAIT, Trace


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


class Holder(GenServer):
    """Creates (or adopts) table ``name`` in init.

    Calls: ("put", k, v); ("table",); ("adopted",); ("stop", reason).
    """

    def init(self, name: str = "held", heir: Handle | None = None) -> None:
        self.table: Table[Any, Any] = new_table(name, heir=heir)

    def handle_call(self, message: Any) -> Any:
        kind, *args = message
        if kind == "put":
            self.table[args[0]] = args[1]
            return None
        if kind == "table":
            return self.table
        if kind == "adopted":
            return self.table.adopted
        if kind == "stop":
            return Stop(args[0])
        raise ValueError(message)


class AdoptThenFail(GenServer):
    """Adopts its table, then fails its init while ``failures`` has entries left."""

    def init(self, failures: list[str]) -> None:
        self.table: Table[Any, Any] = new_table("fragile")
        if failures:
            failures.pop()
            raise InjectedCrash("init fails after adopting")


def holder_spec(child_id: str, name: str | None = None, **kwargs: Any) -> ChildSpec:
    return ChildSpec(child_id, start=lambda: Holder.start_link(name or child_id), **kwargs)


def sup_spec(child_id: str, children: list[ChildSpec], **flags: Any) -> ChildSpec:
    return ChildSpec(
        child_id, start=lambda: Supervisor.start_link(children, **flags), type="supervisor"
    )


def child(sup: SupervisorHandle, *path: str) -> Handle:
    """The running child at ``path`` below ``sup``."""
    handle: Handle | None = sup
    for child_id in path:
        assert isinstance(handle, SupervisorHandle)
        handle = handle.child(child_id)
        assert handle is not None, f"{child_id!r} is not running"
    assert handle is not None
    return handle


# -- kept and adopted -------------------------------------------------------------------------


def test_a_store_under_a_plain_child_spec_keeps_its_table_across_kills() -> None:
    sup = Supervisor.start_link(
        [ChildSpec("store", start=lambda: MemoryStore.start_link(name="plain-store"))],
        intensity=10,
    )
    store = MemoryStore.named("plain-store")
    try:
        for i in range(3):
            store.add("c", [msg(f"before kill {i}")])
            faults.kill(store)
            sup.sync()
            assert store.call(("adopted",)) is True
        assert store.get("c") == [msg(f"before kill {i}") for i in range(3)]
        store.add("c", [msg("after")])
        assert store.count("c") == 4
    finally:
        sup.stop()


def test_a_first_start_creates_a_fresh_table_and_says_it_did_not_adopt() -> None:
    sup = Supervisor.start_link(
        [ChildSpec("store", start=lambda: MemoryStore.start_link(name="fresh-store"))]
    )
    try:
        assert MemoryStore.named("fresh-store").call(("adopted",)) is False
    finally:
        sup.stop()


def test_while_the_child_restarts_its_table_is_owned_by_the_supervisor() -> None:
    sup = Supervisor.start_link([holder_spec("h", restart="transient")])
    try:
        holder = child(sup, "h")
        holder.call(("put", "k", "v"))
        table = holder.call(("table",))
        holder.call(("stop", "normal"))  # transient, normal exit: kept, not restarted
        sup.sync()
        assert not table.deleted and table.owner is not None and table.owner.pid == sup.pid
        assert table["k"] == "v"
        restarted = sup.restart_child("h")
        assert restarted is not None
        assert restarted.call(("adopted",)) is True and restarted.call(("table",)) is table
    finally:
        sup.stop()


@pytest.mark.parametrize("strategy", ["rest_for_one", "one_for_all"])
def test_bystanders_stopped_by_the_strategy_get_their_tables_back(strategy: str) -> None:
    sup = Supervisor.start_link(
        [holder_spec("a"), holder_spec("b"), holder_spec("c")], strategy=strategy, intensity=5
    )
    try:
        tables = {}
        for child_id in "abc":
            holder = child(sup, child_id)
            holder.call(("put", child_id, child_id.upper()))
            tables[child_id] = holder.call(("table",))
        faults.kill(child(sup, "a"))
        sup.sync()
        for child_id in "abc":
            holder = child(sup, child_id)
            assert holder.call(("adopted",)) is True, child_id
            assert holder.call(("table",)) is tables[child_id]
            assert tables[child_id][child_id] == child_id.upper()
    finally:
        sup.stop()


def test_a_table_whose_explicit_heir_is_gone_falls_back_to_the_supervisor() -> None:
    heir = TableKeeper.start()
    heir.stop()
    sup = Supervisor.start_link([ChildSpec("h", start=lambda: Holder.start_link("x", heir))])
    try:
        holder = child(sup, "h")
        holder.call(("put", "k", 1))
        table = holder.call(("table",))
        faults.kill(holder)
        sup.sync()
        assert child(sup, "h").call(("adopted",)) is True and table["k"] == 1
    finally:
        sup.stop()


def test_a_live_explicit_heir_still_inherits_before_the_supervisor() -> None:
    sup = Supervisor.start_link(
        [
            ChildSpec("keeper", start=lambda: TableKeeper.start_link(name="explicit-heir")),
            ChildSpec("h", start=lambda: Holder.start_link("y", Handle.named("explicit-heir"))),
        ]
    )
    try:
        table = child(sup, "h").call(("table",))
        faults.kill(child(sup, "h"))
        sup.sync()
        assert child(sup, "keeper").call(("held", None)) == ["y"]
        assert table.owner is not None and table.owner.pid == child(sup, "keeper").pid
        assert child(sup, "h").call(("adopted",)) is False  # it never asked the keeper
    finally:
        sup.stop()


def test_an_init_that_fails_after_adopting_gives_the_table_back_for_the_next_attempt() -> None:
    failures: list[str] = []
    events = Trace()
    sup = Supervisor.start_link(
        [ChildSpec("f", start=lambda: AdoptThenFail.start_link(failures))],
        intensity=10,
        listeners=[events],
    )
    try:
        table = child(sup, "f").resolve().server.table  # type: ignore[attr-defined]
        failures.extend(["fail", "fail"])
        faults.kill(child(sup, "f"))
        events.wait_kind("start_failed", 2)
        events.wait_kind("restarted", 1)
        sup.sync()
        assert child(sup, "f").resolve().server.table is table  # type: ignore[attr-defined]
        assert table.adopted and not table.deleted
    finally:
        sup.stop()


# -- up the tree and back down ----------------------------------------------------------------


def test_a_store_killed_past_its_pair_supervisors_intensity_keeps_its_data() -> None:
    events = Trace()
    root = Supervisor.start_link(
        [MemoryStore.child_spec("nested-store", "pair", intensity=2, period=60.0)],
        intensity=5,
        listeners=[events],
    )
    store = MemoryStore.named("nested-store")
    try:
        first_pair = child(root, "pair").pid
        for i in range(3):  # the third kill is one restart too many for the pair
            store.add("c", [msg(f"acked {i}")])
            faults.kill(store)
            root.sync_tree()
        assert [e.child_id for e in events.kinds("restarted")] == ["pair"]
        assert child(root, "pair").pid != first_pair
        assert store.call(("adopted",)) is True
        assert store.get("c") == [msg(f"acked {i}") for i in range(3)]
    finally:
        root.stop()


def test_a_worker_table_travels_up_two_supervisors_and_comes_back_down() -> None:
    events = Trace()
    root = Supervisor.start_link(
        [sup_spec("mid", [sup_spec("inner", [holder_spec("w")], intensity=0)], intensity=0)],
        intensity=1,
        listeners=[events],
    )
    try:
        worker = child(root, "mid", "inner", "w")
        worker.call(("put", "k", "survives"))
        table = worker.call(("table",))
        faults.kill(worker)
        root.sync_tree()  # inner gives up, mid gives up, the root restarts mid
        assert [e.child_id for e in events.kinds("restarted")] == ["mid"]
        worker = child(root, "mid", "inner", "w")
        assert worker.call(("adopted",)) is True
        assert worker.call(("table",)) is table and table["k"] == "survives"
    finally:
        root.stop()


def test_a_terminated_sub_supervisor_hands_its_kept_tables_back_on_restart_child() -> None:
    root = Supervisor.start_link([sup_spec("sub", [holder_spec("w")])])
    try:
        worker = child(root, "sub", "w")
        worker.call(("put", "k", 1))
        table = worker.call(("table",))
        root.terminate_child("sub")
        assert not table.deleted and table.owner is not None and table.owner.pid == root.pid
        root.restart_child("sub")
        assert child(root, "sub", "w").call(("table",)) is table
    finally:
        root.stop()


# -- where tables die -------------------------------------------------------------------------


def test_an_unsupervised_store_loses_its_table_when_killed() -> None:
    store = MemoryStore.start_link()
    store.add("c", [msg("gone")])
    table = store.resolve().server.table  # type: ignore[attr-defined]
    faults.kill(store)
    assert table.deleted


class Starter(GenServer):
    """A plain server (not a supervisor) that starts a Holder linked to itself."""

    trap_exits = True

    def init(self) -> None:
        self.holder = Holder.start_link("under-a-plain-server")

    def handle_call(self, message: Any) -> Any:
        return self.holder

    def handle_info(self, message: Any) -> Any:
        return None


def test_a_table_owned_under_a_plain_server_dies_with_its_owner() -> None:
    starter = Starter.start()
    try:
        holder = starter.call("holder")
        table = holder.call(("table",))
        faults.kill(holder)
        assert table.deleted
    finally:
        starter.stop()


def test_a_temporary_child_that_exits_takes_its_table_with_it() -> None:
    sup = Supervisor.start_link([holder_spec("t", restart="temporary")])
    try:
        table = child(sup, "t").call(("table",))
        faults.kill(child(sup, "t"))
        sup.sync()
        assert table.deleted
    finally:
        sup.stop()


def test_delete_child_drops_the_tables_kept_for_it() -> None:
    sup = Supervisor.start_link([holder_spec("d")])
    try:
        table = child(sup, "d").call(("table",))
        sup.terminate_child("d")
        assert not table.deleted
        sup.delete_child("d")
        assert table.deleted
        sup.start_child(holder_spec("d"))  # the same id again starts from nothing
        assert child(sup, "d").call(("adopted",)) is False
    finally:
        sup.stop()


def test_a_simple_one_for_one_child_that_is_not_restarted_takes_its_table_with_it() -> None:
    sup = Supervisor.start_link(
        [ChildSpec("dyn", start=Holder.start_link, restart="transient")],
        strategy="simple_one_for_one",
    )
    try:
        holder = sup.start_child(("dyn-table",))
        assert holder is not None
        table = holder.call(("table",))
        holder.call(("stop", "normal"))
        sup.sync()
        assert table.deleted
    finally:
        sup.stop()


def test_a_simple_one_for_one_child_that_is_restarted_adopts_its_table() -> None:
    sup = Supervisor.start_link(
        [ChildSpec("dyn", start=Holder.start_link)], strategy="simple_one_for_one", intensity=3
    )
    try:
        holder = sup.start_child(("dyn-kept",))
        assert holder is not None
        holder.call(("put", "k", 1))
        table = holder.call(("table",))
        faults.kill(holder)
        sup.sync()
        (info,) = sup.which_children()
        assert info.handle is not None and info.handle.call(("table",)) is table
        assert info.handle.call(("adopted",)) is True
    finally:
        sup.stop()


def test_a_restarted_simple_one_for_one_supervisor_gives_old_tables_to_no_new_child() -> None:
    dynamic = [ChildSpec("dyn", start=Holder.start_link)]
    root = Supervisor.start_link(
        [sup_spec("agents", dynamic, strategy="simple_one_for_one", intensity=0)], intensity=2
    )
    try:
        agents = child(root, "agents")
        assert isinstance(agents, SupervisorHandle)
        first = agents.start_child(("same-name",))
        assert first is not None
        table = first.call(("table",))
        faults.kill(first)  # agents gives up; root restarts it, without its children
        agents.wait(WAIT)
        root.sync()
        assert table.deleted
        agents = child(root, "agents")
        assert isinstance(agents, SupervisorHandle)
        second = agents.start_child(("same-name",))
        assert second is not None and second.call(("adopted",)) is False
    finally:
        root.stop()


def test_a_root_supervisor_stopped_normally_deletes_every_table_it_kept() -> None:
    root = Supervisor.start_link([sup_spec("sub", [holder_spec("w")]), holder_spec("v")])
    worker_table = child(root, "sub", "w").call(("table",))
    root.terminate_child("sub")  # kept by the root now
    other_table = child(root, "v").call(("table",))
    assert not worker_table.deleted
    root.stop()
    assert worker_table.deleted and other_table.deleted


def test_a_root_supervisor_that_gives_up_deletes_the_tables() -> None:
    root = Supervisor.start_link([holder_spec("w")], intensity=0)
    table = child(root, "w").call(("table",))
    faults.kill(child(root, "w"))
    assert root.wait(WAIT) == SHUTDOWN
    assert table.deleted


def test_a_killed_supervisor_passes_up_what_it_kept_but_not_what_its_children_own() -> None:
    root = Supervisor.start_link(
        [sup_spec("sub", [holder_spec("stopped", restart="transient"), holder_spec("running")])]
    )
    try:
        stopped = child(root, "sub", "stopped")
        kept = stopped.call(("table",))
        stopped.call(("stop", "normal"))  # now kept by "sub"
        running = child(root, "sub", "running")
        owned = running.call(("table",))
        faults.kill(child(root, "sub"))
        root.sync()
        assert child(root, "sub", "stopped").call(("table",)) is kept
        # "running" dies of its supervisor's exit signal, after that supervisor has gone:
        # nobody is left to keep its table, as with an ETS heir that died first.
        assert running.wait(WAIT) == "killed"
        assert owned.deleted
    finally:
        root.stop()
