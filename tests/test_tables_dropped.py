"""Where a table still dies with its owner, as in ETS: when nobody is left to keep it.

An owner with no supervisor; a child deleted for good (temporary, delete_child, a
simple_one_for_one child not restarted, or that supervisor restarting); the root stopping
or giving up.
"""

from __future__ import annotations

from typing import Any

from otpmem.actors import SHUTDOWN, GenServer, faults
from otpmem.stores import MemoryStore
from otpmem.supervisors import ChildSpec, Supervisor, SupervisorHandle
from tests.support import WAIT, Holder, child_at, holder_spec, sup_spec


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


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
        table = child_at(sup, "t").call(("table",))
        faults.kill(child_at(sup, "t"))
        sup.sync()
        assert table.deleted
    finally:
        sup.stop()


def test_delete_child_drops_the_tables_kept_for_it() -> None:
    sup = Supervisor.start_link([holder_spec("d")])
    try:
        table = child_at(sup, "d").call(("table",))
        sup.terminate_child("d")
        assert not table.deleted
        sup.delete_child("d")
        assert table.deleted
        sup.start_child(holder_spec("d"))  # the same id again starts from nothing
        assert child_at(sup, "d").call(("adopted",)) is False
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


def test_a_restarted_simple_one_for_one_supervisor_gives_old_tables_to_no_new_child() -> None:
    dynamic = [ChildSpec("dyn", start=Holder.start_link)]
    root = Supervisor.start_link(
        [sup_spec("agents", dynamic, strategy="simple_one_for_one", intensity=0)], intensity=2
    )
    try:
        agents = child_at(root, "agents")
        assert isinstance(agents, SupervisorHandle)
        first = agents.start_child(("same-name",))
        assert first is not None
        table = first.call(("table",))
        faults.kill(first)  # agents gives up; root restarts it, without its children
        agents.wait(WAIT)
        root.sync()
        assert table.deleted
        agents = child_at(root, "agents")
        assert isinstance(agents, SupervisorHandle)
        second = agents.start_child(("same-name",))
        assert second is not None and second.call(("adopted",)) is False
    finally:
        root.stop()


def test_a_root_supervisor_stopped_normally_deletes_every_table_it_kept() -> None:
    root = Supervisor.start_link([sup_spec("sub", [holder_spec("w")]), holder_spec("v")])
    worker_table = child_at(root, "sub", "w").call(("table",))
    root.terminate_child("sub")  # kept by the root now
    other_table = child_at(root, "v").call(("table",))
    assert not worker_table.deleted
    root.stop()
    assert worker_table.deleted and other_table.deleted


def test_a_root_supervisor_that_gives_up_deletes_the_tables() -> None:
    root = Supervisor.start_link([holder_spec("w")], intensity=0)
    table = child_at(root, "w").call(("table",))
    faults.kill(child_at(root, "w"))
    assert root.wait(WAIT) == SHUTDOWN
    assert table.deleted
