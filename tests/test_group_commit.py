"""GroupCommit: concurrent writers committed together, each answered once, in order."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from otpmem.stores.postgres._group_commit import GroupCommit
from tests.support import run_threads

WAIT = 10.0


def _until(predicate: object, what: str) -> None:
    """A deadline poll of a counter the group keeps (there is no event to wait on)."""
    tick = threading.Event()
    for _ in range(int(WAIT / 0.002)):
        if predicate():  # type: ignore[operator]
            return
        tick.wait(0.002)
    raise AssertionError(f"timed out waiting for {what}")


def test_concurrent_writers_are_each_committed_once_in_their_order() -> None:
    log: list[tuple[int, int]] = []
    groups: list[int] = []

    def commit(items: Sequence[tuple[int, int]]) -> list[object]:
        groups.append(len(items))
        log.extend(items)
        return [f"{t}:{i}" for t, i in items]

    group: GroupCommit[tuple[int, int], object] = GroupCommit(commit, max_group=5)
    answers: dict[tuple[int, int], object] = {}

    def writer(t: int) -> None:
        for i in range(200):
            answers[(t, i)] = group.submit((t, i))

    assert run_threads(8, writer) == []
    assert sorted(log) == [(t, i) for t in range(8) for i in range(200)]  # each once
    for t in range(8):
        assert [i for u, i in log if u == t] == list(range(200))  # a writer's order kept
    assert all(answers[key] == f"{key[0]}:{key[1]}" for key in answers)
    assert max(groups) <= 5 and sum(groups) == 1600
    assert group.items == 1600 and group.groups == len(groups)


def test_writers_queued_behind_a_commit_go_together_in_the_next_group() -> None:
    release = threading.Event()
    groups: list[list[int]] = []

    def commit(items: Sequence[int]) -> list[object]:
        groups.append(list(items))
        if items == [0]:
            release.wait(WAIT)  # the first commit is slow: the others queue behind it
        return list(items)

    group: GroupCommit[int, object] = GroupCommit(commit)
    first = threading.Thread(target=group.submit, args=(0,))
    first.start()
    _until(lambda: group.queued == 1 and groups, "the first commit")
    others = [threading.Thread(target=group.submit, args=(n,)) for n in range(1, 7)]
    for thread in others:
        thread.start()
    _until(lambda: group.queued == 7, "six writers in line")
    release.set()
    for thread in [first, *others]:
        thread.join(WAIT)
    assert groups[0] == [0]
    assert sorted(groups[1]) == [1, 2, 3, 4, 5, 6] and len(groups) == 2  # one commit for six


def test_a_lone_writer_commits_alone_at_once() -> None:
    sizes: list[int] = []
    group: GroupCommit[int, object] = GroupCommit(lambda items: sizes.append(len(items)) or [7])
    assert [group.submit(n) for n in range(5)] == [7] * 5
    assert sizes == [1] * 5


def test_an_item_that_fails_alone_fails_only_its_writer() -> None:
    def commit(items: Sequence[int]) -> list[object]:
        return [ValueError(f"bad {n}") if n % 3 == 0 else n * 10 for n in items]

    group: GroupCommit[int, object] = GroupCommit(commit)
    outcomes: dict[int, object] = {}

    def writer(t: int) -> None:
        for i in range(50):
            n = t * 100 + i
            try:
                outcomes[n] = group.submit(n)
            except ValueError as exc:
                outcomes[n] = str(exc)

    assert run_threads(6, writer) == []
    for n, outcome in outcomes.items():
        assert outcome == (f"bad {n}" if n % 3 == 0 else n * 10)
    assert len(outcomes) == 300


def test_a_failed_commit_fails_its_whole_group_and_the_next_writers_go_on() -> None:
    def commit(items: Sequence[int]) -> list[object]:
        if 13 in items:
            raise ConnectionError("lost the server")
        return list(items)

    group: GroupCommit[int, object] = GroupCommit(commit)
    failed: list[int] = []
    done: list[int] = []

    def writer(t: int) -> None:
        for i in range(40):
            n = t * 40 + i
            try:
                done.append(group.submit(n))  # type: ignore[arg-type]
            except ConnectionError:
                failed.append(n)

    assert run_threads(4, writer) == []
    assert 13 in failed and sorted(failed + done) == list(range(160))
    assert group.queued == 0  # every leader handed on: nobody is left waiting
    assert group.submit(500) == 500


def test_a_commit_answering_the_wrong_count_fails_its_group_clearly() -> None:
    group: GroupCommit[int, object] = GroupCommit(lambda items: [])
    with pytest.raises(RuntimeError, match="answered 0 outcomes for 1 items"):
        group.submit(1)


def test_max_group_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_group"):
        GroupCommit(lambda items: list(items), max_group=0)


def test_each_writer_of_a_failed_group_raises_an_error_of_its_own() -> None:
    # One exception object raised on many threads would collect every thread's
    # traceback in one chain (and race on it): each follower gets its own copy.
    entered, release = threading.Event(), threading.Event()

    def commit(items: Sequence[int]) -> list[object]:
        if items == [0]:
            entered.set()
            release.wait(WAIT)
            return [0]
        raise ConnectionError("lost the server")

    group: GroupCommit[int, object] = GroupCommit(commit)
    raised: list[BaseException] = []
    first = threading.Thread(target=group.submit, args=(0,))
    first.start()
    assert entered.wait(WAIT)

    def follower(t: int) -> None:
        try:
            group.submit(t + 1)
        except ConnectionError as exc:
            raised.append(exc)

    threads = [threading.Thread(target=follower, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    _until(lambda: group.queued == 9, "the followers to queue")
    release.set()
    first.join(WAIT)
    for thread in threads:
        thread.join(WAIT)

    assert len(raised) == 8 and len({id(exc) for exc in raised}) == 8
    assert all(str(exc) == "lost the server" for exc in raised)
    depths = []
    for exc in raised:
        depth, tb = 0, exc.__traceback__
        while tb is not None:
            depth, tb = depth + 1, tb.tb_next
        depths.append(depth)
    assert max(depths) < 10  # its own few frames, not every thread's
