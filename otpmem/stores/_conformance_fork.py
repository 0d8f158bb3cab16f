"""The conformance tests of forks and time travel (``ForkStore``): ``fork(conv, into, at=,
idempotency_key=)`` and ``get(conv, last=, as_of=)``, on the user's path, in every call
order, under threads, and against bad input (which writes nothing)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from ..messages import Conv
from ._base import ConversationExists

WAIT = 10.0
ANN, BOB = "ann", "bob"
SOURCE = Conv(ANN, "trip")
BRANCH = Conv(ANN, "trip-b")


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _assistant(text: str, total: int = 0) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if total:
        usage = {"prompt_tokens": total, "completion_tokens": 0, "total_tokens": total}
        message["metadata"] = {"usage": usage}
    return message


def _summary(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text, "metadata": {"summary": {"upto": 1}}}


SYSTEM = {"role": "system", "content": "you plan trips"}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": "t1", "content": "sunny"}
TRIP = [
    SYSTEM,
    _user("plan a trip to Lyon"),
    CALL,
    RESULT,
    _assistant("Lyon is sunny: go", total=30),
    _user("and Paris?"),
    _assistant("Paris too", total=12),
]
"""A conversation with a stored system message and a tool call pair (the call at 2, its
result at 3), and usage on two answers."""


class ForkConformance:
    """Subclass with a ``store`` fixture; every test here must pass for any ForkStore."""

    # -- the user's path ------------------------------------------------------------------

    def test_fork_of_everything_copies_the_conversation(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        assert store.fork(SOURCE, BRANCH) == len(TRIP)
        assert store.get(BRANCH) == TRIP
        assert store.count(BRANCH) == len(TRIP)
        assert sorted(store.conversations(ANN)) == sorted([SOURCE, BRANCH])
        assert store.get(SOURCE) == TRIP, "the source is untouched"

    def test_fork_at_a_point_copies_the_first_at(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        assert store.fork(SOURCE, BRANCH, at=4) == 4
        assert store.get(BRANCH) == TRIP[:4]
        assert store.count(BRANCH) == 4
        assert store.get(BRANCH, last=2) == TRIP[2:4]

    def test_fork_at_zero_writes_nothing(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        assert store.fork(SOURCE, BRANCH, at=0) == 0
        assert store.count(BRANCH) == 0 and store.get(BRANCH) == []
        assert BRANCH not in store.conversations(ANN)
        assert store.fork(Conv(ANN, "never"), Conv(ANN, "never-b")) == 0
        store.add(BRANCH, [_user("a conversation of its own")])  # the target is still free
        assert store.get(BRANCH) == [_user("a conversation of its own")]

    def test_fork_past_the_end_copies_everything(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        assert store.fork(SOURCE, BRANCH, at=len(TRIP) + 50) == len(TRIP)
        assert store.get(BRANCH) == TRIP

    def test_fork_between_a_tool_call_and_its_result_keeps_what_it_is_given(
        self, store: Any
    ) -> None:
        store.add(SOURCE, TRIP)
        assert store.fork(SOURCE, BRANCH, at=3) == 3
        assert store.get(BRANCH) == [SYSTEM, TRIP[1], CALL]
        window = store.window(BRANCH, 1)
        assert window.tail == [CALL] and window.pinned == [(0, SYSTEM)]
        assert (window.start, window.total, window.pinned_before) == (2, 3, 1)

    def test_fork_of_a_conversation_of_no_user(self, store: Any) -> None:
        store.add("solo", TRIP[:2])
        assert store.fork("solo", "solo-b") == 2
        assert store.get("solo-b") == TRIP[:2]
        assert Conv(None, "solo-b") in store.conversations()

    def test_the_fork_goes_on_as_a_conversation_of_its_own(self, store: Any) -> None:
        store.add(SOURCE, TRIP[:2], idempotency_key="turn-1")
        store.fork(SOURCE, BRANCH)
        store.add(BRANCH, [_user("branch only")])
        store.add(SOURCE, [_user("source only")])
        assert store.get(BRANCH) == [*TRIP[:2], _user("branch only")]
        assert store.get(SOURCE) == [*TRIP[:2], _user("source only")]
        # The source's keys are the source's: the same key is new to the fork.
        assert store.key_position(BRANCH, "turn-1") is None
        store.add(BRANCH, [_user("keyed")], idempotency_key="turn-1")
        assert store.get(BRANCH, last=1) == [_user("keyed")]

    # -- the pinned index, as if added ----------------------------------------------------

    def test_the_forks_pinned_index_is_its_own(self, store: Any) -> None:
        pinned_note = {"role": "user", "content": "I am vegan", "metadata": {"pinned": True}}
        first, second = _summary("first summary"), _summary("second summary")
        history = [SYSTEM, _user("a"), first, pinned_note, _user("b"), second, _user("c")]
        store.add(SOURCE, history)
        assert store.pinned(SOURCE) == [(0, SYSTEM), (3, pinned_note), (5, second)]
        store.fork(SOURCE, BRANCH, at=5)  # before the second summary: the first is newest
        assert store.pinned(BRANCH) == [(0, SYSTEM), (2, first), (3, pinned_note)]
        window = store.window(BRANCH, 1)
        assert window.pinned == [(0, SYSTEM), (2, first), (3, pinned_note)]
        assert window.tail == [_user("b")] and window.pinned_before == 3
        store.fork(SOURCE, Conv(ANN, "all"))
        assert store.pinned(Conv(ANN, "all")) == store.pinned(SOURCE)
        assert store.window(Conv(ANN, "all"), 1) == store.window(SOURCE, 1)

    # -- usage ------------------------------------------------------------------------------

    def test_a_fork_records_no_usage_of_its_own(self, store: Any) -> None:
        if not hasattr(store, "usage"):
            return
        store.add(SOURCE, TRIP)
        before = store.user_usage(ANN)
        assert before.total_tokens == 42
        store.fork(SOURCE, BRANCH)
        assert store.usage(BRANCH).total_tokens == 0
        assert store.user_usage(ANN) == before, "the source's spend is counted once"
        assert store.usage(SOURCE).total_tokens == 42
        store.add(BRANCH, [_assistant("new on the branch", total=5)])
        assert store.usage(BRANCH).total_tokens == 5
        assert store.user_usage(ANN).total_tokens == 47

    # -- refused, and nothing written -------------------------------------------------------

    def test_a_target_that_holds_messages_is_refused(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        store.add(BRANCH, [_user("mine")])
        with pytest.raises(ConversationExists, match=r"'trip-b' of user 'ann'.*holds 1 message"):
            store.fork(SOURCE, BRANCH)
        with pytest.raises(ConversationExists):
            store.fork(SOURCE, BRANCH, at=0)
        assert store.get(BRANCH) == [_user("mine")]
        assert store.get(SOURCE) == TRIP

    def test_the_source_itself_is_refused(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        with pytest.raises(ValueError, match="new conversation"):
            store.fork(SOURCE, SOURCE)
        assert store.get(SOURCE) == TRIP

    def test_another_users_target_is_refused_naming_both(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        with pytest.raises(ValueError, match=r"user 'ann'.*user 'bob'"):
            store.fork(SOURCE, Conv(BOB, "trip-b"))
        with pytest.raises(ValueError, match=r"user 'ann'.*no user"):
            store.fork(SOURCE, "trip-b")
        with pytest.raises(ValueError, match=r"no user.*user 'bob'"):
            store.fork("trip", Conv(BOB, "trip"))
        assert store.conversations(BOB) == []
        assert store.count("trip-b") == 0 and store.count(Conv(BOB, "trip")) == 0

    def test_bad_arguments_are_refused_and_write_nothing(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        for bad in (-1, 1.5, "3", True):
            with pytest.raises(ValueError, match="at must be"):
                store.fork(SOURCE, BRANCH, at=bad)
        for bad_key in ("", 7, "k" * 300):
            with pytest.raises(ValueError, match="idempotency_key"):
                store.fork(SOURCE, BRANCH, idempotency_key=bad_key)
        for bad_conv in ("", 42, None, Conv(ANN, "")):
            with pytest.raises((TypeError, ValueError)):
                store.fork(SOURCE, bad_conv)
            with pytest.raises((TypeError, ValueError)):
                store.fork(bad_conv, BRANCH)
        assert store.conversations(ANN) == [SOURCE]

    def test_a_raw_fork_request_with_garbage_is_refused(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        for garbage in (
            ("fork", SOURCE, BRANCH, -2, None),
            ("fork", SOURCE, Conv(BOB, "x"), None, None),
            ("fork", SOURCE, BRANCH, None),
            ("fork", "trip", 5, None, None),
        ):
            with pytest.raises((TypeError, ValueError)):
                store.call(garbage, WAIT)
        assert store.conversations(ANN) == [SOURCE] and store.get(SOURCE) == TRIP

    # -- exactly once -----------------------------------------------------------------------

    def test_a_retried_fork_is_applied_once_and_answers_as_the_first(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        assert store.fork(SOURCE, BRANCH, at=4, idempotency_key="fork-1") == 4
        store.add(SOURCE, [_user("later")])
        assert store.fork(SOURCE, BRANCH, at=4, idempotency_key="fork-1") == 4
        assert store.fork(SOURCE, BRANCH, idempotency_key="fork-1") == 4, "a retry, whatever at"
        assert store.get(BRANCH) == TRIP[:4]
        store.add(BRANCH, [_user("on the branch")])
        assert store.fork(SOURCE, BRANCH, at=4, idempotency_key="fork-1") == 4
        assert store.get(BRANCH) == [*TRIP[:4], _user("on the branch")]
        with pytest.raises(ConversationExists):
            store.fork(SOURCE, BRANCH, at=4, idempotency_key="fork-2")
        assert store.key_position(BRANCH, "fork-1") == 0

    def test_a_key_the_target_holds_from_an_add_is_no_fork(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        store.add(BRANCH, [_user("mine")], idempotency_key="k")
        with pytest.raises(ConversationExists, match="from an add"):
            store.fork(SOURCE, BRANCH, idempotency_key="k")
        assert store.get(BRANCH) == [_user("mine")]

    def test_a_cleared_fork_can_be_forked_again(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        store.fork(SOURCE, BRANCH, at=2, idempotency_key="f")
        store.clear(BRANCH)
        assert store.get(BRANCH) == []
        assert store.fork(SOURCE, BRANCH, at=3, idempotency_key="f") == 3
        assert store.get(BRANCH) == TRIP[:3]

    def test_forget_user_takes_the_forks(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        store.fork(SOURCE, BRANCH, idempotency_key="f")
        store.forget_user(ANN)
        assert store.conversations(ANN) == [] and store.get(BRANCH) == []
        store.add(SOURCE, TRIP[:2])
        assert store.fork(SOURCE, BRANCH, idempotency_key="f") == 2

    # -- concurrency (real threads) ---------------------------------------------------------

    def test_eight_threads_fork_one_source_into_one_target_and_one_wins(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        answers, refused, errors = self._race(store, lambda: store.fork(SOURCE, BRANCH))
        assert errors == []
        assert answers == [len(TRIP)], "exactly one fork wins"
        assert len(refused) == 7 and all("holds 7 messages" in str(e) for e in refused)
        assert store.get(BRANCH) == TRIP

    def test_eight_threads_retrying_one_keyed_fork_fork_once(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        answers, refused, errors = self._race(
            store, lambda: store.fork(SOURCE, BRANCH, at=5, idempotency_key="once")
        )
        assert errors == [] and refused == []
        assert answers == [5] * 8, "every retry answers as the first did"
        assert store.get(BRANCH) == TRIP[:5] and store.count(BRANCH) == 5

    @staticmethod
    def _race(store: Any, fork: Any) -> tuple[list[int], list[Exception], list[BaseException]]:
        start = threading.Barrier(8)
        lock = threading.Lock()
        answers: list[int] = []
        refused: list[Exception] = []
        errors: list[BaseException] = []

        def run() -> None:
            try:
                start.wait(WAIT)
                answer = fork()
            except ConversationExists as exc:
                with lock:
                    refused.append(exc)
            except BaseException as exc:  # reported by the test
                with lock:
                    errors.append(exc)
            else:
                with lock:
                    answers.append(answer)

        threads = [threading.Thread(target=run) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT * 3)
        assert not any(t.is_alive() for t in threads)
        return answers, refused, errors

    def test_a_fork_racing_appends_is_a_prefix_of_the_source(self, store: Any) -> None:
        store.add(SOURCE, [SYSTEM])
        done = threading.Event()
        errors: list[BaseException] = []

        def append() -> None:
            try:
                for i in range(60):
                    store.add(SOURCE, [_user(f"q{i}"), _assistant(f"a{i}")])
            except BaseException as exc:  # reported below
                errors.append(exc)
            finally:
                done.set()

        writer = threading.Thread(target=append)
        writer.start()
        forks: list[tuple[Conv, int]] = []
        try:
            while not done.is_set() and len(forks) < 40:
                into = Conv(ANN, f"b{len(forks)}")
                forks.append((into, store.fork(SOURCE, into)))
        finally:
            writer.join(WAIT * 3)
        assert errors == [] and not writer.is_alive()
        final = store.get(SOURCE)
        assert len(final) == 121
        for into, n in forks:
            copied = store.get(into)
            assert len(copied) == n and n % 2 == 1, "a batch is never split"
            assert copied == final[:n], "a fork is the source at some moment"
        counts = [n for _, n in forks]
        assert counts == sorted(counts), "a later fork never sees less"

    # -- as_of ------------------------------------------------------------------------------

    def test_as_of_reads_the_conversation_as_it_was(self, store: Any) -> None:
        store.add(SOURCE, TRIP[:2])
        store.add(SOURCE, TRIP[2:])
        for n in range(len(TRIP) + 1):
            assert store.get(SOURCE, as_of=n) == TRIP[:n]
        assert store.get(SOURCE, as_of=len(TRIP) + 10) == TRIP
        assert store.get(SOURCE, as_of=2**40) == TRIP
        assert store.get(Conv(ANN, "nobody"), as_of=3) == []

    def test_last_counts_back_from_as_of(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        assert store.get(SOURCE, last=2, as_of=4) == TRIP[2:4]
        assert store.get(SOURCE, last=10, as_of=4) == TRIP[:4]
        assert store.get(SOURCE, last=0, as_of=4) == []
        assert store.get(SOURCE, last=3, as_of=0) == []
        assert store.get(SOURCE, last=2, as_of=100) == TRIP[-2:]
        assert store.get(SOURCE, 2, 4) == TRIP[2:4]  # positionally too

    def test_as_of_is_what_a_fork_at_that_point_holds(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        for n in range(1, len(TRIP) + 1):
            into = Conv(ANN, f"at-{n}")
            store.fork(SOURCE, into, at=n)
            assert store.get(into) == store.get(SOURCE, as_of=n)

    def test_a_bad_as_of_is_refused_naming_it(self, store: Any) -> None:
        store.add(SOURCE, TRIP)
        for bad in (-1, 1.5, "3", True, [2]):
            with pytest.raises(ValueError, match="as_of"):
                store.get(SOURCE, as_of=bad)
            with pytest.raises(ValueError, match="as_of"):
                store.get(SOURCE, last=2, as_of=bad)
        assert store.get(SOURCE) == TRIP


__all__ = ["ForkConformance"]
