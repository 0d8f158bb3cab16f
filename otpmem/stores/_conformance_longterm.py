"""The conformance tests of a ``LongTermStore``: facts, profiles, usage, cursors (see
``testing``)."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest

from ..messages import Conv
from .longterm import Fact, FactLimitReached, Profile, Usage

ANN, BOB = Conv("ann", "c1"), Conv("bob", "c1")


def _answer(prompt: int, completion: int, cost: str | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if cost is not None:
        usage["cost"] = cost
    return {"role": "assistant", "content": "ok", "metadata": {"usage": usage}}


class LongTermConformance:
    """Subclass with a ``store`` fixture; every test here must pass for any LongTermStore."""

    def test_a_fact_is_versioned_from_one_and_read_back(self, store: Any) -> None:
        before = time.time()
        saved = store.save_fact(Fact("ann", "city", "Lyon", source=(ANN, 3)))
        assert (saved.version, saved.value, saved.source) == (1, "Lyon", (ANN, 3))
        assert before <= saved.created_at == saved.updated_at <= time.time()
        assert store.get_fact("ann", "city") == saved
        assert store.get_fact("ann", "other") is None
        assert store.get_fact("bob", "city") is None

    def test_a_change_supersedes_and_history_keeps_the_old_value(self, store: Any) -> None:
        first = store.save_fact(Fact("ann", "city", "Lyon"))
        second = store.save_fact(Fact("ann", "city", "Paris"))
        same = store.save_fact(Fact("ann", "city", "Paris"))
        assert (second.version, second.created_at) == (2, first.created_at)
        assert same == second, "an unchanged value is not a new version"
        closed = replace(first, valid_to=second.valid_from)  # closed, not erased
        assert store.fact_history("ann", "city") == [closed]
        assert store.get_facts("ann") == [second]

    def test_get_facts_lists_one_users_facts_by_key(self, store: Any) -> None:
        for key in ("b", "a", "c"):
            store.save_fact(Fact("ann", key, key.upper()))
        store.save_fact(Fact("bob", "a", "bob's"))
        assert [f.key for f in store.get_facts("ann")] == ["a", "b", "c"]
        assert [f.value for f in store.get_facts("bob")] == ["bob's"]

    def test_delete_keeps_the_history(self, store: Any) -> None:
        saved = store.save_fact(Fact("ann", "pet", "cat"))
        assert store.delete_fact("ann", "pet") is True
        assert store.delete_fact("ann", "pet") is False
        assert store.get_fact("ann", "pet") is None
        assert store.fact_history("ann", "pet") == [saved]

    def test_a_new_fact_past_the_cap_is_refused_not_dropped(self, store: Any) -> None:
        store.save_fact(Fact("ann", "a", "1"), max_facts=2)
        store.save_fact(Fact("ann", "b", "2"), max_facts=2)
        with pytest.raises(FactLimitReached, match="max_facts=2"):
            store.save_fact(Fact("ann", "c", "3"), max_facts=2)
        assert [f.key for f in store.get_facts("ann")] == ["a", "b"]
        assert store.save_fact(Fact("ann", "a", "changed"), max_facts=2).version == 2

    def test_evict_replaces_the_least_recently_updated(self, store: Any) -> None:
        store.save_fact(Fact("ann", "old", "1"))
        store.save_fact(Fact("ann", "new", "2"))
        store.save_fact(Fact("ann", "old", "touched"))  # now "new" is the stalest
        store.save_fact(Fact("ann", "third", "3"), max_facts=2, evict=True)
        assert [f.key for f in store.get_facts("ann")] == ["old", "third"]
        assert [f.value for f in store.fact_history("ann", "new")] == ["2"]

    def test_bad_facts_are_refused_and_store_nothing(self, store: Any) -> None:
        bad: list[Any] = [
            Fact("", "k", "v"),
            Fact("ann", "", "v"),
            Fact("ann", "k" * 201, "v"),
            Fact("ann", "k", 42),  # type: ignore[arg-type]
            Fact("ann", "k", "v", source=(BOB, 1)),  # another user's conversation
            Fact("ann", "k", "v", source=(ANN, -1)),
            {"user_id": "ann", "key": "k", "value": "v"},
        ]
        for fact in bad:
            with pytest.raises((ValueError, TypeError)):
                store.save_fact(fact)
        with pytest.raises((ValueError, TypeError)):
            store.save_fact(Fact("ann", "k", "v"), max_facts=0)
        assert store.get_facts("ann") == []

    def test_save_facts_moves_the_cursor_in_the_same_write(self, store: Any) -> None:
        store.add(ANN, [{"role": "user", "content": "I live in Lyon"}] * 4)
        store.request_extraction(ANN, 4)
        assert store.pending_extractions() == [(ANN, 4)]
        store.save_facts("ann", [Fact("ann", "city", "Lyon")], cursor=(ANN, 2))
        assert store.extraction_cursor(ANN) == 2
        assert store.pending_extractions() == [(ANN, 4)], "only part of the job is done"
        with pytest.raises(FactLimitReached):
            store.save_facts(
                "ann", [Fact("ann", "x", "1"), Fact("ann", "y", "2")], cursor=(ANN, 4), max_facts=2
            )
        assert store.extraction_cursor(ANN) == 2, "a refused write moves no cursor"
        assert store.get_fact("ann", "x") is None
        store.save_facts("ann", [], ["city"], cursor=(ANN, 4))
        assert (store.extraction_cursor(ANN), store.pending_extractions()) == (4, [])
        assert store.get_fact("ann", "city") is None
        with pytest.raises(ValueError):
            store.save_facts("ann", [], cursor=(BOB, 1))

    def test_profiles_are_replaced_and_deleted(self, store: Any) -> None:
        assert store.get_profile("ann") is None
        saved = store.save_profile(Profile("ann", "Lives in Lyon.", {"tone": "brief"}))
        assert (saved.summary, dict(saved.metadata)) == ("Lives in Lyon.", {"tone": "brief"})
        assert saved.updated_at > 0
        store.save_profile(Profile("ann", "Moved to Paris."))
        assert store.get_profile("ann").summary == "Moved to Paris."
        assert store.delete_profile("ann") is True
        assert store.delete_profile("ann") is False
        with pytest.raises((ValueError, TypeError)):
            store.save_profile(Profile("", "x"))

    def test_usage_is_summed_from_stored_answers(self, store: Any) -> None:
        store.add(ANN, [{"role": "user", "content": "hi"}, _answer(10, 5, "0.0015")])
        store.add(ANN, [_answer(20, 1)])
        store.add(Conv("ann", "c2"), [_answer(1, 1, "0.5")])
        store.add(BOB, [_answer(100, 100, "1")])
        assert store.usage(ANN) == Usage(30, 6, 36, Decimal("0.0015"))
        assert store.user_usage("ann") == Usage(31, 7, 38, Decimal("0.5015"))
        assert store.user_usage("bob").cost == Decimal("1")
        assert store.usage(Conv("ann", "none")) == Usage()

    def test_a_retried_keyed_answer_is_counted_once(self, store: Any) -> None:
        store.add(ANN, [_answer(10, 5)], idempotency_key="t:1")
        store.add(ANN, [_answer(10, 5)], idempotency_key="t:1")
        assert store.usage(ANN).total_tokens == 15

    def test_usage_windows_and_what_clear_and_forget_reset(self, store: Any) -> None:
        store.add(ANN, [_answer(10, 5, "0.25")])
        assert store.usage(ANN, since=0) == store.usage(ANN)
        assert store.usage(ANN, since=time.time() + 60) == Usage()
        assert store.user_usage("ann", since=time.time() - 60).total_tokens == 15
        store.clear(ANN)
        assert store.usage(ANN) == Usage() and store.usage(ANN, since=0) == Usage()
        assert store.user_usage("ann").cost == Decimal("0.25"), "a clear keeps the spend"
        assert store.user_usage("ann", since=0).total_tokens == 15
        store.forget_user("ann")
        assert store.user_usage("ann") == Usage()
        assert store.user_usage("ann", since=0) == Usage()

    def test_forget_user_deletes_facts_profile_and_jobs_of_that_user_only(self, store: Any) -> None:
        for user, conv in (("ann", ANN), ("bob", BOB)):
            store.add(conv, [{"role": "user", "content": "x"}])
            store.save_fact(Fact(user, "k", "v"))
            store.save_profile(Profile(user, "p"))
            store.request_extraction(conv, 1)
        store.save_facts("ann", [], cursor=(ANN, 1))
        store.save_facts("ann", [], cursor=(Conv("ann", "never-written"), 0))
        store.forget_user("ann")
        assert store.extraction_cursor(ANN) == 0
        assert store.get_facts("ann") == [] and store.fact_history("ann", "k") == []
        assert store.get_profile("ann") is None
        assert store.pending_extractions() == [(BOB, 1)]
        assert store.get_fact("bob", "k") is not None and store.get_profile("bob") is not None

    def test_clear_resets_the_cursor_and_drops_the_job(self, store: Any) -> None:
        store.add(ANN, [{"role": "user", "content": "x"}] * 3)
        store.save_facts("ann", [], cursor=(ANN, 3))
        store.request_extraction(ANN, 3)
        assert store.pending_extractions() == [], "nothing past the cursor to extract"
        store.clear(ANN)
        assert store.extraction_cursor(ANN) == 0
        store.add(ANN, [{"role": "user", "content": "y"}])
        store.request_extraction(ANN, 1)
        assert store.pending_extractions() == [(ANN, 1)]


T0 = 1_700_000_000.0  # a fixed past, so every time in these tests is exact
DAY = 86_400.0


class FactsInTimeConformance:
    """Facts that know when they were true (``valid_from``, ``valid_to``, ``as_of``):
    subclass with a ``store`` fixture, as ``LongTermConformance``."""

    def test_a_correction_closes_the_old_value_and_as_of_answers_the_past(self, store: Any) -> None:
        lyon = store.save_fact(Fact("ann", "city", "Lyon", valid_from=T0))
        paris = store.save_fact(Fact("ann", "city", "Paris", valid_from=T0 + 10 * DAY))
        assert (lyon.valid_from, lyon.valid_to, paris.valid_to) == (T0, None, None)
        assert store.get_facts("ann") == [paris], "without as_of: what is true now"
        assert [f.value for f in store.get_facts("ann", as_of=T0 + DAY)] == ["Lyon"]
        assert store.get_facts("ann", as_of=T0 + DAY)[0].valid_to == T0 + 10 * DAY
        assert [f.value for f in store.get_facts("ann", as_of=T0 + 10 * DAY)] == ["Paris"]
        assert store.get_facts("ann", as_of=T0 - 1) == [], "nothing was known yet"
        assert store.fact_history("ann", "city") == [replace(lyon, valid_to=T0 + 10 * DAY)]

    def test_datetimes_and_posix_seconds_name_the_same_time(self, store: Any) -> None:
        when = datetime.fromtimestamp(T0, tz=timezone(timedelta(hours=2)))
        saved = store.save_fact(Fact("ann", "job", "nurse", valid_from=when))
        assert saved.valid_from == T0 and isinstance(saved.valid_from, float)
        assert store.get_facts("ann", as_of=when) == [saved]
        assert store.get_facts("ann", as_of=datetime.fromtimestamp(T0 - 1, tz=UTC)) == []

    def test_a_save_without_times_is_true_from_the_save(self, store: Any) -> None:
        before = time.time()
        saved = store.save_fact(Fact("ann", "pet", "cat"))
        assert before <= saved.valid_from <= time.time() and saved.valid_to is None
        assert store.get_facts("ann", as_of=time.time()) == [saved]
        assert store.get_facts("ann", as_of=before - 60) == []

    def test_close_fact_ends_it_without_a_successor(self, store: Any) -> None:
        store.save_fact(Fact("ann", "job", "nurse", valid_from=T0))
        assert store.close_fact("ann", "job", valid_to=T0 + DAY) is True
        assert store.close_fact("ann", "job", valid_to=T0 + DAY) is False, "nothing open"
        assert store.close_fact("ann", "never", valid_to=T0) is False
        assert store.get_fact("ann", "job") is None and store.get_facts("ann") == []
        [then] = store.get_facts("ann", as_of=T0 + 1)
        assert (then.value, then.valid_from, then.valid_to) == ("nurse", T0, T0 + DAY)
        assert store.get_facts("ann", as_of=T0 + DAY) == []
        again = store.save_fact(Fact("ann", "job", "doctor", valid_from=T0 + 2 * DAY))
        assert again.version == 1 and store.get_facts("ann") == [again]

    def test_closing_now_and_saving_an_ended_fact(self, store: Any) -> None:
        store.save_fact(Fact("ann", "mood", "glad", valid_from=T0))
        before = time.time()
        assert store.close_fact("ann", "mood") is True
        [closed] = store.fact_history("ann", "mood")
        assert before <= closed.valid_to <= time.time()
        ended = store.save_fact(Fact("ann", "school", "Lycee", valid_from=T0, valid_to=T0 + DAY))
        assert ended.valid_to == T0 + DAY
        assert store.get_fact("ann", "school") is None, "an ended fact is not current"
        assert [f.key for f in store.get_facts("ann", as_of=T0 + 1)] == ["mood", "school"]
        assert store.get_facts("ann", as_of=T0 + 1)[1] == ended

    def test_a_delete_erases_what_closing_keeps(self, store: Any) -> None:
        store.save_fact(Fact("ann", "city", "Lyon", valid_from=T0))
        store.save_fact(Fact("ann", "city", "Paris", valid_from=T0 + DAY))
        assert store.delete_fact("ann", "city") is True
        assert store.get_facts("ann") == []
        assert [f.value for f in store.get_facts("ann", as_of=T0 + 1)] == ["Lyon"]
        assert store.get_facts("ann", as_of=T0 + 2 * DAY) == [], "the deleted value never was"

    def test_bad_times_are_refused_naming_the_field_and_store_nothing(self, store: Any) -> None:
        naive = datetime(2024, 3, 12, 9, 30)
        cases: list[tuple[Any, str]] = [
            (Fact("ann", "k", "v", valid_from=naive), "valid_from"),
            (Fact("ann", "k", "v", valid_to=naive), "valid_to"),
            (Fact("ann", "k", "v", valid_from="2024-03-12"), "valid_from"),  # type: ignore[arg-type]
            (Fact("ann", "k", "v", valid_from=float("nan")), "valid_from"),
            (Fact("ann", "k", "v", valid_from=True), "valid_from"),
            (Fact("ann", "k", "v", valid_from=T0, valid_to=T0 - 1), "valid_to"),
        ]
        for fact, field_name in cases:
            with pytest.raises(ValueError, match=field_name):
                store.save_fact(fact)
        assert store.get_facts("ann") == [] and store.fact_history("ann", "k") == []
        store.save_fact(Fact("ann", "city", "Paris", valid_from=T0))
        with pytest.raises(ValueError, match="valid_from"):
            store.save_fact(Fact("ann", "city", "Lyon", valid_from=T0 - DAY))
        with pytest.raises(ValueError, match="valid_to"):
            store.close_fact("ann", "city", valid_to=T0 - 1)
        with pytest.raises(ValueError, match="valid_to"):
            store.close_fact("ann", "city", valid_to=naive)
        with pytest.raises(ValueError, match="as_of"):
            store.get_facts("ann", as_of=naive)
        with pytest.raises(ValueError, match="as_of"):
            store.get_facts("ann", as_of="yesterday")
        [kept] = store.get_facts("ann")
        assert (kept.value, kept.version, store.fact_history("ann", "city")) == ("Paris", 1, [])

    def test_as_of_never_answers_another_users_facts(self, store: Any) -> None:
        store.save_fact(Fact("ann", "city", "Lyon", valid_from=T0))
        store.save_fact(Fact("ann", "city", "Paris", valid_from=T0 + DAY))
        store.save_fact(Fact("bob", "pet", "dog", valid_from=T0))
        assert [(f.user_id, f.value) for f in store.get_facts("bob", as_of=T0 + 1)] == [
            ("bob", "dog")
        ]
        assert {f.user_id for f in store.get_facts("ann", as_of=T0 + 1)} == {"ann"}
        assert store.get_facts("carl", as_of=T0 + 1) == []

    def test_a_retried_save_applies_once(self, store: Any) -> None:
        fact = Fact("ann", "city", "Lyon", valid_from=T0)
        first = store.save_fact(fact)
        assert store.save_fact(fact) == first, "the same value again is not a correction"
        assert store.fact_history("ann", "city") == []
        assert store.get_facts("ann", as_of=T0 + 1) == [first]

    def test_save_facts_closes_and_corrects_in_one_write(self, store: Any) -> None:
        store.save_facts("ann", [Fact("ann", "a", "1", valid_from=T0), Fact("ann", "b", "2")])
        saved = store.save_facts(
            "ann", [Fact("ann", "a", "1b", valid_from=T0 + DAY)], closes={"b": time.time()}
        )
        assert [f.value for f in saved] == ["1b"]
        assert [f.value for f in store.get_facts("ann")] == ["1b"]
        with pytest.raises(ValueError, match="valid_to"):
            store.save_facts("ann", [], closes={"a": None})
        with pytest.raises(ValueError, match="valid_to"):
            store.save_facts("ann", [Fact("ann", "c", "3")], closes={"a": T0})
        assert store.get_fact("ann", "c") is None, "a refused write saves nothing"
