"""send_after and cancel_timer: Erlang's timers, one thread for all of them."""

from __future__ import annotations

from typing import Any

import pytest

from otpmem.actors import GenServer, Timer, cancel_timer, send_after
from tests.support import WAIT, Trace


class Inbox(GenServer):
    """Records every info message in a Trace."""

    def init(self, trace: Trace) -> None:
        self.trace = trace

    def handle_info(self, message: Any) -> None:
        self.trace(message)


def test_messages_arrive_in_due_order_and_a_cancelled_one_never() -> None:
    trace = Trace()
    inbox = Inbox.start_link(trace)
    try:
        late = send_after(0.2, inbox, "late")
        cancelled = send_after(0.05, inbox, "cancelled")
        send_after(0.1, inbox, "early")
        assert cancel_timer(cancelled) is True
        assert cancel_timer(cancelled) is False  # already cancelled
        trace.wait_for(lambda items: "late" in items, WAIT)
        assert trace.items == ["early", "late"]
        assert not late.pending and cancel_timer(late) is False  # it fired
    finally:
        inbox.stop()


def test_a_timer_for_a_dead_process_is_spent_at_once() -> None:
    inbox = Inbox.start_link(Trace())
    inbox.stop()
    timer = send_after(0.01, inbox, "nobody")
    assert isinstance(timer, Timer) and not timer.pending


@pytest.mark.parametrize("seconds", [-1, float("nan"), "1", True])
def test_a_bad_delay_is_refused(seconds: Any) -> None:
    inbox = Inbox.start_link(Trace())
    try:
        with pytest.raises(ValueError, match="seconds"):
            send_after(seconds, inbox, "x")
    finally:
        inbox.stop()
