"""A resilience suite for your own service, written with otpmem's shipped test tools.

Run with ``python -m pytest -q examples/fault_injection`` from the project root (the
project's own ``pytest`` run collects ``tests/`` only).

The service under test is ``OrderBook``: a GenServer that writes every accepted order
ahead to a supervised ``MemoryStore`` before it acknowledges it, and rebuilds itself from
the store when it (re)starts. The suite shows the tools a user gets:

* ``FaultPlan`` (``otpmem.actors.faults``): crash on the n-th message, fail ``init`` k
  times, a ``terminate`` that hangs, across every incarnation of the server;
* ``faults.kill`` / ``faults.crash``: kill the store under load, then check that no
  acknowledged order is lost;
* the ``no_leaks`` fixture (imported in ``conftest.py``): every test must stop what it
  started;
* ``ChatMemoryConformance``: the contract any store must keep, run on the store as the
  service runs it (named, under its supervisor).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from otpmem.actors import GenServer, Handle, InitFailed, NoProcess, ServerExited, faults
from otpmem.actors.faults import FaultPlan, InjectedCrash
from otpmem.messages import Conv
from otpmem.stores import MemoryStore
from otpmem.stores.testing import ChatMemoryConformance
from otpmem.supervisors import ChildSpec, Supervisor, SupervisorEvent, SupervisorHandle

STORE = "orders.store"
BOOK = "orders.book"
WAIT = 10.0


class OrderRejected(RuntimeError):
    """The order was not accepted (its store is restarting): the caller may retry it."""


class OrderBook(GenServer):
    """Orders for one symbol. Written ahead to the store, so a restart loses none."""

    caller_errors = (ValueError, OrderRejected)  # the caller's problem: the book stays up

    def init(self, store_name: str, symbol: str) -> None:
        self.store = MemoryStore.named(store_name)
        self.conv = Conv("orderbook", symbol)
        self.orders: dict[str, Any] = {}
        for message in self.store.get(self.conv):
            order = message["metadata"]["order"]
            self.orders[order["id"]] = order

    def handle_call(self, message: Any) -> Any:
        kind, *args = message
        if kind == "place":
            return self.place(*args)
        if kind == "orders":
            return sorted(self.orders)
        if kind == "volume":
            return sum(order["qty"] for order in self.orders.values())
        raise ValueError(f"OrderBook does not understand {message!r}")

    def place(self, order_id: str, side: str, price: int, qty: int) -> str:
        if side not in ("buy", "sell") or qty <= 0 or price <= 0:
            raise ValueError(f"bad order {order_id}: {side} {qty} @ {price}")
        if order_id in self.orders:
            return order_id  # a retry of an order already accepted: idempotent
        order = {"id": order_id, "side": side, "price": price, "qty": qty}
        text = f"{side} {qty} @ {price}"
        record = {"role": "user", "content": text, "metadata": {"order": order}}
        try:
            self.store.add(self.conv, [record])
        except (NoProcess, ServerExited) as exc:
            raise OrderRejected(f"store unavailable, {order_id} not accepted") from exc
        self.orders[order_id] = order
        return order_id


def place(order_id: str, qty: int = 1) -> str:
    """Place an order through the book's name (so the call reaches its newest incarnation)."""
    result: str = Handle.named(BOOK).call(("place", order_id, "buy", 100, qty))
    return result


def orders() -> list[str]:
    """The ids the book holds."""
    result: list[str] = Handle.named(BOOK).call(("orders",))
    return result


@dataclass
class Service:
    """The running service: its supervisor, the fault plan of the book, and its events."""

    sup: SupervisorHandle
    plan: FaultPlan
    events: queue.Queue[SupervisorEvent]

    def wait_for(self, kind: str, child_id: str = "book") -> SupervisorEvent:
        """The next event of ``kind`` for ``child_id``; fails after WAIT s."""
        deadline = time.monotonic() + WAIT
        while True:
            try:
                event = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"no {kind!r} event for {child_id!r} within {WAIT} s")
            if event.kind == kind and event.child_id == child_id:
                return event

    def stored_ids(self) -> set[str]:
        """Order ids in the store, read directly."""
        records = MemoryStore.named(STORE).get(Conv("orderbook", "ACME"))
        return {m["metadata"]["order"]["id"] for m in records}


def start_service(plan: FaultPlan, *, intensity: int = 20, shutdown: float = 5.0) -> Service:
    """The store (a keeper + store pair) first, then the book; rest_for_one."""
    events: queue.Queue[SupervisorEvent] = queue.Queue()
    sup = Supervisor.start_link(
        [
            MemoryStore.child_spec(STORE, "store", intensity=50, period=5.0),
            ChildSpec(
                "book",
                start=lambda: OrderBook.start_link(STORE, "ACME", name=BOOK, faults=plan),
                shutdown=shutdown,
            ),
        ],
        strategy="rest_for_one",
        intensity=intensity,
        period=5.0,
        listeners=[events.put],
    )
    return Service(sup, plan, events)


@pytest.fixture
def service() -> Iterator[Service]:
    running = start_service(FaultPlan())
    try:
        yield running
    finally:
        if running.sup.alive:
            running.sup.stop()


def test_a_crash_on_the_third_order_restarts_the_book_with_the_first_two(
    service: Service,
) -> None:
    service.plan.crash_on_message(3)
    assert place("o1") == "o1"
    assert place("o2") == "o2"
    with pytest.raises(ServerExited) as crashed:
        place("o3")
    assert isinstance(crashed.value.reason, InjectedCrash)
    service.wait_for("restarted")
    assert orders() == ["o1", "o2"]  # rebuilt from the store; o3 was never acknowledged
    assert place("o3") == "o3"  # the rule fired once: the new incarnation takes it
    assert orders() == ["o1", "o2", "o3"]
    assert service.plan.count("crash_on_message") == 1


def test_a_bad_order_is_refused_and_the_book_keeps_running(service: Service) -> None:
    book = Handle.named(BOOK).pid
    with pytest.raises(ValueError, match="bad order"):
        Handle.named(BOOK).call(("place", "x", "buy", 100, 0))
    assert place("o1") == "o1"
    assert Handle.named(BOOK).pid == book
    assert service.stored_ids() == {"o1"}


def test_init_failing_twice_is_retried_until_the_book_comes_back(service: Service) -> None:
    place("o1")
    service.plan.fail_init(2)
    faults.kill(Handle.named(BOOK))
    failures = [service.wait_for("start_failed"), service.wait_for("start_failed")]
    service.wait_for("restarted")
    assert all(isinstance(f.reason, InitFailed) for f in failures)
    assert service.plan.count("fail_init") == 2
    assert orders() == ["o1"]


def test_init_failing_for_ever_takes_the_service_down() -> None:
    plan = FaultPlan()
    service = start_service(plan, intensity=3)
    try:
        plan.fail_init(None)
        faults.kill(Handle.named(BOOK))
        service.wait_for("max_intensity")
        assert service.sup.wait(WAIT) == "shutdown"
        assert MemoryStore.named(STORE).alive is False  # the whole subtree went with it
    finally:
        if service.sup.alive:
            service.sup.stop()


def test_starting_a_book_whose_init_fails_raises_init_failed() -> None:
    sup = Supervisor.start_link([MemoryStore.child_spec(STORE)])
    try:
        with pytest.raises(InitFailed):
            OrderBook.start_link(STORE, "ACME", faults=FaultPlan().fail_init(1))
    finally:
        sup.stop()


def test_killing_the_store_under_load_loses_no_acknowledged_order(service: Service) -> None:
    clients, per_client, kills = 4, 40, 5
    acknowledged: list[str] = []
    progress = threading.Condition()

    def client(c: int) -> None:
        deadline = time.monotonic() + 30
        for n in range(per_client):
            order_id = f"c{c}-{n}"
            while time.monotonic() < deadline:
                try:
                    place(order_id)
                    break
                except (OrderRejected, NoProcess, ServerExited):
                    continue  # the store or the book is restarting: the same order again
            else:
                return
            with progress:
                acknowledged.append(order_id)
                progress.notify_all()

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    for thread in threads:
        thread.start()

    def acknowledged_at_least(n: int) -> Callable[[], bool]:
        return lambda: len(acknowledged) >= n

    pair: Any = service.sup.child("store")
    killed = 0
    for k in range(1, kills + 1):
        with progress:  # each kill lands while the clients are busy
            progress.wait_for(acknowledged_at_least(25 * k), timeout=WAIT)
        faults.kill(MemoryStore.named(STORE))
        pair.sync()  # the keeper handed the table over: the store is back with its data
        killed += 1
    for thread in threads:
        thread.join(WAIT * 3)
    assert killed == kills
    assert len(acknowledged) == clients * per_client
    assert set(acknowledged) <= service.stored_ids()
    assert set(acknowledged) <= set(orders())
    assert Handle.named(BOOK).call(("volume",)) == len(orders())


def test_a_terminate_that_hangs_is_cut_off_by_the_shutdown_timeout() -> None:
    plan = FaultPlan().slow_terminate(30.0)
    service = start_service(plan, shutdown=0.2)
    started = time.monotonic()
    service.sup.stop()
    assert time.monotonic() - started < 5.0
    assert plan.count("slow_terminate") == 1
    errors = [e for e in drain(service.events) if e.kind == "shutdown_error"]
    assert [(e.child_id, e.reason) for e in errors] == [("book", "killed")]


def drain(events: queue.Queue[SupervisorEvent]) -> list[SupervisorEvent]:
    """Every event queued so far."""
    seen = []
    while not events.empty():
        seen.append(events.get_nowait())
    return seen


class TestOrderStoreConformance(ChatMemoryConformance):
    """The store the service uses keeps the ChatMemory contract, named and supervised."""

    @pytest.fixture
    def store(self) -> Iterator[Any]:
        sup = Supervisor.start_link([MemoryStore.child_spec(STORE)])
        try:
            yield MemoryStore.named(STORE)
        finally:
            sup.stop()
