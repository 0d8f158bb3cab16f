"""The malformed requests issue 28 (part 6) measured, each refused with the server alive.

Before: a supervisor's child lookup ran the caller's ``__eq__`` (a numpy array, or one that
raises, crashed the supervisor with its subtree, the application's root included), a child
exiting with such a reason crashed its supervisor, and raw calls crashed ``RecallIndex``
(``("forget", None)``, ``("lexical", None, ...)``), ``Agent`` (``("add_message",)``) and
``LevelDBStore`` (a first element whose ``__hash__`` raises).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import otpmem
from otpmem.actors import Exit, Handle, Pid, is_normal_exit, is_shutdown
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory.recall import FilterFailed, RecallIndex
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore, MemoryStore
from otpmem.supervisors import (
    ChildNotFound,
    ChildSpec,
    InvalidChildSpec,
    SimpleOneForOneOnly,
    Supervisor,
    SupervisorError,
    SupervisorHandle,
)
from tests.garbage_support import (
    DEEP_LIST,
    RaisingBool,
    RaisingEq,
    RaisingHash,
    RaisingRepr,
    RaisingStr,
    RaisingTuple,
)
from tests.support import WAIT, Worker, worker_spec

MISBEHAVING_IDS: list[Any] = [
    np.array([1, 2]),
    RaisingEq(),
    RaisingBool(),
    RaisingHash(),
    RaisingRepr(),
    RaisingStr("a"),
    RaisingTuple(("a",)),
    [1, 2],
    DEEP_LIST,
]
MISBEHAVING_NAMES = ["array", "eq", "bool", "hash", "repr", "str", "tuple", "list", "deep"]


class SameHashRaisingEq:
    """Every instance hashes alike and compares by raising: a lookup must compare them."""

    def __hash__(self) -> int:
        return 7

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("this id's __eq__ raises")


@pytest.fixture
def sup() -> Iterator[SupervisorHandle]:
    handle = Supervisor.start_link([worker_spec("a"), worker_spec("b")])
    yield handle
    if handle.alive:
        handle.stop()


def rows(sup: SupervisorHandle) -> list[tuple[Any, Any]]:
    return [(info.id, info.pid) for info in sup.which_children()]


# -- the application's root --------------------------------------------------------------------


@pytest.mark.parametrize("child", MISBEHAVING_IDS, ids=MISBEHAVING_NAMES)
def test_the_app_root_refuses_a_misbehaving_child_id_and_keeps_its_store_and_agents(
    child: Any,
) -> None:
    with otpmem.running() as root:
        store = otpmem.default_store()
        store.add("kept", [{"role": "user", "content": "hi"}])
        agent = otpmem.start_agent(llm=ScriptedModel(["one", "two"]), conversation_id="garbage")
        agent.run("first")
        before = rows(root)
        for admin in (root.terminate_child, root.restart_child, root.delete_child):
            with pytest.raises(ChildNotFound):
                admin(child)
        with pytest.raises(ChildNotFound):
            root.get_childspec(child)
        assert rows(root) == before
        assert store.get("kept") == [{"role": "user", "content": "hi"}]
        assert agent.run("second").content == "two"


# -- child lookup ------------------------------------------------------------------------------


def test_children_whose_ids_misbehave_are_found_by_themselves_and_never_compared(
    sup: SupervisorHandle,
) -> None:
    odd = [RaisingEq(), RaisingBool(), SameHashRaisingEq(), SameHashRaisingEq()]
    for child_id in odd:
        sup.start_child(ChildSpec(child_id, start=lambda: Worker.start_link()))
    assert [info.id for info in sup.which_children()] == ["a", "b", *odd]
    with pytest.raises(ChildNotFound):
        sup.terminate_child(SameHashRaisingEq())  # equal hash, but its == raises: another id
    sup.terminate_child("a")
    assert sup.restart_child("a") is not None
    for child_id in odd:
        sup.terminate_child(child_id)
        sup.delete_child(child_id)
    assert [info.id for info in sup.which_children()] == ["a", "b"]
    assert sup.child("b") is not None and sup.child(RaisingEq()) is None


def test_a_spec_list_whose_ids_cannot_be_told_apart_is_refused_naming_the_id() -> None:
    specs = [ChildSpec(SameHashRaisingEq(), start=Worker.start_link) for _ in range(2)]
    with pytest.raises(InvalidChildSpec) as raised:
        Supervisor.start_link(specs)
    assert raised.value.field == "id"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("id", RaisingHash()),
        ("restart", RaisingStr("permanent")),
        ("restart", RaisingEq()),
        ("type", np.array(["worker"])),
        ("shutdown", RaisingEq()),
        ("significant", np.bool_(True)),
    ],
    ids=["id hash", "restart str", "restart eq", "type array", "shutdown eq", "numpy bool"],
)
def test_a_child_spec_field_that_misbehaves_is_refused_naming_it(field: str, value: Any) -> None:
    fields: dict[str, Any] = {"id": "x", "start": Worker.start_link, field: value}
    with pytest.raises(InvalidChildSpec) as raised:
        ChildSpec(**fields)
    assert raised.value.field == field


def test_simple_one_for_one_refuses_garbage_arguments_and_ids() -> None:
    sup = Supervisor.start_link(
        [ChildSpec("w", start=lambda tag: Worker.start_link(tag))], strategy="simple_one_for_one"
    )
    try:
        kept = sup.start_child(("one",))
        with pytest.raises(InvalidChildSpec):
            sup.start_child(RaisingTuple(("two",)))
        for child in [np.array([1]), RaisingEq(), RaisingHash(), "w"]:
            with pytest.raises(SimpleOneForOneOnly):
                sup.terminate_child(child)
        assert [info.handle for info in sup.which_children()] == [kept]
        assert sup.count_children().active == 1
    finally:
        sup.stop()


@pytest.mark.parametrize("listener", [RaisingEq(), np.array([1]), RaisingBool(), RaisingHash()])
def test_unsubscribing_garbage_is_a_no_op_and_listeners_still_come_and_go(
    sup: SupervisorHandle, listener: Any
) -> None:
    heard: list[str] = []

    class Ears:
        def hear(self, event: Any) -> None:
            heard.append(event.kind)

    ears = Ears()
    sup.subscribe(ears.hear)
    sup.unsubscribe(listener)
    sup.terminate_child("a")
    sup.unsubscribe(ears.hear)  # a new bound method each time: found by equality
    sup.restart_child("a")
    assert heard == ["terminated"]


# -- exit reasons ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reason", [np.array([1, 2]), RaisingEq(), RaisingBool(), RaisingRepr(), DEEP_LIST]
)
@pytest.mark.parametrize("restart", ["permanent", "transient", "temporary"])
def test_a_child_exiting_with_a_garbage_reason_is_handled_by_its_restart_type(
    reason: Any, restart: str
) -> None:
    sup = Supervisor.start_link([worker_spec("w", restart=restart), worker_spec("kept")])
    try:
        child = sup.child("w")
        assert child is not None
        old = child.pid
        child.cast(("stop", reason))  # Worker: Stop(reason)
        child.wait(WAIT)
        sup.sync()
        assert sup.alive
        ids = [info.id for info in sup.which_children()]
        if restart == "temporary":
            assert ids == ["kept"]
        else:  # an abnormal reason: restarted, as any crash
            restarted = sup.child("w")
            assert restarted is not None and restarted.pid != old
    finally:
        sup.stop()


def test_garbage_is_no_normal_exit_and_no_shutdown() -> None:
    for reason in [np.array(["normal"]), RaisingEq(), RaisingBool(), RaisingStr("normal")]:
        assert not is_normal_exit(reason)
        assert not is_shutdown((reason, "x"))
    assert is_normal_exit("normal") and is_shutdown(("shutdown", np.array([1])))


@pytest.mark.parametrize("pid", [RaisingHash(), np.array([1]), RaisingEq(), "x", 10**100])
def test_a_forged_exit_of_garbage_is_ignored_by_a_supervisor(
    sup: SupervisorHandle, pid: Any
) -> None:
    before = rows(sup)
    sup.send(Exit(pid, RaisingEq()))
    sup.sync()
    assert sup.alive and rows(sup) == before
    sup.send(Exit(Pid(10**12), "shutdown"))  # a pid of no child: a stale exit
    sup.sync()
    assert rows(sup) == before


# -- the raw calls measured --------------------------------------------------------------------


def test_recall_index_refuses_the_measured_raw_calls_and_serves_on() -> None:
    store = MemoryStore.start_link()
    store.add(Conv("ann", "c"), [{"role": "user", "content": "peanuts"}])
    index = RecallIndex.start_link(store)
    try:
        pid = index.pid
        for request in [
            ("forget", None),
            ("lexical", None, None, "q"),
            ("lexical", None, None, None, 5),
            ("substring", None, None, 5, 5),
            ("group", "c", None),
            ("relevant", "bob", Conv("ann", "c"), "peanuts", 5, 0.0, None, True),  # a tenant
            ("relevant", None, None, "q", 5, 0.0, "not callable", True),
            (RaisingHash(),),
            RaisingTuple(("stats",)),
        ]:
            with pytest.raises((ValueError, TypeError)):
                index.call(request)
        assert index.pid == pid
        assert index.get_relevant("peanuts", user_id="ann")[0].message["content"] == "peanuts"
    finally:
        index.stop()
        store.stop()


@pytest.mark.parametrize(
    "keep",
    [
        lambda message: 1 / 0,
        lambda message: np.array([True, False]),
        lambda message: RaisingBool(),
    ],
    ids=["raises", "array", "bool raises"],
)
def test_a_filter_that_misbehaves_in_the_index_is_the_callers_error(keep: Any) -> None:
    store = MemoryStore.start_link()
    store.add(Conv("ann", "c"), [{"role": "user", "content": "peanuts"}])
    index = RecallIndex.start_link(store)
    try:
        pid = index.pid
        with pytest.raises(FilterFailed, match="the filter raised"):
            index.get_relevant("peanuts", user_id="ann", filter=keep)
        with pytest.raises(ValueError, match=r"filter\.topic"):
            index.get_relevant("peanuts", user_id="ann", filter={"topic": RaisingEq()})
        assert index.pid == pid
        assert len(index.get_relevant("peanuts", user_id="ann")) == 1
    finally:
        index.stop()
        store.stop()


def test_agent_refuses_add_message_without_its_message() -> None:
    store = MemoryStore.start_link()
    agent = Agent.start_link(llm=ScriptedModel(["hi"]), memory={"store": store})
    try:
        pid = agent.pid
        for request in [("add_message",), ("add_message", {"role": RaisingEq(), "content": "x"})]:
            with pytest.raises(ValueError):
                agent.call(request)
        assert agent.pid == pid
        assert agent.run("hello").content == "hi"
    finally:
        agent.stop()
        store.stop()


@pytest.mark.parametrize("kind", ["memory", "leveldb"])
def test_a_store_refuses_a_request_whose_first_element_misbehaves(
    kind: str, tmp_path: Path
) -> None:
    store: Any = (
        MemoryStore.start_link() if kind == "memory" else LevelDBStore.start_link(tmp_path / "db")
    )
    try:
        store.add("kept", [{"role": "user", "content": "hi"}])
        pid = store.pid
        for first in [RaisingHash(), RaisingEq(), RaisingBool(), RaisingStr("add"), np.array([1])]:
            for request in [(first,), (first, "kept"), (first, "kept", [])]:
                with pytest.raises(ValueError, match="does not understand"):
                    store.call(request)
                with pytest.raises(ValueError, match="does not understand"):
                    Handle(store.resolve()).call(request)
                store.send(request)  # its own messages are compared as exact types too
        store.call(("adopted",) if kind == "memory" else ("flush",))
        assert store.pid == pid
        assert store.get("kept") == [{"role": "user", "content": "hi"}]
    finally:
        store.stop()


def test_a_refusal_names_the_request_without_running_its_repr() -> None:
    sup = Supervisor.start_link([])
    try:
        with pytest.raises(SupervisorError, match="RaisingRepr"):
            sup.call((RaisingRepr(),))
    finally:
        sup.stop()
