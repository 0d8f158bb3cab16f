"""``otpmem fork`` run as a user runs it: the copy it makes, a retry with --key that forks
once, and a one-line error (exit 2, no traceback, nothing written) for an existing target,
a missing conversation, a wrong flag, a missing, empty or locked directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from otpmem.cli import main
from otpmem.messages import Conv
from otpmem.stores import LevelDBStore
from tests.cli_support import CONVERSATIONS, LockHolder, fails_with, otpmem

C1 = Conv("alice", "c1")


def stored(path: Path) -> dict[Conv, list[dict[str, object]]]:
    """Every conversation of the store at ``path``, read after the command exited."""
    store = LevelDBStore.start_link(path)
    try:
        return {conv: store.get(conv) for conv in store.conversations()}
    finally:
        store.stop()


def test_fork_copies_the_first_n_messages_and_inspect_shows_them(store_dir: Path) -> None:
    result = otpmem("fork", "c1", "c1-b", "--user", "alice", "--at", "2", "--dir", store_dir)

    assert result.returncode == 0, str(result)
    assert (
        result.stdout == f"forked 2 messages of 'c1' into 'c1-b' of user 'alice' in {store_dir}\n"
    )
    shown = otpmem("inspect", store_dir, "c1-b", "--user", "alice")
    assert [json.loads(line) for line in shown.stdout.splitlines()] == CONVERSATIONS[C1][:2]
    held = stored(store_dir)
    assert held[C1] == CONVERSATIONS[C1], "the source is untouched"
    assert held[Conv("alice", "c1-b")] == CONVERSATIONS[C1][:2]


@pytest.mark.parametrize(
    "order",
    [
        ["--dir", "STORE", "anon", "anon-b"],
        ["anon", "--dir", "STORE", "anon-b"],
        ["anon", "anon-b", "--dir", "STORE"],
    ],
    ids=["dir-first", "dir-between", "dir-last"],
)
def test_fork_of_a_conversation_of_no_user_takes_its_flags_in_any_order(
    store_dir: Path, order: list[str]
) -> None:
    result = otpmem("fork", *[str(store_dir) if a == "STORE" else a for a in order])

    assert result.returncode == 0, str(result)
    assert "forked 1 message of 'anon' into 'anon-b' in" in result.stdout
    assert stored(store_dir)[Conv(None, "anon-b")] == CONVERSATIONS[Conv(None, "anon")]


def test_fork_run_again_with_its_key_forks_once(store_dir: Path) -> None:
    args = ["fork", "c1", "c1-b", "--user", "alice", "--key", "branch-1", "--dir", store_dir]
    first, second = otpmem(*args), otpmem(*args)

    assert first.returncode == second.returncode == 0, str(second)
    assert first.stdout == second.stdout and "forked 3 messages" in second.stdout
    assert stored(store_dir)[Conv("alice", "c1-b")] == CONVERSATIONS[C1]


def test_fork_into_a_conversation_that_holds_messages_exits_2_and_writes_nothing(
    store_dir: Path,
) -> None:
    result = otpmem("fork", "c1", "c2", "--user", "alice", "--dir", store_dir)

    fails_with(result, 2, "cannot fork into 'c2' of user 'alice': it holds 2 messages")
    assert stored(store_dir) == CONVERSATIONS


def test_fork_of_a_missing_conversation_names_the_user_to_add(store_dir: Path) -> None:
    result = otpmem("fork", "b1", "b1-copy", "--dir", store_dir)

    fails_with(result, 2, "no conversation 'b1' without a user", "(add --user bob)")
    assert stored(store_dir) == CONVERSATIONS


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["c1", "c1-b", "--user", "alice", "--dri", "STORE"], "No such option '--dri'"),
        (["c1", "c1-b", "--user", "alice"], "Missing option '--dir'"),
        (["c1", "--dir", "STORE"], "Missing argument 'INTO'"),
        (["c1", "c1-b", "--at", "-1", "--dir", "STORE"], "'--at': -1 is not in the range"),
        (["c1", "c1", "--user", "alice", "--dir", "STORE"], "the same conversation"),
        (["c1", "c1-b", "--user", "alice", "--key", "", "--dir", "STORE"], "--key must be"),
        (["c1", "c1-b", "--dir", "MISSING"], "MISSING does not exist"),
        (["c1", "c1-b", "--dir", "FILE"], "FILE is a file, not a store's directory"),
        (["c1", "c1-b", "--dir", "EMPTY"], "there is no LevelDB store at 'EMPTY'"),
    ],
)
def test_wrong_flags_and_directories_exit_2_in_one_line_and_create_nothing(
    store_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    message: str,
) -> None:
    """In this process (main, as the console script calls it): one child per case would
    cost a second each; the installed command's own path is tested above and below."""
    (tmp_path / "FILE").write_text("x", encoding="utf-8")
    (tmp_path / "EMPTY").mkdir()
    paths = {
        "MISSING": tmp_path / "MISSING",
        "FILE": tmp_path / "FILE",
        "EMPTY": tmp_path / "EMPTY",
    }
    paths["STORE"] = store_dir
    expected = message
    for name, path in paths.items():
        expected = expected.replace(name, str(path))

    status = main(["fork", *[str(paths.get(a, a)) for a in args]])

    out, err = capsys.readouterr()
    assert status == 2 and out == "", err
    assert err.startswith("otpmem fork: ") and expected in err, err
    assert len(err.strip().splitlines()) <= 2  # the error, and for a usage error: see --help
    assert not (tmp_path / "MISSING").exists()
    assert list((tmp_path / "EMPTY").iterdir()) == []
    assert stored(store_dir) == CONVERSATIONS


def test_fork_in_a_locked_directory_exits_2_in_one_line(
    store_dir: Path, lock_holder: list[LockHolder]
) -> None:
    lock_holder.append(LockHolder(store_dir))

    text = fails_with(otpmem("fork", "c1", "c1-b", "--user", "alice", "--dir", store_dir), 2)

    assert "lock" in text and len(text.strip().splitlines()) == 1
    lock_holder[0].release()
    assert Conv("alice", "c1-b") not in stored(store_dir)


def test_fork_in_a_run_on_postgres_forks_in_its_schema(
    tmp_path: Path, postgres_dsn: str, pg_namespace: str
) -> None:
    from otpmem.stores import PostgresStore
    from tests.test_cli_postgres_runs import run_of

    run = run_of(tmp_path, {"kind": "postgres", "dsn": postgres_dsn, "namespace": pg_namespace})
    store = PostgresStore.start_link(postgres_dsn, namespace=pg_namespace)
    try:
        store.add(C1, CONVERSATIONS[C1])

        result = otpmem("fork", "c1", "c1-b", "--user", "alice", "--at", "2", "--dir", run)

        assert result.returncode == 0, str(result)
        assert "forked 2 messages of 'c1' into 'c1-b' of user 'alice'" in result.stdout
        assert store.get(Conv("alice", "c1-b")) == CONVERSATIONS[C1][:2]
        assert not (run / "CURRENT").exists()  # no LevelDB store made beside the run
    finally:
        store.stop()
