"""``otpmem inspect``, ``export``, ``import`` and ``search`` on a store, run as a user runs
them: arguments in any order, output for pipes, hints that name the ``--user`` to add."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from otpmem.messages import Conv
from tests.cli_support import CONVERSATIONS, fails_with, otpmem


def conversations_of(document: dict[str, Any]) -> dict[Conv, list[dict[str, Any]]]:
    return {
        Conv(c["user_id"], c["conversation_id"]): c["messages"] for c in document["conversations"]
    }


def hit(score: int, user: str, conversation: str, index: int) -> str:
    content = CONVERSATIONS[Conv(None if user == "-" else user, conversation)][index]["content"]
    return f"{score}\t{user}\t{conversation}\t#{index}\t{json.dumps(content)}"


# -- inspect --------------------------------------------------------------------------------


def test_inspect_lists_every_conversation_with_its_count(store_dir: Path) -> None:
    result = otpmem("inspect", store_dir)

    assert result.returncode == 0, str(result)
    lines = result.stdout.splitlines()
    assert sorted(lines[:-1]) == sorted(
        [
            "alice\tc1\t3 messages",
            "alice\tc2\t2 messages",
            "bob\tb1\t2 messages",
            "-\tanon\t1 message",
        ]
    )
    assert lines[-1] == "4 conversations"


def test_inspect_user_lists_only_that_users_conversations(store_dir: Path) -> None:
    result = otpmem("inspect", store_dir, "--user", "bob")

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == ["bob\tb1\t2 messages", "1 conversation"]


@pytest.mark.parametrize(
    "order",
    [
        ["STORE", "--user", "alice", "c1", "--last", "2"],  # the README's order
        ["STORE", "c1", "--user", "alice", "--last", "2"],
        ["--last", "2", "--user", "alice", "STORE", "c1"],
    ],
    ids=["options-between", "options-after", "options-first"],
)
def test_inspect_takes_its_arguments_in_any_order(store_dir: Path, order: list[str]) -> None:
    result = otpmem("inspect", *[str(store_dir) if a == "STORE" else a for a in order])

    assert result.returncode == 0, str(result)
    assert [json.loads(line) for line in result.stdout.splitlines()] == (
        CONVERSATIONS[Conv("alice", "c1")][-2:]
    )


def test_inspect_conversation_of_no_user_prints_its_messages(store_dir: Path) -> None:
    result = otpmem("inspect", store_dir, "anon")

    assert result.returncode == 0, str(result)
    assert [json.loads(line) for line in result.stdout.splitlines()] == (
        CONVERSATIONS[Conv(None, "anon")]
    )


def test_inspect_unknown_conversation_of_a_user_exits_2(store_dir: Path) -> None:
    message = fails_with(otpmem("inspect", store_dir, "c1", "--user", "bob"), 2)
    # bob named it: he is told it is not his, and not whose it is.
    assert message == "otpmem inspect: no conversation 'c1' for user 'bob'\n"


def test_inspect_conversation_without_its_user_hints_at_the_user_to_add(
    store_dir: Path,
) -> None:
    fails_with(
        otpmem("inspect", store_dir, "c1"),
        2,
        "no conversation 'c1' without a user",
        "(add --user alice)",
    )


def test_inspect_last_without_a_conversation_is_a_usage_error(store_dir: Path) -> None:
    fails_with(otpmem("inspect", store_dir, "--last", "3"), 2, "--last needs a CONV")


# -- export / import ------------------------------------------------------------------------


def test_export_user_prints_that_users_conversations(store_dir: Path) -> None:
    result = otpmem("export", store_dir, "--user", "alice")

    assert result.returncode == 0, str(result)
    assert conversations_of(json.loads(result.stdout)) == {
        conv: messages for conv, messages in CONVERSATIONS.items() if conv.user_id == "alice"
    }


def test_export_one_conversation_in_any_argument_order(store_dir: Path) -> None:
    for args in (
        ["export", store_dir, "c2", "--user", "alice"],
        ["export", "--user", "alice", store_dir, "c2", "-o", "-"],
    ):
        result = otpmem(*args)
        assert result.returncode == 0, str(result)
        assert conversations_of(json.loads(result.stdout)) == {
            Conv("alice", "c2"): CONVERSATIONS[Conv("alice", "c2")]
        }


def test_export_of_an_unknown_conversation_exits_2_as_inspect_does(store_dir: Path) -> None:
    fails_with(
        otpmem("export", store_dir, "nope", "--user", "alice"),
        2,
        "no conversation 'nope' for user 'alice'",
    )
    fails_with(otpmem("export", store_dir, "b1"), 2, "(add --user bob)")


def test_export_all_to_a_file_then_import_round_trips(store_dir: Path, tmp_path: Path) -> None:
    exported = tmp_path / "all.json"
    result = otpmem("export", store_dir, "--all", "-o", exported)
    assert result.returncode == 0, str(result)
    assert result.stdout == ""
    original = json.loads(exported.read_text(encoding="utf-8"))
    assert conversations_of(original) == CONVERSATIONS

    fresh = tmp_path / "fresh"
    result = otpmem("import", fresh, exported)
    assert result.returncode == 0, str(result)
    assert result.stdout == (
        f"stored 8 messages, skipped 0 already there, from 4 conversations into {fresh}\n"
    )

    again = otpmem("export", fresh, "--all", "--output", "-")
    assert again.returncode == 0, str(again)
    assert json.loads(again.stdout) == original


def test_import_reads_stdin_for_dash(store_dir: Path, tmp_path: Path) -> None:
    document = otpmem("export", store_dir, "b1", "--user", "bob").stdout
    fresh = tmp_path / "fresh"

    result = otpmem("import", fresh, "-", stdin=document)

    assert result.returncode == 0, str(result)
    assert result.stdout == (
        f"stored 2 messages, skipped 0 already there, from 1 conversation into {fresh}\n"
    )
    assert otpmem("inspect", fresh).stdout.splitlines() == ["bob\tb1\t2 messages", "1 conversation"]


def test_import_with_an_invalid_message_exits_2_and_stores_nothing(
    store_dir: Path, tmp_path: Path
) -> None:
    document = json.loads(otpmem("export", store_dir, "--all").stdout)
    document["conversations"][-1]["messages"].append({"role": "wizard", "content": "boo"})
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document), encoding="utf-8")
    target = tmp_path / "target"  # a store that holds bob's b1 already
    otpmem("export", store_dir, "b1", "--user", "bob", "-o", tmp_path / "one.json")
    assert otpmem("import", target, tmp_path / "one.json").returncode == 0

    fails_with(otpmem("import", target, bad), 2, "conversations[3]", "wizard")

    # All or nothing: not even the valid conversations before the bad one were stored.
    assert otpmem("inspect", target).stdout.splitlines() == [
        "bob\tb1\t2 messages",
        "1 conversation",
    ]


@pytest.mark.parametrize(
    ("selector", "message"),
    [
        ([], "say what to export: CONV (add --user USER"),
        (["c1", "--all"], "--all exports everything: give it without CONV and --user"),
        (["--user", "alice", "--all"], "--all exports everything"),
    ],
    ids=["none", "conv-and-all", "user-and-all"],
)
def test_export_without_exactly_one_selection_says_so_in_the_commands_words(
    store_dir: Path, selector: list[str], message: str
) -> None:
    text = fails_with(otpmem("export", store_dir, *selector), 2, message)
    assert "user_id=" not in text and "all_users" not in text


# -- search ---------------------------------------------------------------------------------


def test_search_prints_score_user_conversation_and_index_of_each_hit(store_dir: Path) -> None:
    result = otpmem("search", store_dir, "WEATHER", "--user", "alice")

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == [
        hit(2, "alice", "c2", 0),
        hit(1, "alice", "c1", 2),
        hit(1, "alice", "c1", 1),
        "3 hits",
    ]
    assert "bob" not in result.stdout and "anonymous" not in result.stdout


def test_search_without_user_reads_only_conversations_of_no_user(store_dir: Path) -> None:
    result = otpmem("search", store_dir, "weather")

    assert result.returncode == 0, str(result)
    assert result.stdout.splitlines() == [hit(1, "-", "anon", 0), "1 hit"]


def test_search_with_no_hits_and_no_user_hints_at_the_stores_users(store_dir: Path) -> None:
    result = otpmem("search", store_dir, "sunny")

    assert result.returncode == 0, str(result)
    assert result.stdout == "0 hits\n"
    assert "without --user, search reads only the conversations of no user" in result.stderr
    assert "alice, bob (try --user alice)" in result.stderr


def test_search_limit_and_conv_scope_the_hits(store_dir: Path) -> None:
    limited = otpmem("search", store_dir, "weather", "--limit", 1, "--user", "alice")
    assert limited.stdout.splitlines() == [hit(2, "alice", "c2", 0), "1 hit"]

    scoped = otpmem("search", store_dir, "weather", "--user", "alice", "--conv", "c1")
    assert scoped.stdout.splitlines() == [
        hit(1, "alice", "c1", 2),
        hit(1, "alice", "c1", 1),
        "2 hits",
    ]


def test_search_conversation_of_another_user_exits_2_and_shows_nothing_of_it(
    store_dir: Path,
) -> None:
    # c1 is alice's: bob names it and must get an error, and never alice's messages.
    result = otpmem("search", store_dir, "weather", "--user", "bob", "--conv", "c1")

    assert "alice" not in result.stdout + result.stderr and "Weather" not in result.stdout
    fails_with(result, 2, "no conversation 'c1' for user 'bob'")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--limit", "0"], "Invalid value for '--limit': 0 is not in the range x>=1"),
        (["--user", ""], "Invalid value for '--user': must not be empty"),
    ],
)
def test_search_rejects_bad_options_with_exit_2(
    store_dir: Path, args: list[str], message: str
) -> None:
    fails_with(otpmem("search", store_dir, "weather", *args), 2, message)
