"""Commands that read do not write: inspect, export and search leave every file name, byte
and mtime of the store as they were, log and all. Commands that write never make a store
inside a directory that holds something else, and a failed import leaves nothing behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli_support import fails_with, make_store, otpmem, simulate_args, tree_state

READS = [
    ["inspect", "STORE"],
    ["inspect", "STORE", "c1", "--user", "alice", "--last", "2"],
    ["export", "STORE", "--all"],
    ["search", "STORE", "weather", "--user", "alice"],
]


@pytest.mark.parametrize("command", READS, ids=["list", "conversation", "export", "search"])
def test_a_read_leaves_the_store_directory_byte_for_byte_as_it_was(
    tmp_path: Path, command: list[str]
) -> None:
    store = make_store(tmp_path / "store")
    # Written and never reopened: the messages are in the log, which an open would replay
    # into a new table file, with a new MANIFEST and a rotated LOG.
    assert any(name.endswith(".log") for name in os.listdir(store))
    assert not any(name.endswith(".ldb") for name in os.listdir(store))
    before = tree_state(store)

    for _ in range(2):  # and again: the second read finds the same files
        result = otpmem(*[str(store) if a == "STORE" else a for a in command])
        assert result.returncode == 0, str(result)

    assert tree_state(store) == before
    assert result.stdout  # it did read something


def test_import_refuses_a_directory_that_holds_something_else(tmp_path: Path) -> None:
    notdb = tmp_path / "notdb"
    notdb.mkdir()
    (notdb / "notes.txt").write_text("mine\n", encoding="utf-8")
    document = tmp_path / "doc.json"
    make_store(tmp_path / "src")
    assert otpmem("export", tmp_path / "src", "--all", "-o", document).returncode == 0

    fails_with(
        otpmem("import", notdb, document),
        2,
        f"{notdb} is not empty and is not a LevelDB store (it holds 'notes.txt')",
    )
    assert os.listdir(notdb) == ["notes.txt"]


def test_simulate_refuses_a_directory_that_holds_something_else(tmp_path: Path) -> None:
    notdb = tmp_path / "notdb"
    notdb.mkdir()
    (notdb / "notes.txt").write_text("mine\n", encoding="utf-8")
    store = make_store(tmp_path / "store")
    store_files = sorted(os.listdir(store))

    fails_with(otpmem(*simulate_args(notdb, 2, 2)), 2, f"{notdb} is not empty ('notes.txt')")
    fails_with(
        otpmem(*simulate_args(store, 2, 2)),
        2,
        "is not empty (a store that is not a simulation run)",
    )
    assert os.listdir(notdb) == ["notes.txt"]
    assert sorted(os.listdir(store)) == store_files


@pytest.mark.parametrize(
    "content",
    [
        '{"format": ',
        '{"format": "otpmem.export", "version": 1, "conversations": '
        '[{"user_id": "r", "conversation_id": "c", "messages": [{"role": "robot"}]}]}',
    ],
    ids=["not-json", "invalid-message"],
)
def test_a_failed_import_into_a_new_directory_leaves_nothing_behind(
    tmp_path: Path, content: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content, encoding="utf-8")

    for target in (tmp_path / "newdir", tmp_path / "deeper" / "newdir"):
        result = otpmem("import", target, bad)
        assert result.returncode == 2, str(result)
        assert not target.exists()
    assert sorted(os.listdir(tmp_path)) == ["bad.json"]


def test_a_failed_import_into_an_empty_directory_leaves_it_empty(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "bad.json").write_text('{"format": "otpmem.export", "version": 2}', "utf-8")

    fails_with(otpmem("import", empty, tmp_path / "bad.json"), 2, "unsupported export version")
    assert list(empty.iterdir()) == []
