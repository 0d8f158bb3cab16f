"""The README's table of memory kinds is the facade's: every kind it lists is accepted, the
vector databases it lists are refused with InvalidConfiguration, and the error for an
unknown kind lists both (issue 33, point 10)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from otpmem.memory import InvalidConfiguration, InvalidMemoryType, memory

README = Path(__file__).resolve().parent.parent / "README.md"


def table_rows() -> dict[str, list[str]]:
    """The kinds of each row of the README's bx-ai table: ``{otpmem cell: [kind, ...]}``."""
    text = README.read_text(encoding="utf-8")
    table = text.split("| bx-ai kind | otpmem |", 1)[1].split("\n\n", 1)[0]
    rows = {}
    for row in table.splitlines()[2:]:
        kinds_cell, meaning = row.strip("|").split("|", 1)
        rows[meaning.strip()] = re.findall(r"`([^`]+)`", kinds_cell)
    return rows


def unknown_kind_message() -> str:
    with pytest.raises(InvalidMemoryType) as caught:
        memory("nosuch")
    return str(caught.value)


def test_every_kind_the_table_lists_is_one_the_facade_accepts() -> None:
    message = unknown_kind_message()
    accepted = set(message.split("choose one of ", 1)[1].split(", or give", 1)[0].split(", "))
    listed = {
        kind
        for meaning, kinds in table_rows().items()
        if not meaning.startswith("`InvalidConfiguration`")
        for kind in kinds
        if "." not in kind
    }
    assert listed == accepted
    assert {"jdbc", "database", "db", "postgres", "postgresql"} <= accepted


def test_the_vector_databases_the_table_lists_are_refused_and_named_in_the_error() -> None:
    [refused] = [k for m, k in table_rows().items() if m.startswith("`InvalidConfiguration`")]
    assert "pgvector" in refused and "postgres" not in refused
    message = unknown_kind_message()
    for kind in refused:
        with pytest.raises(InvalidConfiguration, match=f"memory kind '{kind}' is a vector"):
            memory(kind)
        assert kind in message.split("the vector databases ", 1)[1], message
