"""The conformance tests of a ``ReservationStore``: holds on budgets (see ``testing``)."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from typing import Any

import pytest

from ..messages import Conv
from .reservations import Hold, Limit

ANN, ANN2, BOB = Conv("ann", "c1"), Conv("ann", "c2"), Conv("bob", "c1")
TTL = 300.0
WAIT = 10.0


def _spent(store: Any, conv: Conv, tokens: int, cost: str = "0") -> None:
    usage = {"prompt_tokens": tokens, "completion_tokens": 0, "cost": cost}
    store.add(conv, [{"role": "assistant", "content": "ok", "metadata": {"usage": usage}}])


def _tokens(scope: str, most: int, own: int = 0, since: float | None = None) -> list[Limit]:
    return [Limit(scope, "tokens", most, own, since)]


class ReservationConformance:
    """Subclass with a ``store`` fixture; every test here must pass for any ReservationStore."""

    def test_a_hold_counts_until_released(self, store: Any) -> None:
        limit = _tokens("user", 1000)
        assert store.reserve(ANN, "h1", Hold(600), limit, TTL).granted
        assert store.reserve(ANN, "h2", Hold(600), limit, TTL).granted  # 600 <= 1000
        refused = store.reserve(ANN, "h3", Hold(600), limit, TTL)
        assert (refused.granted, refused.refused, refused.recorded, refused.held) == (
            False, 0, 0, 1200
        )  # fmt: skip
        assert store.release("h1") is True
        assert store.release("h1") is False, "released once"
        assert store.reserve(ANN, "h3", Hold(600), limit, TTL).granted

    def test_holds_count_in_every_scope_that_covers_their_call(self, store: Any) -> None:
        assert store.reserve(ANN, "h1", Hold(700), [], TTL).granted  # no limit: held still
        assert store.reserve(ANN2, "h2", Hold(100, Decimal("0.5")), [], TTL).granted
        assert store.reserve(BOB, "h3", Hold(5000), [], TTL).granted
        assert store.reserve(ANN, "probe", Hold(), _tokens("user", 0), TTL).held == 800
        assert store.reserve(ANN, "probe", Hold(), _tokens("conversation", 0), TTL).held == 700
        assert store.reserve(ANN2, "probe", Hold(), _tokens("conversation", 0), TTL).held == 100
        costs = [Limit("user", "cost", Decimal(0))]
        assert store.reserve(ANN, "probe", Hold(), costs, TTL).held == Decimal("0.5")
        anonymous = Conv(None, "c1")
        assert store.reserve(anonymous, "probe", Hold(), _tokens("conversation", 0), TTL).held == 0

    def test_recorded_usage_and_the_call_s_own_estimate_count(self, store: Any) -> None:
        _spent(store, ANN, 700)
        _spent(store, ANN2, 100)
        refused = store.reserve(ANN, "h1", Hold(1), _tokens("user", 1000, own=201), TTL)
        assert (refused.refused, refused.recorded, refused.held) == (0, 800, 0)
        assert store.reserve(ANN, "h1", Hold(1), _tokens("user", 1000, own=200), TTL).granted
        assert store.reserve(ANN2, "h2", Hold(1), _tokens("conversation", 100), TTL).granted
        refused = store.reserve(ANN2, "h3", Hold(1), _tokens("conversation", 100), TTL)
        assert (refused.recorded, refused.held) == (100, 1)

    def test_cost_limits_are_exact_and_an_unknown_cost_keeps_them_out(self, store: Any) -> None:
        _spent(store, ANN, 10, "0.70")
        costs = [Limit("user", "cost", Decimal("1.00"))]
        exactly = [Limit("user", "cost", Decimal("1.00"), own=Decimal("0.30"))]
        assert store.reserve(ANN, "h0", Hold(), exactly, TTL).granted, "0.7 + 0.3 <= 1.00"
        store.release("h0")
        over = [Limit("user", "cost", Decimal("1.00"), own=Decimal("0.31"))]
        assert store.reserve(ANN, "h0", Hold(), over, TTL).refused == 0
        assert store.reserve(ANN2, "h1", Hold(10, Decimal("0.40")), costs, TTL).granted
        refused = store.reserve(ANN, "h2", Hold(10, Decimal("0.01")), costs, TTL)
        assert (refused.refused, refused.recorded, refused.held) == (
            0, Decimal("0.7"), Decimal("0.4")
        )  # fmt: skip
        store.release("h1")
        assert store.reserve(ANN, "first", Hold(10, None), costs, TTL).granted
        refused = store.reserve(ANN2, "next", Hold(10, Decimal(0)), costs, TTL)
        assert refused.refused == 0 and refused.held is None, "unknown: the whole budget"
        tokens = store.reserve(ANN2, "next", Hold(10), _tokens("user", 10**6), TTL)
        assert tokens.granted, "an unknown cost holds no unknown tokens"
        assert store.release("first")
        assert store.reserve(ANN2, "after", Hold(10, Decimal(0)), costs, TTL).granted

    def test_a_window_counts_only_what_was_recorded_since(self, store: Any) -> None:
        _spent(store, ANN, 500)
        future = _tokens("user", 100, since=4_000_000_000.0)
        assert store.reserve(ANN, "h1", Hold(1), future, TTL).granted
        store.release("h1")
        refused = store.reserve(ANN, "h1", Hold(1), _tokens("conversation", 100, since=0.0), TTL)
        assert refused.recorded == 500
        store.clear(ANN)  # a cleared conversation's window starts again; its user's does not
        window = _tokens("conversation", 100, since=0.0)
        assert store.reserve(ANN, "h2", Hold(1), window, TTL).granted
        window = _tokens("user", 100, since=0.0)
        assert store.reserve(ANN, "h3", Hold(1), window, TTL).recorded == 500

    def test_the_first_refusing_limit_is_named_and_nothing_is_held(self, store: Any) -> None:
        _spent(store, ANN, 50)
        limits = [*_tokens("user", 1000), *_tokens("conversation", 10), *_tokens("user", 1)]
        refused = store.reserve(ANN, "h1", Hold(99), limits, TTL)
        assert (refused.hold_id, refused.refused, refused.recorded) == ("h1", 1, 50)
        assert store.release("h1") is False
        assert store.reserve(ANN, "h2", Hold(), _tokens("user", 0), TTL).held == 0

    def test_reserving_again_under_one_id_replaces_the_hold(self, store: Any) -> None:
        assert store.reserve(ANN, "h1", Hold(400), [], TTL).granted
        assert store.reserve(ANN, "h1", Hold(300), _tokens("user", 0), TTL).granted
        assert store.reserve(ANN, "h2", Hold(), _tokens("user", 0), TTL).held == 300

    def test_a_hold_expires_after_its_ttl(self, store: Any) -> None:
        assert store.reserve(ANN, "brief", Hold(400), [], 1e-6).granted
        assert store.reserve(ANN, "long", Hold(100), [], TTL).granted
        # Any round trip outlasts a microsecond: the brief hold is gone, the long one is not.
        assert store.reserve(ANN, "h", Hold(), _tokens("user", 0), TTL).held == 100
        assert store.release("brief") is False and store.release("long") is True

    def test_abandon_drops_a_hold_without_waiting(self, store: Any) -> None:
        assert store.reserve(ANN, "h1", Hold(400), [], TTL).granted
        assert store.abandon("h1") is None
        store.abandon("never-held")  # never raises
        # Abandon does not wait for the drop: poll for it, within a deadline.
        deadline = time.monotonic() + WAIT
        while store.reserve(ANN, "h2", Hold(), _tokens("user", 0), TTL).held != 0:
            assert time.monotonic() < deadline, "the abandoned hold was never dropped"
            threading.Event().wait(0.005)

    def test_racing_reservations_never_hold_past_the_limit(self, store: Any) -> None:
        granted: list[str] = []
        start = threading.Barrier(12)

        def race(i: int) -> None:
            start.wait(WAIT)
            if store.reserve(ANN, f"h{i}", Hold(100), _tokens("user", 1000, own=100), TTL).granted:
                granted.append(f"h{i}")

        threads = [threading.Thread(target=race, args=(i,)) for i in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        assert len(granted) == 10, granted  # 10 x 100 fit 1000; the 11th and 12th do not

    def test_bad_reservations_are_refused_and_hold_nothing(self, store: Any) -> None:
        bad: list[tuple[Any, ...]] = [
            (ANN, "", Hold(1), [], TTL),
            (ANN, "x" * 65, Hold(1), [], TTL),
            (ANN, "h", Hold(-1), [], TTL),
            (ANN, "h", Hold(1, Decimal(-1)), [], TTL),
            (ANN, "h", {"tokens": 1}, [], TTL),
            (ANN, "h", Hold(1), [Limit("team", "tokens", 1)], TTL),
            (ANN, "h", Hold(1), [Limit("user", "words", 1)], TTL),
            (ANN, "h", Hold(1), [Limit("user", "tokens", 1.5)], TTL),  # type: ignore[arg-type]
            (ANN, "h", Hold(1), [Limit("user", "cost", Decimal("NaN"))], TTL),
            (Conv(None, "c"), "h", Hold(1), _tokens("user", 1), TTL),
            (ANN, "h", Hold(1), "limits", TTL),
            (ANN, "h", Hold(1), [], 0),
            (ANN, "h", Hold(1), [], float("inf")),
            ("", "h", Hold(1), [], TTL),
        ]
        for args in bad:
            with pytest.raises((ValueError, TypeError)):
                store.reserve(*args)
        with pytest.raises(ValueError, match="hold id"):
            store.release("")
        assert store.reserve(ANN, "ok", Hold(), _tokens("user", 0), TTL).held == 0
