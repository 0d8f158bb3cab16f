"""The application on PostgreSQL: ``otpmem.start(store="postgres", dsn=...)`` supervises a
PostgresStore as its default store; agents write through it, a killed store comes back, and
a second process's application on the same schema sees the same conversations."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

import otpmem
from otpmem.actors import faults, whereis
from otpmem.llm import ScriptedModel
from otpmem.messages import Conv
from otpmem.stores import DEFAULT_STORE_NAME, StoreUnavailable
from otpmem.stores.postgres import PostgresStore, PostgresStoreHandle

WAIT = 60.0


@pytest.fixture
def no_app() -> Iterator[None]:
    """No application before the test, none after it."""
    assert whereis("otpmem") is None and whereis(DEFAULT_STORE_NAME) is None
    yield
    assert whereis("otpmem") is None and whereis(DEFAULT_STORE_NAME) is None


def test_the_default_store_is_a_supervised_postgres_store(
    postgres_dsn: str, pg_namespace: str, no_app: None
) -> None:
    with otpmem.running(dsn=postgres_dsn, namespace=pg_namespace) as root:
        store = otpmem.default_store()
        assert isinstance(store, PostgresStoreHandle)
        agent = otpmem.start_agent(
            llm=ScriptedModel(lambda messages, tools: f"saw {len(messages)}"),
            conversation_id="c1",
            user_id="ann",
            name="pg-agent",
        )
        assert agent.run("hello", turn_id="t0").content == "saw 1"
        first = store.pid
        faults.kill(whereis(DEFAULT_STORE_NAME))
        root.sync_tree()
        assert agent.run("again", turn_id="t1").content == "saw 3"
        assert store.pid != first
        contents = [m["content"] for m in store.get(Conv("ann", "c1"))]
        assert contents == ["hello", "saw 1", "again", "saw 3"]
    # Committed in PostgreSQL: a store opened afterwards reads them back.
    reader = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        assert reader.count(Conv("ann", "c1")) == 4
    finally:
        reader.stop()


def test_a_second_process_application_shares_the_conversations(
    postgres_dsn: str, pg_namespace: str, no_app: None
) -> None:
    script = textwrap.dedent(
        f"""
        import otpmem
        from otpmem.messages import Conv
        with otpmem.running(store="postgres", dsn={postgres_dsn!r}, namespace={pg_namespace!r}):
            store = otpmem.default_store()
            store.add(Conv("ann", "shared"), [{{"role": "user", "content": "from the child"}}])
            print(store.count(Conv("ann", "shared")), flush=True)
        """
    )
    with otpmem.running(store="postgres", dsn=postgres_dsn, namespace=pg_namespace):
        store = otpmem.default_store()
        store.add(Conv("ann", "shared"), [{"role": "user", "content": "from the parent"}])
        child = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT
        )
        assert child.returncode == 0, child.stderr
        assert child.stdout.split() == ["2"]
        assert [m["content"] for m in store.get(Conv("ann", "shared"))] == [
            "from the parent",
            "from the child",
        ]


def test_a_killed_embedded_store_comes_back_to_its_own_server(run_dir: Path) -> None:
    # No DSN, no data_dir: the embedded server's temporary directory is chosen once, so
    # the restarted store finds its conversations instead of a new, empty server.
    script = textwrap.dedent(
        """
        import otpmem
        from otpmem.actors import faults, whereis
        from otpmem.messages import Conv
        from otpmem.stores import DEFAULT_STORE_NAME
        with otpmem.running(store="postgres", namespace="embedded") as root:
            store = otpmem.default_store()
            store.add(Conv("ann", "c"), [{"role": "user", "content": "kept"}])
            first = store.pid
            faults.kill(whereis(DEFAULT_STORE_NAME))
            root.sync_tree()
            assert store.pid != first
            print(store.count(Conv("ann", "c")), flush=True)
        """
    )
    # Its temporary directory under the fixture's, which stops what is left and removes it.
    env = {**os.environ, "TMPDIR": str(run_dir.parent)}
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=WAIT, env=env
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["1"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"store": "sqlite"}, "store must be one of memory, leveldb, postgres"),
        ({"store": "leveldb"}, "store='leveldb' needs data_dir"),
        ({"store": "memory", "data_dir": "x"}, "store='memory' keeps nothing on disk"),
        ({"store": "leveldb", "data_dir": "x", "dsn": "postgresql://h/db"}, "a dsn is for"),
        ({"dsn": "postgresql://h/db", "namespace": "Bad-Name"}, "namespace must be"),
        ({"dsn": "host=db port"}, 'not a PostgreSQL DSN: missing "=" after "port"'),
    ],
)
def test_arguments_that_cannot_work_are_refused_before_anything_starts(
    kwargs: dict[str, str], message: str, no_app: None
) -> None:
    with pytest.raises(ValueError, match=message):
        otpmem.start(**kwargs)  # type: ignore[arg-type]
    assert not (Path.cwd() / "x").exists()


def test_an_unreachable_server_is_a_store_error_naming_it(no_app: None, tmp_path: Path) -> None:
    dsn = f"postgresql://nobody@/db?host={tmp_path}&connect_timeout=2"
    with pytest.raises(Exception) as failed:
        otpmem.start(dsn=dsn)
    from otpmem.stores.leveldb.files import store_error_in

    cause = store_error_in(failed.value)
    assert isinstance(cause, StoreUnavailable)
    assert "cannot reach PostgreSQL" in str(cause)
