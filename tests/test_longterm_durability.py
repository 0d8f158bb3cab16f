"""Facts, profiles, usage sums and cursors are as durable as messages: they survive a
supervised MemoryStore crash, a LevelDB reopen, and kill -9 of a writing process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from otpmem.actors import faults
from otpmem.messages import Conv
from otpmem.stores import Fact, LevelDBStoreHandle, MemoryStore, Profile, Usage
from otpmem.supervisors import Supervisor

ANN = Conv("ann", "c1")


def answer(prompt: int, completion: int, cost: str) -> dict[str, Any]:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "cost": cost}
    return {"role": "assistant", "content": "ok", "metadata": {"usage": usage}}


def write_everything(store: Any) -> None:
    store.add(ANN, [{"role": "user", "content": "I live in Lyon"}, answer(10, 5, "0.01")])
    store.save_facts("ann", [Fact("ann", "city", "Lyon", source=(ANN, 0))], cursor=(ANN, 2))
    store.save_fact(Fact("ann", "city", "Paris"))
    store.save_profile(Profile("ann", "Lives in Paris.", {"tone": "brief"}))
    store.request_extraction(Conv("ann", "c2"), 3)


def check_everything(store: Any) -> None:
    assert store.get_fact("ann", "city").value == "Paris"
    assert store.get_fact("ann", "city").version == 2
    assert [f.value for f in store.fact_history("ann", "city")] == ["Lyon"]
    assert store.fact_history("ann", "city")[0].source == (ANN, 0)
    assert store.get_profile("ann").summary == "Lives in Paris."
    assert store.usage(ANN) == Usage(10, 5, 15, Decimal("0.01"))
    assert store.user_usage("ann", since=0) == Usage(10, 5, 15, Decimal("0.01"))
    assert store.extraction_cursor(ANN) == 2
    assert store.pending_extractions() == [(Conv("ann", "c2"), 3)]


def test_long_term_records_survive_a_leveldb_reopen(
    opened: Callable[..., LevelDBStoreHandle], tmp_path: Path
) -> None:
    store = opened(tmp_path / "db")
    write_everything(store)
    store.stop()
    store = opened(tmp_path / "db")
    check_everything(store)
    store.add(ANN, [answer(1, 1, "1")])
    assert store.user_usage("ann").cost == Decimal("1.01"), "the sums go on from disk"


def test_long_term_records_survive_a_supervised_memory_store_crash() -> None:
    sup = Supervisor.start_link([MemoryStore.child_spec("longterm-crash")])
    try:
        store = MemoryStore.named("longterm-crash")
        write_everything(store)
        faults.kill(store, grace=5.0)
        sup.sync_tree()
        check_everything(store)
    finally:
        sup.stop()


def test_a_kill_9_loses_no_acknowledged_fact_or_usage(tmp_path: Path) -> None:
    path = tmp_path / "db"
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        from otpmem.messages import Conv
        from otpmem.stores import Fact, LevelDBStore
        store = LevelDBStore.start_link({str(path)!r})
        conv = Conv("ann", "c1")
        usage = {{"prompt_tokens": 1, "completion_tokens": 1, "cost": "0.5"}}
        answer = {{"role": "assistant", "content": "a", "metadata": {{"usage": usage}}}}
        for i in range(20):
            store.add(conv, [answer])
            store.save_facts("ann", [Fact("ann", f"k{{i}}", str(i))], cursor=(conv, i + 1))
            print(i, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == -9, result.stderr
    acknowledged = len(result.stdout.split())
    assert acknowledged == 20
    from otpmem.stores import LevelDBStore

    store = LevelDBStore.start_link(path)
    try:
        assert len(store.get_facts("ann")) == acknowledged
        assert store.extraction_cursor(ANN) == acknowledged
        assert store.usage(ANN) == Usage(20, 20, 40, Decimal("10.0"))
        assert store.user_usage("ann") == store.usage(ANN)
    finally:
        store.stop()


USERS = st.sampled_from(["a", "ab", "a\x00b", "é", "b", "a b", "0" * 40])
KEYS = st.sampled_from(["k", "k2", "kk", "k\x00", "ünï", "a" * 200])


@settings(max_examples=40, deadline=None)
@given(
    writes=st.lists(st.tuples(USERS, KEYS, st.text(max_size=5)), min_size=1, max_size=20),
    forget=USERS,
)
def test_facts_never_cross_users_whatever_their_ids(
    writes: list[tuple[str, str, str]], forget: str
) -> None:
    import shutil
    import tempfile

    from otpmem.stores import LevelDBStore

    root = Path(tempfile.mkdtemp(prefix="otpmem-tenancy-"))
    stores = [MemoryStore.start_link(), LevelDBStore.start_link(root / "db")]
    try:
        model: dict[str, dict[str, str]] = {}
        for user, key, value in writes:
            for store in stores:
                store.save_fact(Fact(user, key, value))
            model.setdefault(user, {})[key] = value
        for store in stores:
            store.forget_user(forget)
        model.pop(forget, None)
        for store in stores:
            for user in {u for u, _, _ in writes} | {forget}:
                facts = store.get_facts(user)
                assert {f.key: f.value for f in facts} == model.get(user, {})
                assert all(f.user_id == user for f in facts)
    finally:
        for store in stores:
            store.stop()
        shutil.rmtree(root, ignore_errors=True)
