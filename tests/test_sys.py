"""otpmem.actors.sys: a process's state and trace, as OTP's sys:get_state and sys:trace."""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest

from otpmem.actors import (
    CallTimeout,
    Event,
    GenServer,
    NoProcess,
    ServerExited,
    faults,
    sleep,
)
from otpmem.actors import sys as otp_sys
from otpmem.actors.sys import TraceEvent

WAIT = 10.0


class Pair(GenServer):
    """Keeps ``a == b`` between messages only: a handler suspends half-way through."""

    caller_errors = (ValueError,)

    def init(self) -> None:
        self.a = 0
        self.b = 0
        self.notes: list[str] = []

    def handle_cast(self, message: Any) -> None:
        self.a += 1
        sleep(0)  # suspended mid-update: another process (or request) could run now
        self.b += 1

    def handle_call(self, message: Any) -> Any:
        if message == "bad":
            raise ValueError("bad request")
        if message == "ping":
            return None
        self.notes.append(message)
        return len(self.notes)


class Stuck(GenServer):
    def init(self, gate: threading.Event) -> None:
        self.gate = gate
        self.entered = threading.Event()
        self.value = "before"

    def handle_cast(self, message: Any) -> None:
        self.entered.set()
        self.gate.wait(WAIT)  # blocks its thread: no message is handled meanwhile
        self.value = "after"


def test_get_state_is_taken_between_messages_while_threads_stream_casts() -> None:
    pair = Pair.start_link()
    stop = threading.Event()

    def stream() -> None:
        while not stop.is_set():
            for _ in range(10):
                pair.cast("tick")
            pair.call("ping", timeout=WAIT)  # keeps the mailbox short: reads wait behind it

    senders = [threading.Thread(target=stream) for _ in range(3)]
    for sender in senders:
        sender.start()
    seen = []
    try:
        for _ in range(100):
            state = otp_sys.get_state(pair, timeout=WAIT)
            assert state["a"] == state["b"], state  # never a state half-way through a cast
            seen.append(state["a"])
    finally:
        stop.set()
        for sender in senders:
            sender.join(WAIT)
        pair.stop()
    assert seen == sorted(seen) and seen[-1] > 0  # in mailbox order, and the casts were served


def test_the_state_is_a_bounded_json_copy_that_shares_nothing() -> None:
    pair = Pair.start_link()
    try:
        for i in range(30):
            pair.call("x" * 1000 if i == 0 else f"n{i}")
        state = otp_sys.get_state(pair)
        json.dumps(state)  # JSON-ready as it is
        notes = state["notes"]
        assert len(notes) == 21 and notes[-1] == "... 10 more"
        assert len(notes[0]) == 200 and notes[0].endswith("...")
        notes.clear()  # a copy: the server's list is untouched
        assert otp_sys.get_state(pair)["notes"][1] == "n1"
        assert "_process" not in state
    finally:
        pair.stop()


class Formatted(GenServer):
    def init(self) -> None:
        self.secret = "s3cr3t"

    def format_status(self) -> dict[str, Any]:
        return {"secret": "***", "shown": {1, 2}}


def test_format_status_chooses_what_the_state_shows() -> None:
    server = Formatted.start_link()
    try:
        assert otp_sys.get_state(server) == {"status": {"secret": "***", "shown": [1, 2]}}
    finally:
        server.stop()


def test_get_status_names_the_process_its_mailbox_links_and_state() -> None:
    pair = Pair.start_link(name="sys-pair")
    try:
        status = otp_sys.get_status(pair)
        assert status["pid"] == repr(pair.pid) and status["name"] == "sys-pair"
        assert status["kind"] == "pair" and status["module"].endswith("test_sys.Pair")
        assert status["traced"] is False and status["state"] == {"a": 0, "b": 0, "notes": []}
        otp_sys.trace(pair, True)
        assert otp_sys.get_status(pair)["traced"] is True
    finally:
        pair.stop()


def test_trace_records_calls_casts_replies_and_errors_until_switched_off() -> None:
    pair = Pair.start_link()
    got: list[TraceEvent] = []
    try:
        pair.call("before")  # not traced: the trace starts after the request
        otp_sys.trace(pair, True, to=got.append)
        assert otp_sys.traced(pair)
        assert pair.call("hello") == 2
        with pytest.raises(ValueError):
            pair.call("bad")
        pair.cast("tick")
        pair.send({"info": 1})
        otp_sys.trace(pair, False)
        pair.call("after")  # not traced either
        assert not otp_sys.traced(pair)
    finally:
        pair.stop()
    kinds = [(e.kind, e.message) for e in got]
    assert kinds == [
        ("call", "'hello'"),
        ("reply", "2"),
        ("call", "'bad'"),
        ("error", "ValueError('bad request')"),
        ("cast", "'tick'"),
        ("info", "{'info': 1}"),
    ]
    assert [e.seq for e in got] == [1, 2, 3, 4, 5, 6]
    assert got[0].caller is None and got[0].pid == pair.pid
    assert otp_sys.trace_log(pair) == got  # kept after the trace ended


def test_trace_goes_to_a_logger_keeps_a_bounded_log_and_stops_at_its_limit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pair = Pair.start_link()
    log = logging.getLogger("tests.sys.trace")
    try:
        with caplog.at_level(logging.INFO, logger="tests.sys.trace"):
            otp_sys.trace(pair, True, to=log, keep=3, limit=8)
            for i in range(10):
                pair.call(f"m{i}" + "y" * 1000)
        assert not otp_sys.traced(pair)  # 8 events: 4 calls and their replies, then off
        lines = [r.getMessage() for r in caplog.records if r.name == "tests.sys.trace"]
        assert len(lines) == 8 and " call 'm0" in lines[0]
        assert max(len(line) for line in lines) < 400  # each message a bounded repr
        events = otp_sys.trace_log(pair)
        assert [e.kind for e in events] == ["reply", "call", "reply"]
        assert events[-1].seq == 8
    finally:
        pair.stop()


def test_a_subscriber_that_raises_ends_the_trace_not_the_process() -> None:
    pair = Pair.start_link()

    def broken(event: TraceEvent) -> None:
        raise RuntimeError("subscriber bug")

    try:
        otp_sys.trace(pair, True, to=broken)
        assert pair.call("x") == 1
        assert not otp_sys.traced(pair) and pair.alive
        assert pair.call("y") == 2
    finally:
        pair.stop()


def test_a_dead_process_gives_no_process_and_keeps_its_last_trace() -> None:
    pair = Pair.start_link()
    otp_sys.trace(pair, True, to=lambda event: None)
    pair.call("last words")
    pair.stop()
    for ask in (otp_sys.get_state, otp_sys.get_status, otp_sys.trace):
        with pytest.raises(NoProcess):
            ask(pair)
    # What it did last stays readable: why it died is what one wants to know.
    assert [e.kind for e in otp_sys.trace_log(pair)] == ["call", "reply", "stop"]
    assert not otp_sys.traced(pair)
    with pytest.raises(NoProcess):
        otp_sys.get_state(Pair.named("sys-nobody"))
    with pytest.raises(NoProcess):
        otp_sys.trace_log(Pair.named("sys-nobody"))


def test_a_process_blocked_in_a_long_handler_makes_get_state_time_out() -> None:
    gate = threading.Event()
    stuck = Stuck.start_link(gate)
    try:
        stuck.cast("block")
        assert stuck.process_or_none() is not None
        assert stuck.resolve().server.entered.wait(WAIT)
        with pytest.raises(CallTimeout, match="system request"):
            otp_sys.get_state(stuck, timeout=0.2)
        with pytest.raises(CallTimeout):
            otp_sys.trace(stuck, True, timeout=0.1)
        gate.set()
        # The process is untouched: it finishes the handler and answers the next request.
        assert otp_sys.get_state(stuck, timeout=WAIT)["value"] == "after"
    finally:
        gate.set()
        stuck.stop()


def test_a_process_killed_with_the_request_queued_gives_server_exited() -> None:
    gate = threading.Event()
    stuck = Stuck.start_link(gate)
    errors: list[BaseException] = []
    asked = Event()

    def ask() -> None:
        asked.set()
        try:
            otp_sys.get_state(stuck, timeout=WAIT)
        except BaseException as exc:
            errors.append(exc)

    try:
        stuck.cast("block")
        assert stuck.resolve().server.entered.wait(WAIT)
        asker = threading.Thread(target=ask)
        asker.start()
        assert asked.wait(WAIT)
        faults.kill(stuck, grace=0.2)
        gate.set()
        asker.join(WAIT)
        assert len(errors) == 1 and isinstance(errors[0], ServerExited)
    finally:
        gate.set()


def test_bad_arguments_are_refused_with_what_is_wrong() -> None:
    pair = Pair.start_link()
    try:
        with pytest.raises(TypeError, match="on must be True or False"):
            otp_sys.trace(pair, "yes")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="keep must be"):
            otp_sys.trace(pair, True, keep=0)
        with pytest.raises(ValueError, match="limit must be"):
            otp_sys.trace(pair, True, limit=-1)
        with pytest.raises(TypeError, match="to must be"):
            otp_sys.trace(pair, True, to="stdout")  # type: ignore[arg-type]
        assert not otp_sys.traced(pair)
    finally:
        pair.stop()
