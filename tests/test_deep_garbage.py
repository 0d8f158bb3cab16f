"""Deeply nested garbage never kills a server that promised to refuse it (issue 9, part 4).

A value nested ~1,000 levels deep is what a fuzzer or a hostile caller sends first: its
``repr`` and any unbounded recursion over it raise RecursionError, which no server declares
as a caller error. Each server here must answer such a request with its documented error,
short enough to read, and go on serving with its data (or children) intact.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from otpmem.actors import (
    GenServer,
    Handle,
    InitFailed,
    ServerExited,
    Stop,
    Table,
    TableKeeper,
    claim_table,
    faults,
    new_table,
)
from otpmem.actors.faults import FaultPlan, InjectedCrash
from otpmem.messages import SHORT_REPR_MAX, Conv, InvalidMessage, short_repr
from otpmem.stores import LevelDBStore, MemoryStore
from otpmem.supervisors import (
    ChildSpec,
    InvalidChildSpec,
    Supervisor,
    SupervisorError,
    SupervisorHandle,
)
from tests.support import WAIT, Worker, worker_spec

DEPTH = 990
"""Deep enough that repr() of it exceeds Python's default recursion limit from a thread."""

LONGEST_ERROR = 1_000
"""An error describing garbage stays readable: a bounded repr, never the whole value."""


def nested_list(depth: int = DEPTH) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def nested_dict(depth: int = DEPTH) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = {"k": value}
    return value


def nested_tuple(depth: int = DEPTH) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = (value,)
    return value


DEEP_LIST, DEEP_DICT, DEEP_TUPLE = nested_list(), nested_dict(), nested_tuple()


def msg(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def refused(handle: Handle, request: Any, expected: tuple[type[BaseException], ...]) -> str:
    """Call ``handle`` with ``request``; assert the documented refusal, return its text."""
    try:
        outcome: object = handle.call(request, timeout=WAIT)
    except Exception as exc:
        outcome = exc
    assert handle.alive, f"the server died: {handle.exit_reason!r}"
    assert isinstance(outcome, expected), f"answered {type(outcome).__name__}: {outcome}"
    assert not isinstance(outcome, RecursionError)
    text = str(outcome)
    assert len(text) < LONGEST_ERROR, f"an unbounded error message ({len(text)} chars)"
    return text


# -- short_repr --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [DEEP_LIST, DEEP_DICT, DEEP_TUPLE, Conv(DEEP_LIST, "c"), ValueError(DEEP_LIST), 10**5000],
    ids=["list", "dict", "tuple", "Conv", "exception", "huge int"],
)
def test_short_repr_of_deep_or_huge_values_is_short_and_never_raises(value: Any) -> None:
    text = short_repr(value)
    assert 0 < len(text) <= SHORT_REPR_MAX


def test_short_repr_of_small_values_is_their_repr() -> None:
    for value in ("hi", 42, None, ("add", "c"), [1, 2], {"role": "user"}, Conv("alice", "c")):
        assert short_repr(value) == repr(value)


def test_short_repr_of_a_value_whose_repr_fails_names_its_type() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert "Broken" in short_repr(Broken())


# -- the stores --------------------------------------------------------------------------------

DEEP_MESSAGES: list[Any] = [
    {"role": DEEP_LIST, "content": "x"},
    {"role": "user", "content": "x", "metadata": {DEEP_TUPLE: 1}},
    {"role": "user", "content": "x", DEEP_TUPLE: 1},
    {"role": "user", "content": "x", "metadata": DEEP_DICT},
    {"role": "user", "content": [{"type": "text", "text": DEEP_LIST}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": DEEP_LIST, "function": {}}],
    },
]
DEEP_MESSAGE_IDS = ["role", "metadata key", "field name", "metadata", "content part", "call type"]

STORE_GARBAGE: list[Any] = [
    DEEP_LIST,
    DEEP_DICT,
    DEEP_TUPLE,
    (DEEP_LIST,),
    ("add", DEEP_LIST, [msg("x")]),
    ("add", Conv(DEEP_LIST, "c"), [msg("x")]),
    ("add", "c", DEEP_LIST),
    ("add", "c", DEEP_DICT),
    *(("add", "c", [msg("x"), m]) for m in DEEP_MESSAGES),
    ("add", "c", [msg("x")], DEEP_LIST),
    ("clear", DEEP_LIST),
    ("clear", DEEP_DICT),
    ("forget_user", DEEP_LIST),
    ("import", DEEP_LIST),
    ("import", [(DEEP_TUPLE, [msg("x")])]),
    ("nope", DEEP_LIST),
]
STORE_GARBAGE_IDS = [
    "list",
    "dict",
    "tuple",
    "(list,)",
    "add deep conv",
    "add Conv of deep user",
    "add deep list batch",
    "add deep dict batch",
    *(f"add message with deep {name}" for name in DEEP_MESSAGE_IDS),
    "add with an extra deep argument",
    "clear deep list",
    "clear deep dict",
    "forget_user deep",
    "import deep",
    "import deep conv",
    "unknown op with deep argument",
]


@pytest.fixture(params=["memory", "leveldb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A fresh store of each kind, with two conversations in it."""
    handle: Any = (
        MemoryStore.start_link()
        if request.param == "memory"
        else LevelDBStore.start_link(tmp_path / "db")
    )
    handle.add("c", [msg("one"), msg("two")])
    handle.add(Conv("alice", "c"), [msg("alice")])
    yield handle
    if handle.alive:
        handle.stop()


def assert_store_intact(store: Any) -> None:
    assert store.get("c") == [msg("one"), msg("two")]
    assert store.get(Conv("alice", "c")) == [msg("alice")]
    assert set(store.conversations()) == {Conv(None, "c"), Conv("alice", "c")}


@pytest.mark.parametrize("garbage", STORE_GARBAGE, ids=STORE_GARBAGE_IDS)
def test_store_survives_a_deeply_nested_raw_call(store: Any, garbage: Any) -> None:
    refused(store, garbage, (ValueError, TypeError))
    assert_store_intact(store)
    store.add("c", [msg("after")])
    assert store.get("c", last=1) == [msg("after")]


@pytest.mark.parametrize("message", DEEP_MESSAGES, ids=DEEP_MESSAGE_IDS)
def test_add_of_a_deeply_nested_message_is_invalid_and_stores_nothing(
    store: Any, message: Any
) -> None:
    with pytest.raises(InvalidMessage) as raised:
        store.add("c", [msg("first of the batch"), message])
    assert raised.value.index == 1
    assert len(str(raised.value)) < LONGEST_ERROR
    assert_store_intact(store)


@pytest.mark.parametrize(
    "use",
    [
        lambda s: s.add(DEEP_LIST, [msg("x")]),
        lambda s: s.add(Conv("alice", DEEP_LIST), [msg("x")]),
        lambda s: s.get(DEEP_LIST),
        lambda s: s.get(DEEP_TUPLE),
        lambda s: s.get("c", last=DEEP_LIST),
        lambda s: s.count(DEEP_DICT),
        lambda s: s.clear(DEEP_LIST),
        lambda s: s.conversations(DEEP_LIST),
        lambda s: s.forget_user(DEEP_LIST),
        lambda s: s.search(DEEP_LIST),
        lambda s: s.search("x", limit=DEEP_LIST),
        lambda s: s.import_({"format": DEEP_LIST}),
    ],
    ids=[
        "add",
        "add Conv",
        "get list",
        "get tuple",
        "get last",
        "count",
        "clear",
        "conversations",
        "forget_user",
        "search query",
        "search limit",
        "import",
    ],
)
def test_deeply_nested_arguments_through_the_handle_get_the_documented_error(
    store: Any, use: Callable[[Any], Any]
) -> None:
    with pytest.raises((TypeError, ValueError)) as raised:
        use(store)
    assert not isinstance(raised.value, RecursionError)
    assert len(str(raised.value)) < LONGEST_ERROR
    assert_store_intact(store)


# -- TableKeeper -------------------------------------------------------------------------------


class Owner(GenServer):
    """Owns table "t" (adopted from ``keeper`` when it holds it); call ("put", k, v) or "get"."""

    def init(self, keeper: Handle) -> None:
        self.table: Table[Any, Any] = claim_table(keeper, "t") or new_table("t", heir=keeper)

    def handle_call(self, message: Any) -> Any:
        if message == "get":
            return dict(self.table.items())
        _, key, value = message
        self.table[key] = value
        return None


KEEPER_GARBAGE: list[Any] = [
    DEEP_LIST,
    DEEP_DICT,
    DEEP_TUPLE,
    (DEEP_LIST,),
    (DEEP_LIST, "t"),
    ("claim", "t", DEEP_LIST),
    ("held", DEEP_DICT, DEEP_LIST),
    ("claim", DEEP_LIST),  # an unhashable name: it once crashed the keeper in dict.pop
    ("claim", DEEP_DICT),
]


@pytest.mark.parametrize(
    "garbage",
    KEEPER_GARBAGE,
    ids=[
        "list",
        "dict",
        "tuple",
        "(list,)",
        "(list, name)",
        "claim 3-tuple",
        "held 3-tuple",
        "claim list",
        "claim dict",
    ],
)
def test_table_keeper_survives_a_deeply_nested_raw_call_and_keeps_its_tables(
    garbage: Any,
) -> None:
    keeper = TableKeeper.start()
    try:
        owner = Owner.start(keeper)
        owner.call(("put", "k", "kept"))
        faults.crash(owner)  # the keeper inherits table "t"
        assert keeper.call(("held", None)) == ["t"]
        refused(keeper, garbage, (ValueError,))
        assert keeper.call(("held", None)) == ["t"]
        successor = Owner.start(keeper)
        try:
            assert successor.call("get") == {"k": "kept"}
        finally:
            successor.stop()
    finally:
        keeper.stop()


# -- Supervisor --------------------------------------------------------------------------------

SUPERVISOR_GARBAGE: list[Any] = [
    DEEP_LIST,
    DEEP_DICT,
    DEEP_TUPLE,
    (DEEP_LIST,),
    ("which_children", DEEP_LIST),
    ("start_child", DEEP_LIST),
    ("start_child", DEEP_DICT),
    ("terminate_child", DEEP_LIST),
    ("terminate_child", DEEP_TUPLE),
    ("restart_child", DEEP_LIST),
    ("delete_child", DEEP_DICT),
    ("get_childspec", DEEP_LIST),
    ("subscribe", DEEP_LIST),
    ("no_such_op", DEEP_LIST),
]
SUPERVISOR_GARBAGE_IDS = [
    "list",
    "dict",
    "tuple",
    "(list,)",
    "which_children deep",
    "start_child list",
    "start_child dict",
    "terminate_child list",
    "terminate_child tuple",
    "restart_child",
    "delete_child",
    "get_childspec",
    "subscribe",
    "unknown op",
]


def pids(sup: SupervisorHandle) -> list[Any]:
    return [(info.id, info.pid) for info in sup.which_children()]


@pytest.mark.parametrize("garbage", SUPERVISOR_GARBAGE, ids=SUPERVISOR_GARBAGE_IDS)
def test_supervisor_survives_a_deeply_nested_raw_call_with_its_children(garbage: Any) -> None:
    sup = Supervisor.start_link([worker_spec("a"), worker_spec("b")])
    try:
        before = pids(sup)
        refused(sup, garbage, (SupervisorError, InvalidChildSpec))
        assert pids(sup) == before
        assert all(info.handle is not None and info.handle.alive for info in sup.which_children())
    finally:
        sup.stop()


@pytest.mark.parametrize(
    "garbage",
    [DEEP_LIST, ("start_child", DEEP_LIST), ("terminate_child", DEEP_LIST)],
    ids=["list", "start_child", "terminate_child"],
)
def test_simple_one_for_one_supervisor_survives_a_deeply_nested_raw_call(garbage: Any) -> None:
    sup = Supervisor.start_link(
        [ChildSpec("w", start=lambda tag: Worker.start_link(tag))], strategy="simple_one_for_one"
    )
    try:
        sup.start_child(("one",))
        before = pids(sup)
        refused(sup, garbage, (SupervisorError, InvalidChildSpec))
        assert pids(sup) == before
    finally:
        sup.stop()


# -- the runtime's own descriptions of messages and reasons ------------------------------------


class Bare(GenServer):
    """A server that overrides nothing but ``init``: the default handlers answer."""

    def init(self, fail_with: BaseException | None = None) -> None:
        if fail_with is not None:
            raise fail_with


class Answering(Bare):
    """The default cast and info handlers, and calls answered (to wait on the mailbox)."""

    def handle_call(self, message: Any) -> Any:
        return message


def test_default_handle_call_refuses_a_deep_call_with_not_implemented() -> None:
    server = Bare.start()
    with pytest.raises(ServerExited) as raised:
        server.call(DEEP_LIST, timeout=WAIT)
    assert isinstance(raised.value.reason, NotImplementedError)
    assert len(str(raised.value)) < LONGEST_ERROR


@pytest.mark.parametrize("send", ["cast", "send"])
def test_default_cast_and_info_handlers_log_a_short_warning(
    send: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = Answering.start()
    try:
        with caplog.at_level(logging.WARNING, logger="otpmem.actors"):
            getattr(server, send)(DEEP_LIST)
            assert server.call("sync", timeout=WAIT) == "sync"  # the warning came first
    finally:
        server.stop()
    (record,) = [r for r in caplog.records if "unexpected" in r.getMessage()]
    assert len(record.getMessage()) < LONGEST_ERROR


def test_a_fault_plan_crash_on_a_deep_message_crashes_with_injected_crash() -> None:
    plan = FaultPlan().crash_when(lambda message: isinstance(message, list))
    worker = Worker.start(faults=plan)
    worker.cast(DEEP_LIST)
    reason = worker.wait(WAIT)
    assert isinstance(reason, InjectedCrash)
    assert len(str(reason)) < LONGEST_ERROR


def test_a_server_stopping_with_a_deep_reason_still_exits_and_tells_its_links() -> None:
    class Stopper(GenServer):
        def handle_call(self, message: Any) -> Any:
            return Stop(DEEP_LIST, reply="stopping")

    sup = Supervisor.start_link(
        [ChildSpec("s", start=lambda: Stopper.start_link(), restart="temporary")]
    )
    try:
        child = sup.child("s")
        assert child is not None
        assert child.call("stop", timeout=WAIT) == "stopping"
        assert child.wait(WAIT) is DEEP_LIST
        sup.sync()
        assert sup.which_children() == []  # the supervisor heard of the exit
    finally:
        sup.stop()


def test_a_pending_caller_of_a_server_crashing_with_a_deep_reason_gets_server_exited() -> None:
    worker = Worker.start()
    with pytest.raises(ServerExited) as raised:
        worker.call(("raise", ValueError(DEEP_LIST)), timeout=WAIT)
    assert isinstance(raised.value.reason, ValueError)
    assert len(str(raised.value)) < LONGEST_ERROR


def test_an_init_failing_with_a_deep_reason_raises_init_failed_at_once() -> None:
    with pytest.raises(InitFailed) as raised:
        Bare.start(ValueError(DEEP_LIST), start_timeout=WAIT)
    assert isinstance(raised.value.reason, ValueError)
    assert len(str(raised.value)) < LONGEST_ERROR


# -- Agent -------------------------------------------------------------------------------------


@pytest.mark.parametrize("garbage", [DEEP_LIST, ("run", DEEP_LIST), ("add_message", DEEP_DICT)])
def test_an_agent_refuses_deep_garbage_and_keeps_serving(garbage: Any) -> None:
    from otpmem.agents import Agent
    from otpmem.llm import ScriptedModel
    from otpmem.messages import InvalidMessage

    store = MemoryStore.start()
    agent = Agent.start(llm=ScriptedModel(["fine"]), memory={"store": store}, conversation_id="g")
    try:
        refused(agent, garbage, (ValueError, TypeError, InvalidMessage))
        assert agent.run("hello").content == "fine"
    finally:
        agent.stop()
        store.stop()
