"""store.search as a ranked query of an attached RecallIndex: no scans, tenant-safe,
substring semantics on request, back to the scan when the index goes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import otpmem
from otpmem.actors import faults
from otpmem.memory.recall import RecallIndex
from otpmem.messages import Conv
from otpmem.stores import MemoryStore, MemoryStoreHandle, StoreError, ranking
from otpmem.supervisors import Supervisor


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


@pytest.fixture
def store() -> Iterator[MemoryStoreHandle]:
    handle = MemoryStore.start_link()
    yield handle
    handle.stop()


def fill(store: MemoryStoreHandle) -> None:
    store.add(Conv("ann", "a"), [user("hello world"), user("world peace, world cup")])
    store.add(Conv("ann", "b"), [user("shellfish allergy"), user("a worldwide view")])
    store.add(Conv("bob", "a"), [user("world world world world")])


def test_without_an_index_search_is_the_substring_scan(store: MemoryStoreHandle) -> None:
    fill(store)
    hits = store.search("world", user_id="ann")
    # Substring: "worldwide" matches too, and the score is the count of occurrences.
    first = hits[0]
    assert (first.conv.conversation_id, first.index, first.score) == ("a", 1, 2)
    assert {h.message["content"] for h in hits} >= {"a worldwide view"}
    with pytest.raises(StoreError, match="no RecallIndex"):
        store.search("world", user_id="ann", mode="ranked")
    with pytest.raises(ValueError, match="mode"):
        store.search("world", user_id="ann", mode="fuzzy")


def test_an_attached_index_answers_search_ranked_and_reads_nothing(
    store: MemoryStoreHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(store)
    index = RecallIndex.start_link(store)
    try:
        index.refresh(user_id="ann")
        reads: list[Any] = []
        real_get = MemoryStoreHandle.get

        def counted(self: MemoryStoreHandle, conv: Any, last: int | None = None) -> Any:
            reads.append((conv, last))
            return real_get(self, conv, last)

        monkeypatch.setattr(MemoryStoreHandle, "get", counted)
        hits = store.search("world", user_id="ann")
        # Nothing new since the refresh: no scan, only the newest message of each of ann's
        # conversations (to see a clear and rewrite), and nothing of bob's.
        assert sorted(reads) == [(Conv("ann", "a"), 1), (Conv("ann", "b"), 1)]
        # BM25 over (stemmed) words: "worldwide" is another one; the denser message ranks first.
        assert [(h.conv, h.index) for h in hits] == [(Conv("ann", "a"), 1), (Conv("ann", "a"), 0)]
        assert all(type(h.score) is float and h.score > 0 for h in hits)
        assert hits[0].score > hits[1].score
        # bx-ai's semantics on request, from the index as well.
        reads.clear()
        substring = store.search("world", user_id="ann", mode="substring")
        assert all(last == 1 for _, last in reads)
        assert (substring[0].index, substring[0].score) == (1, 2)
        assert "a worldwide view" in [h.message["content"] for h in substring]
        # A write is seen by the next search (the index catches up on the tenant).
        store.add(Conv("ann", "b"), [user("world world world, the whole world")])
        assert store.search("world", user_id="ann", limit=1)[0].index == 2
        assert all(h.conv.user_id == "bob" for h in store.search("world", user_id="bob"))
    finally:
        index.stop()
    # Detached on exit: the scan again, and nothing is left attached.
    assert store.search("world", user_id="ann")[0].score == 4
    assert ranking.attached(store) is None and not ranking._attached


def test_a_named_store_handle_finds_an_index_given_its_process_and_back() -> None:
    store = MemoryStore.start_link(name="search-named")
    try:
        store.add(Conv("ann", "c"), [user("otters and seals"), user("otters")])
        index = RecallIndex.start_link(store)  # by process
        try:
            named = MemoryStore.named("search-named")
            assert type(named.search("otters", user_id="ann")[0].score) is float
        finally:
            index.stop()
        index = RecallIndex.start_link(MemoryStore.named("search-named"))  # by name
        try:
            assert type(store.search("otters", user_id="ann")[0].score) is float
            assert store.search("otters", user_id="ann")[0].index == 1
        finally:
            index.stop()
        assert store.search("otters", user_id="ann")[0].score == 1
    finally:
        store.stop()


def test_a_killed_index_detaches_and_its_restarted_incarnation_attaches_again() -> None:
    sup = Supervisor.start_link(
        [
            MemoryStore.child_spec("search-store"),
            RecallIndex.child_spec(MemoryStore.named("search-store"), "search-index"),
        ],
        strategy="rest_for_one",
    )
    store: MemoryStoreHandle = MemoryStore.named("search-store")
    try:
        store.add(Conv("ann", "c"), [user("walrus walrus"), user("a walrus")])
        assert type(store.search("walrus", user_id="ann")[0].score) is float
        index = RecallIndex.named("search-index")
        old = index.pid
        faults.kill(index)
        sup.sync()
        assert index.pid != old
        hits = store.search("walrus", user_id="ann")
        assert type(hits[0].score) is float and hits[0].index == 0
    finally:
        sup.stop()


def test_the_application_ranks_the_default_stores_search() -> None:
    with otpmem.running():
        store = otpmem.default_store()
        store.add(Conv("ann", "c"), [user("I like jazz"), user("jazz, jazz and more jazz")])
        store.add(Conv("bob", "c"), [user("jazz jazz jazz jazz jazz")])
        hits = store.search("jazz", user_id="ann")
        assert [h.index for h in hits] == [1, 0]
        assert all(type(h.score) is float for h in hits)
        assert {h.conv.user_id for h in hits} == {"ann"}
        assert store.search("jazz", user_id="ann", mode="substring")[0].score == 3


# -- tenancy under adversarial ids ------------------------------------------------------------

ids = st.one_of(
    st.sampled_from(["a", "a:b", "a\x00", "A", "\uff41", "../a", "'; DROP", "null", "a" * 300]),
    st.text(min_size=1, max_size=12),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(owners=st.lists(ids, min_size=2, max_size=5, unique=True), anonymous=st.booleans())
def test_a_search_or_recall_never_returns_another_tenants_message(
    owners: list[str], anonymous: bool
) -> None:
    store = MemoryStore.start_link()
    index = RecallIndex.start_link(store)
    try:
        tenants: list[str | None] = [*owners, None] if anonymous else list(owners)
        for owner in tenants:
            # Same conversation ids, and text every query matches.
            for conv_id in ("c", owner or "x"):
                store.add(Conv(owner, conv_id), [user(f"shared secret words of {owner!r}")])
        for owner in tenants:
            for hits in (
                store.search("shared secret", user_id=owner, limit=50),
                store.search("secret", user_id=owner, limit=50, mode="substring"),
            ):
                assert hits and {h.conv.user_id for h in hits} == {owner}
                assert all(repr(owner) in h.message["content"] for h in hits)
            recalled = index.get_relevant("shared secret", user_id=owner, limit=50)
            assert recalled and {h.conv.user_id for h in recalled} == {owner}
    finally:
        index.stop()
        store.stop()


def test_the_application_starts_its_index_without_numpy_and_loads_it_on_a_query() -> None:
    # The index in the tree must not slow the start (make demo's throughput counts it):
    # its ranking (numpy, the embedder) waits for the first query.
    code = (
        "import sys, otpmem\n"
        "from otpmem.messages import Conv\n"
        "with otpmem.running():\n"
        "    store = otpmem.default_store()\n"
        "    store.add(Conv('ann', 'c'), [{'role': 'user', 'content': 'numpy later'}])\n"
        "    assert 'numpy' not in sys.modules, 'starting the index imported numpy'\n"
        "    hits = store.search('later', user_id='ann')\n"
        "    assert 'numpy' in sys.modules and type(hits[0].score) is float\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60.0, check=False
    )
    assert done.stdout.strip() == "ok", done.stderr
