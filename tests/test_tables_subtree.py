"""Supervisors are the default heirs of their children's tables, up to the root.

A table with no live heir of its own is kept by its owner's supervisor when the owner
exits, and the child restarted under the same id adopts it in ``new_table``. When a
supervisor exits, what it keeps goes to its own supervisor and comes back down when the
subtree restarts (tests/test_tables_dropped.py: where a table still dies).
"""

from __future__ import annotations

from typing import Any

import pytest

from otpmem.actors import GenServer, Handle, Table, TableKeeper, faults, new_table
from otpmem.actors.faults import InjectedCrash
from otpmem.stores import MemoryStore
from otpmem.supervisors import ChildSpec, Supervisor
from tests.support import Holder, Trace, child_at, holder_spec, sup_spec


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


class AdoptThenFail(GenServer):
    """Adopts its table, then fails its init while ``failures`` has entries left."""

    def init(self, failures: list[str]) -> None:
        self.table: Table[Any, Any] = new_table("fragile")
        if failures:
            failures.pop()
            raise InjectedCrash("init fails after adopting")


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
        holder = child_at(sup, "h")
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
            holder = child_at(sup, child_id)
            holder.call(("put", child_id, child_id.upper()))
            tables[child_id] = holder.call(("table",))
        faults.kill(child_at(sup, "a"))
        sup.sync()
        for child_id in "abc":
            holder = child_at(sup, child_id)
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
        holder = child_at(sup, "h")
        holder.call(("put", "k", 1))
        table = holder.call(("table",))
        faults.kill(holder)
        sup.sync()
        assert child_at(sup, "h").call(("adopted",)) is True and table["k"] == 1
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
        table = child_at(sup, "h").call(("table",))
        faults.kill(child_at(sup, "h"))
        sup.sync()
        assert child_at(sup, "keeper").call(("held", None)) == ["y"]
        assert table.owner is not None and table.owner.pid == child_at(sup, "keeper").pid
        assert child_at(sup, "h").call(("adopted",)) is False  # it never asked the keeper
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
        table = child_at(sup, "f").resolve().server.table  # type: ignore[attr-defined]
        failures.extend(["fail", "fail"])
        faults.kill(child_at(sup, "f"))
        events.wait_kind("start_failed", 2)
        events.wait_kind("restarted", 1)
        sup.sync()
        assert child_at(sup, "f").resolve().server.table is table  # type: ignore[attr-defined]
        assert table.adopted and not table.deleted
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
        first_pair = child_at(root, "pair").pid
        for i in range(3):  # the third kill is one restart too many for the pair
            store.add("c", [msg(f"acked {i}")])
            faults.kill(store)
            root.sync_tree()
        assert [e.child_id for e in events.kinds("restarted")] == ["pair"]
        assert child_at(root, "pair").pid != first_pair
        assert store.call(("adopted",)) is True
        assert store.get("c") == [msg(f"acked {i}") for i in range(3)]
    finally:
        root.stop()


def test_a_keeper_crash_in_the_store_pair_loses_no_data() -> None:
    sup = Supervisor.start_link([MemoryStore.child_spec("kept-by-the-pair", "pair")])
    store = MemoryStore.named("kept-by-the-pair")
    try:
        store.add("c", [msg("acked")])
        pair = child_at(sup, "pair")
        faults.kill(child_at(sup, "pair", "keeper"))  # rest_for_one: the store restarts too
        sup.sync_tree()
        assert child_at(sup, "pair").pid == pair.pid
        assert store.call(("adopted",)) is True
        assert store.get("c") == [msg("acked")]
    finally:
        sup.stop()


def test_a_worker_table_travels_up_two_supervisors_and_comes_back_down() -> None:
    events = Trace()
    root = Supervisor.start_link(
        [sup_spec("mid", [sup_spec("inner", [holder_spec("w")], intensity=0)], intensity=0)],
        intensity=1,
        listeners=[events],
    )
    try:
        worker = child_at(root, "mid", "inner", "w")
        worker.call(("put", "k", "survives"))
        table = worker.call(("table",))
        faults.kill(worker)
        root.sync_tree()  # inner gives up, mid gives up, the root restarts mid
        assert [e.child_id for e in events.kinds("restarted")] == ["mid"]
        worker = child_at(root, "mid", "inner", "w")
        assert worker.call(("adopted",)) is True
        assert worker.call(("table",)) is table and table["k"] == "survives"
    finally:
        root.stop()


def test_a_terminated_sub_supervisor_hands_its_kept_tables_back_on_restart_child() -> None:
    root = Supervisor.start_link([sup_spec("sub", [holder_spec("w")])])
    try:
        worker = child_at(root, "sub", "w")
        worker.call(("put", "k", 1))
        table = worker.call(("table",))
        root.terminate_child("sub")
        assert not table.deleted and table.owner is not None and table.owner.pid == root.pid
        root.restart_child("sub")
        assert child_at(root, "sub", "w").call(("table",)) is table
    finally:
        root.stop()


def test_a_killed_supervisor_passes_up_what_it_kept_and_what_its_children_own() -> None:
    """A killed supervisor kills its running children in its own exit path, so their tables
    reach it while it can still keep them, and the restarted subtree gets both back."""
    root = Supervisor.start_link(
        [sup_spec("sub", [holder_spec("stopped", restart="transient"), holder_spec("running")])]
    )
    try:
        stopped = child_at(root, "sub", "stopped")
        kept = stopped.call(("table",))
        stopped.call(("stop", "normal"))  # now kept by "sub"
        running = child_at(root, "sub", "running")
        owned = running.call(("table",))
        running.call(("put", "k", "v"))
        faults.kill(child_at(root, "sub"))
        # Dead before anyone heard of its supervisor's death, so before the restart.
        assert running.exit_reason == "killed"
        root.sync()
        assert child_at(root, "sub", "stopped").call(("table",)) is kept
        again = child_at(root, "sub", "running")
        assert again.call(("table",)) is owned
        assert again.call(("adopted",)) is True
        assert owned["k"] == "v"
    finally:
        root.stop()
