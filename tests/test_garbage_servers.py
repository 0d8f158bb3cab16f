"""No garbage kills a server (issue 28, part 6): each server kind, under random terms.

Every server is started once per test, then sent Hypothesis terms three ways: called
through its own handle and through a plain ``Handle`` to its process (which reaches
``handle_call`` whatever the handle's client side would do), cast, and sent as a plain
message. The terms are anything (``garbage_support.TERMS``: NaN, bytes, values whose
``__eq__``, ``__hash__``, ``__repr__`` or ``__bool__`` raise, tuple and str subclasses,
100,000-deep values) and the server's own requests with garbage in one place. Each call
either answers or raises one of the server's declared caller errors; after every example
the server is the same incarnation, answers a well-formed request, and holds its data.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from otpmem.actors import (
    GenServer,
    Handle,
    NoProcess,
    Table,
    TableKeeper,
    claim_table,
    faults,
    new_table,
)
from otpmem.agents import Agent
from otpmem.llm import ScriptedModel
from otpmem.memory import LongTermMemory, RuleFactExtractor
from otpmem.memory.longterm import ExtractionServer
from otpmem.memory.recall import RecallIndex
from otpmem.messages import Conv
from otpmem.stores import Fact, LevelDBStore, MemoryStore, Profile
from otpmem.supervisors import ChildSpec, Supervisor
from tests.garbage_support import MSG, STORE_OPERATIONS, STORE_TEMPLATES, G, examples, requests
from tests.support import Worker, worker_spec

EXAMPLES = 60
"""Per server kind: each example is four sends and a check, so a few seconds in all."""

SENTINEL = Conv("sentinel-user-0001", "sentinel-conv-0001")
"""What each server keeps through the garbage: longer than any text the terms hold, so no
garbage names it by chance."""
USER = "sentinel-user-0001"
KEPT = [
    {"role": "user", "content": "the sentinel is allergic to peanuts"},
    {"role": "assistant", "content": "noted"},
]


@dataclass
class Target:
    """One server under garbage, and how to tell it came through whole."""

    handle: Handle
    errors: tuple[type[BaseException], ...]
    requests: st.SearchStrategy[list[Any]]
    sync: Callable[[], object]  # a call through the mailbox: every cast before it was handled
    intact: Callable[[], None]
    stops: list[Callable[[], object]] = field(default_factory=list)


# -- the stores --------------------------------------------------------------------------------


def store_target(store: Any, sync: Callable[[], object]) -> Target:
    store.add(SENTINEL, KEPT)
    store.save_fact(Fact(USER, "city", "Lyon"))
    store.save_profile(Profile(USER, "kept profile", {"tone": "brief"}))

    def intact() -> None:
        assert store.get(SENTINEL) == KEPT
        fact = store.get_fact(USER, "city")
        assert fact is not None and fact.value == "Lyon"
        profile = store.get_profile(USER)
        assert profile is not None and (profile.summary, profile.metadata) == (
            "kept profile",
            {"tone": "brief"},
        )

    server = store.resolve().server
    return Target(
        store,
        type(server).caller_errors,
        requests(STORE_OPERATIONS, STORE_TEMPLATES),
        sync,
        intact,
        [store.stop],
    )


def memory_store(tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    store = MemoryStore.start_link()
    return store_target(store, lambda: Handle(store.resolve()).call(("adopted",)))


def leveldb_store(tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    store = LevelDBStore.start_link(tmp_path / "db", sync=False)
    return store_target(store, lambda: Handle(store.resolve()).call(("flush",)))


def postgres_store(tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    from otpmem.stores import PostgresStore

    dsn = request.getfixturevalue("postgres_dsn")
    store = PostgresStore.start_link(dsn, namespace=request.getfixturevalue("pg_namespace"))
    # Through the server's own handle_call (the store's handle runs writes on its caller).
    return store_target(store, lambda: Handle(store.resolve()).call(("clear", G)))


# -- the other servers -------------------------------------------------------------------------


def recall_index(tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    store = MemoryStore.start_link()
    store.add(SENTINEL, KEPT)
    index = RecallIndex.start_link(store)
    query = ("q", 5)
    templates: list[Callable[[Any], Any]] = [
        lambda g: ("relevant", g, None, "q", 5, 0.0, None, True),
        lambda g: ("relevant", None, g, "q", 5, 0.0, None, True),
        lambda g: ("relevant", None, None, g, 5, 0.0, None, True),
        lambda g: ("relevant", None, None, "q", g, 0.0, None, True),
        lambda g: ("relevant", None, None, "q", 5, g, None, True),
        lambda g: ("relevant", None, None, "q", 5, 0.0, g, True),
        lambda g: ("relevant", None, None, "q", 5, 0.0, None, g),
        *(lambda g, k=kind: (k, g, None, *query) for kind in ("lexical", "substring")),
        *(lambda g, k=kind: (k, None, g, *query) for kind in ("lexical", "substring")),
        *(lambda g, k=kind: (k, None, None, g, 5) for kind in ("lexical", "substring")),
        *(lambda g, k=kind: (k, None, None, "q", g) for kind in ("lexical", "substring")),
        lambda g: ("group", g, 0),
        lambda g: ("group", G, g),
        lambda g: ("refresh", g, None),
        lambda g: ("refresh", None, g),
        lambda g: ("forget", g),
        lambda g: ("forget_user", g),
    ]
    operations = ["relevant", "lexical", "substring", "group", "refresh", "forget", "stats"]

    def intact() -> None:
        hits = index.get_relevant("peanuts", user_id=USER)
        assert [hit.message["content"] for hit in hits[:1]] == [KEPT[0]["content"]]

    return Target(
        index,
        RecallIndex.caller_errors,
        requests([*operations, "forget_user"], templates),
        lambda: Handle(index.resolve()).call(("stats",)),
        intact,
        [index.stop, store.stop],
    )


def agent(tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    store = MemoryStore.start_link()
    handle = Agent.start_link(
        llm=ScriptedModel([]), memory={"store": store}, user_id=USER, conversation_id="chat"
    )
    handle.add_message(KEPT[0])
    templates: list[Callable[[Any], Any]] = [
        lambda g: ("run", g),
        lambda g: ("run", "hi", g),
        lambda g: ("add_message", g),
        lambda g: ("add_message", {"role": "user", "content": g}),
        lambda g: ("add_message", {"role": g, "content": "x"}),
        lambda g: ("add_message", {**MSG, "metadata": {"k": g}}),
    ]

    def intact() -> None:
        assert handle.messages()[:1] == [KEPT[0]]
        assert handle.info()["conversation"] == Conv(USER, "chat")

    return Target(
        handle,
        Agent.caller_errors,
        # Not "clear": ("clear",) is a well-formed request, which would empty it.
        requests(["run", "messages", "add_message", "info"], templates),
        lambda: Handle(handle.resolve()).call(("info",)),
        intact,
        [handle.stop, store.stop],
    )


def child_spec(child_id: Any) -> Any:
    """A spec of that id; the id itself where no spec can have it."""
    try:
        return ChildSpec(child_id, start=lambda: Worker.start_link(), restart="temporary")
    except ValueError:
        return child_id


def supervisor(tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    sup = Supervisor.start_link([worker_spec("sentinel-child-a"), worker_spec("sentinel-child-b")])
    kept = [(info.id, info.pid) for info in sup.which_children()]
    templates: list[Callable[[Any], Any]] = [
        *(
            lambda g, op=op: (op, g)
            for op in (
                "start_child",
                "terminate_child",
                "restart_child",
                "delete_child",
                "get_childspec",
                "subscribe",
                "unsubscribe",
            )
        ),
        lambda g: ("start_child", child_spec(g)),
        lambda g: ("start_child", ChildSpec("returns garbage", start=lambda: g)),
    ]

    def intact() -> None:
        rows = sup.which_children()[:2]
        assert [(info.id, info.pid) for info in rows] == kept
        assert all(info.handle is not None and info.handle.alive for info in rows)

    return Target(
        sup,
        Supervisor.caller_errors,
        requests(["which_children", "count_children", "sync", "info"], templates),
        sup.sync,
        intact,
        [sup.stop],
    )


class Owner(GenServer):
    """Owns table "t" (adopted from ``keeper`` when it holds it); "get" reads it."""

    def init(self, keeper: Handle) -> None:
        self.table: Table[Any, Any] = claim_table(keeper, "t") or new_table("t", heir=keeper)
        self.table["k"] = "kept"

    def handle_call(self, message: Any) -> Any:
        return dict(self.table.items())


def table_keeper(tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    keeper = TableKeeper.start()
    faults.crash(Owner.start(keeper))  # the keeper inherits table "t"

    def intact() -> None:
        assert keeper.call(("held", None)) == ["t"]

    def claimed_whole() -> None:
        owner = Owner.start(keeper)
        try:
            assert owner.call("get") == {"k": "kept"}
        finally:
            owner.stop()
            keeper.stop()

    templates: list[Callable[[Any], Any]] = [
        lambda g: ("claim", g),
        lambda g: ("held", g),
        lambda g: (g, "t"),
    ]
    return Target(
        keeper,
        TableKeeper.caller_errors,
        requests(["claim", "held"], templates),
        lambda: keeper.call(("held", None)),
        intact,
        [claimed_whole],
    )


def extraction_server(tmp_path: Path, request: pytest.FixtureRequest) -> Target:
    store = MemoryStore.start_link()
    sup = Supervisor.start_link([])
    ltm = LongTermMemory(store, RuleFactExtractor(), mode="async", supervisor=sup)
    handle = ExtractionServer.named(ltm.server.name)
    templates: list[Callable[[Any], Any]] = [
        lambda g: ("request", g, 1),
        lambda g: ("request", Conv("u", "c"), g),
        lambda g: ("retry", g),
        lambda g: ("flush", g),
        lambda g: ("status", g),
    ]

    def intact() -> None:
        status = handle.call(("status",))
        assert set(status) == {"queued", "failed", "loaded"}

    return Target(
        handle,
        ExtractionServer.caller_errors,
        requests(["flush", "status", "request", "retry"], templates),
        lambda: handle.call(("status",)),
        intact,
        [ltm.close, sup.stop, store.stop],
    )


KINDS: dict[str, Callable[[Path, pytest.FixtureRequest], Target]] = {
    "MemoryStore": memory_store,
    "LevelDBStore": leveldb_store,
    "PostgresStore": postgres_store,
    "RecallIndex": recall_index,
    "Agent": agent,
    "Supervisor": supervisor,
    "TableKeeper": table_keeper,
    "ExtractionServer": extraction_server,
}


@pytest.fixture(params=list(KINDS))
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    """One server of each kind, holding its sentinel data; stopped at the end."""
    started = KINDS[request.param](tmp_path, request)
    try:
        yield started
    finally:
        for stop in started.stops:
            with contextlib.suppress(NoProcess):  # a server the test saw die is gone already
                stop()


def sent(target: Target, how: str, term: Any) -> BaseException | None:
    """Send ``term`` one way; the error it raised, if any."""
    handle = target.handle
    try:
        if how == "call":
            handle.call(term, timeout=10.0)
        elif how == "plain call":
            Handle(handle.resolve()).call(term, timeout=10.0)
        else:
            getattr(handle, how)(term)
    except Exception as exc:
        return exc
    return None


def test_random_terms_never_kill_a_server_and_leave_its_data_whole(target: Target) -> None:
    pid = target.handle.pid
    refused = 0

    @examples(EXAMPLES)
    @given(terms=target.requests)
    def throw(terms: list[Any]) -> None:
        nonlocal refused
        for term in terms:
            for how in ("call", "plain call", "cast", "send"):
                error = sent(target, how, term)
                if error is not None:
                    refused += 1
                    assert isinstance(error, target.errors), (
                        f"{how}: {type(error).__name__}: {error}"
                    )
        target.sync()
        assert target.handle.alive and target.handle.pid == pid, target.handle.exit_reason
        target.intact()

    throw()
    assert refused >= EXAMPLES  # the garbage was refused, not merely ignored
