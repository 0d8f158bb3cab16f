"""The timeline counts into a bounded number of slots and cuts the same buckets as a list
of every event would (p50 and p99 within half a percent)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.simulate import Bucket, Timeline
from otpmem.simulate._timeline import MAX_SLOTS, NICE_WIDTHS, percentile

KINDS = ("kill_store", "crash_agent")


class Clock:
    """A clock the test sets: each reading is ``now``."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def reference(
    turns: list[tuple[float, float]],
    faults: list[tuple[float, str]],
    restarts: list[float],
    end: float,
) -> list[Bucket]:
    """The buckets as the timeline cut them when it kept every event in a list (an event
    placed in tenths of a second: ``int(0.3 / 0.1)`` is 2, and 0.3 s is in bucket 3)."""
    last = max([t for t, _ in turns] + [t for t, _ in faults] + restarts + [0.0])
    end = max(end, last)
    width = next((w for w in NICE_WIDTHS if end / w <= 60), NICE_WIDTHS[-1])
    count = max(1, math.floor(end / width) + 1)
    buckets = [Bucket(start=i * width, width=width) for i in range(count)]

    def index(t: float) -> int:
        return min(int(t * 10 // round(width * 10)), count - 1)

    latencies: list[list[float]] = [[] for _ in buckets]
    for t, latency in turns:
        buckets[index(t)].turns += 1
        latencies[index(t)].append(latency)
    kinds: list[Counter[str]] = [Counter() for _ in buckets]
    for t, kind in faults:
        kinds[index(t)][kind] += 1
    for t in restarts:
        buckets[index(t)].restarts += 1
    for bucket, values, counted in zip(buckets, latencies, kinds, strict=True):
        bucket.faults = dict(counted)
        if values:
            values.sort()
            bucket.p50_ms = percentile(values, 0.50) * 1000
            bucket.p99_ms = percentile(values, 0.99) * 1000
    return buckets


def assert_same(got: list[Bucket], want: list[Bucket]) -> None:
    """Equal counts in equal buckets; percentiles within 0.5%."""
    assert [b.start for b in got] == pytest.approx([b.start for b in want])
    assert [b.width for b in got] == pytest.approx([b.width for b in want])
    assert [b.turns for b in got] == [b.turns for b in want]
    assert [b.faults for b in got] == [b.faults for b in want]
    assert [b.restarts for b in got] == [b.restarts for b in want]
    for mine, theirs in zip(got, want, strict=True):
        for value, exact in ((mine.p50_ms, theirs.p50_ms), (mine.p99_ms, theirs.p99_ms)):
            assert (value is None) == (exact is None)
            if value is not None and exact is not None:
                assert value == pytest.approx(exact, rel=0.005)


# Events a hair past a slot's edge are where a coarsening could go wrong: times are drawn
# on a grid of a tenth of a second, often exactly on an edge, over runs of up to 3 hours.
times = st.integers(min_value=0, max_value=108_000).map(lambda tenths: tenths / 10)
latencies = st.floats(min_value=1e-4, max_value=30.0)
events = st.lists(
    st.one_of(
        st.tuples(st.just("turn"), times, latencies),
        st.tuples(st.just("fault"), times, st.sampled_from(KINDS)),
        st.tuples(st.just("restart"), times, st.none()),
    ),
    max_size=200,
)


@settings(max_examples=100, deadline=None)
@given(events=events, tail=st.floats(min_value=0.0, max_value=5_000.0))
def test_buckets_count_what_a_list_of_every_event_counts(
    events: list[tuple[str, float, object]], tail: float
) -> None:
    clock = Clock()
    timeline = Timeline(clock)
    turns, faults, restarts = [], [], []
    for kind, t, value in sorted(events, key=lambda e: e[1]):  # a run's clock only advances
        clock.now = t
        if kind == "turn":
            assert isinstance(value, float)
            timeline.turn(value)
            turns.append((t, value))
        elif kind == "fault":
            timeline.fault(str(value))
            faults.append((t, str(value)))
        else:
            timeline.restart()
            restarts.append(t)
    end = clock.now + tail
    assert_same(timeline.buckets(end=end), reference(turns, faults, restarts, end))
    assert timeline.slots <= MAX_SLOTS


def every_minute_for_a_week() -> Iterator[float]:
    """One reading a minute for seven days."""
    for minute in range(7 * 24 * 60):
        yield minute * 60.0


def test_a_week_of_events_stays_within_the_slot_bound() -> None:
    clock = Clock()
    timeline = Timeline(clock)
    most = 0
    for t in every_minute_for_a_week():
        clock.now = t
        timeline.turn(0.25)
        timeline.fault("kill_store")
        most = max(most, timeline.slots)
    buckets = timeline.buckets()
    assert most <= MAX_SLOTS and len(buckets) <= 61
    assert sum(b.turns for b in buckets) == sum(sum(b.faults.values()) for b in buckets) == 10080
    assert all(b.p50_ms == b.p99_ms == 250.0 for b in buckets if b.turns)


def test_a_nodes_counts_merge_exactly_into_the_run_that_started_it() -> None:
    """A node counts from its run's start (NodeConfig.started_at), so its slots nest in the
    run's whatever each one's width has grown to."""
    run_clock, node_clock = Clock(), Clock()
    run, node = Timeline(run_clock), Timeline(node_clock, start=0.0)
    whole = Timeline(Clock())
    for i in range(400):
        t = i * 7.3
        node_clock.now = run_clock.now = t
        target = node if i % 3 else run  # the node's faults run longer than the run's own
        target.fault(KINDS[i % 2])
        whole.add_events([(t, KINDS[i % 2])], [t] if i % 5 == 0 else [])
        if i % 5 == 0:
            target.restart()
    run_clock.now = 1_000.0  # the run's own last event came earlier: its slots are finer
    run.add_event_counts(node.event_counts())
    got, want = run.buckets(end=3_000.0), whole.buckets(end=3_000.0)
    assert [(b.faults, b.restarts) for b in got] == [(b.faults, b.restarts) for b in want]


def test_set_turns_replaces_the_turns_recorded_and_keeps_the_events() -> None:
    clock = Clock()
    timeline = Timeline(clock)
    clock.now = 1.0
    timeline.turn(0.5)
    timeline.fault("kill_agent")
    timeline.set_turns([(0.2, 0.1), (0.3, 0.3)])
    buckets = timeline.buckets()  # 0.1 s wide: 0.0 to 1.0
    assert [b.turns for b in buckets] == [0, 0, 1, 1] + [0] * 7
    assert [b.p99_ms for b in buckets[2:4]] == [100.0, 300.0]
    assert buckets[10].faults == {"kill_agent": 1}


def test_a_width_that_splits_a_slot_is_refused_naming_the_resolution() -> None:
    clock = Clock()
    timeline = Timeline(clock)
    clock.now = 400.0  # buckets of 10 s by now, slots of 5 s
    timeline.fault("kill_store")
    assert timeline.resolution == 5.0
    assert len(timeline.buckets(width=20.0)) == 21
    with pytest.raises(ValueError, match=r"multiple of the timeline's resolution, 5 s now"):
        timeline.buckets(width=2.0)
