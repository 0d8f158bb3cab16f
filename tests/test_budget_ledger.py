"""The ledger MemoryStore and LevelDBStore keep their holds in, against a model of it: any
sequence of reservations, releases and time passing gives the answers a plain list of
holds would, every hold expires exactly at its deadline, and the ledger's expiry index
stays the size of the calls in flight however many have come and gone."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.messages import Conv
from otpmem.stores import Hold, Limit, Usage
from otpmem.stores._holds import Ledger
from otpmem.stores.reservations import held_in, measure

CONVS = [Conv("ann", "a"), Conv("ann", "b"), Conv("bob", "a"), Conv(None, "a")]
RECORDED = {"ann": Usage(0, 0, 300, Decimal("0.3")), "bob": Usage(0, 0, 50, Decimal("0.05"))}


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def recorded(conv: Conv, limit: Limit) -> Usage:
    """Fixed recorded usage: a user's, half of it in each of its conversations."""
    if conv.user_id is None:
        return Usage()
    user = RECORDED[conv.user_id]
    if limit.scope == "user":
        return user
    return Usage(0, 0, user.total_tokens // 2, user.cost / 2)


def limit_of(scope: str, what: str, most: int, own: int) -> Limit:
    """A limit of tokens, or of cost in thousandths."""
    if what == "tokens":
        return Limit(scope, what, most, own)
    return Limit(scope, what, Decimal(most) / 1000, Decimal(own) / 1000)


def covers(limit: Limit, conv: Conv, where: Conv) -> bool:
    """Whether a limit of a call in ``conv`` counts a hold of a call in ``where``."""
    return where == conv if limit.scope == "conversation" else where.user_id == conv.user_id


LIMITS = st.builds(
    limit_of,
    st.sampled_from(["conversation", "user"]),
    st.sampled_from(["tokens", "cost"]),
    st.integers(0, 2000),
    st.integers(0, 300),
)
HOLDS = st.builds(
    Hold,
    st.integers(0, 600),
    st.one_of(st.none(), st.integers(0, 600).map(lambda c: Decimal(c) / 1000)),
)
STEPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("reserve"),
            st.integers(0, 3),
            st.integers(0, 5),
            HOLDS,
            st.lists(LIMITS, max_size=3),
            st.sampled_from([1.0, 5.0]),
        ),
        st.tuples(st.just("release"), st.integers(0, 5)),
        st.tuples(st.just("wait"), st.sampled_from([0.5, 1.0, 2.0])),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(steps=STEPS)
def test_the_ledger_answers_as_a_plain_list_of_holds_would(steps: list[Any]) -> None:
    clock = Clock()
    ledger = Ledger(clock)
    model: dict[str, tuple[Conv, Hold, float]] = {}
    for step in steps:
        if step[0] == "wait":
            clock.now += step[1]
            continue
        live = {i: h for i, h in model.items() if h[2] > clock.now}
        if step[0] == "release":
            hold_id = f"h{step[1]}"
            assert ledger.release(hold_id) is (hold_id in live)
            live.pop(hold_id, None)
            model = live
            continue
        _, c, n, hold, limits, ttl = step
        conv, hold_id = CONVS[c], f"h{n}"
        limits = [limit for limit in limits if limit.scope == "conversation" or conv.user_id]
        live.pop(hold_id, None)
        expected = None
        for index, limit in enumerate(limits):
            covered = [held_in(limit, h) for w, h, _ in live.values() if covers(limit, conv, w)]
            held = None if None in covered else sum(covered)  # type: ignore[arg-type]
            spent = measure(recorded(conv, limit), limit.measure)
            if held is None or spent + held + limit.own > limit.max:
                expected = (index, spent, held)
                break
        answer = ledger.reserve(conv, hold_id, hold, limits, ttl, recorded)
        if expected is None:
            assert answer.granted
            live[hold_id] = (conv, hold, clock.now + ttl)
        else:
            assert (answer.refused, answer.recorded, answer.held) == expected
        model = live


def test_a_hold_expires_exactly_at_its_deadline_and_the_index_stays_small() -> None:
    clock = Clock()
    ledger = Ledger(clock)
    ann = Conv("ann", "a")
    never = [Limit("user", "tokens", 0, own=1)]  # refuses: says what is held
    assert ledger.reserve(ann, "h", Hold(7), [], 10.0, recorded).granted
    clock.now = 9.999
    assert ledger.reserve(ann, "p", Hold(), never, 1.0, recorded).held == 7
    clock.now = 10.0
    assert ledger.reserve(ann, "p", Hold(), never, 1.0, recorded).held == 0
    for i in range(10_000):  # calls come and go, each released: nothing is left behind
        assert ledger.reserve(ann, f"c{i}", Hold(1), [], 300.0, recorded).granted
        assert ledger.release(f"c{i}")
    assert ledger.count() == 0
    assert len(ledger._expiries) <= 64 + 2
