"""One exit rule for inspect, export and search (issue 33, point 10): what the command line
names must be in the store (a conversation, a user), or it exits 2 with one line; an empty
answer about what is there exits 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from otpmem.stores import LevelDBStore
from tests.cli_support import fails_with, otpmem, tree_state

NOBODY = "no conversations for user 'nobody'; this store's users: alice, bob"


@pytest.mark.parametrize(
    "args",
    [
        ("export", "--user", "nobody"),
        ("inspect", "--user", "nobody"),
        ("search", "weather", "--user", "nobody"),
    ],
)
def test_a_user_the_store_does_not_hold_exits_2_in_every_read_command(
    store_dir: Path, args: tuple[str, ...]
) -> None:
    before = tree_state(store_dir)
    command, *rest = args
    fails_with(otpmem(command, store_dir, *rest), 2, NOBODY)
    assert tree_state(store_dir) == before


def test_export_of_an_unknown_user_writes_no_file(store_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "nobody.json"
    result = otpmem("export", store_dir, "--user", "nobody", "-o", out)
    assert len(fails_with(result, 2, NOBODY).splitlines()) == 1
    assert not out.exists()


def test_an_unknown_conversation_exits_2_as_an_unknown_user_does(store_dir: Path) -> None:
    fails_with(otpmem("inspect", store_dir, "nope", "--user", "alice"), 2, "no conversation 'nope'")
    fails_with(otpmem("search", store_dir, "x", "--user", "alice", "--conv", "nope"), 2, "'nope'")


def test_an_empty_answer_about_what_is_there_exits_0(store_dir: Path, tmp_path: Path) -> None:
    none = otpmem("search", store_dir, "no such words", "--user", "alice")
    assert (none.returncode, none.stdout) == (0, "0 hits\n"), str(none)
    empty = tmp_path / "empty"
    LevelDBStore.start_link(empty).stop()
    listed = otpmem("inspect", empty)
    assert (listed.returncode, listed.stdout) == (0, "0 conversations\n"), str(listed)
    fails_with(
        otpmem("export", empty, "--user", "ann"),
        2,
        "no conversations for user 'ann'; this store holds no user's conversation",
    )
