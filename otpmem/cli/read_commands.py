"""``otpmem inspect``, ``export`` and ``search``: read a store, write nothing to it.

One exit rule for the three: what a command line names must be in the store, or it exits
2 with one line saying so: a conversation (CONV, ``--conv``), a user (``--user``: one that
holds no conversation). An empty answer about what is there (``0 hits``, the listing of an
empty store) is an answer: exit 0.

Each opens a snapshot of the store (see ``otpmem.stores.leveldb.files``), so its directory keeps
every file name and byte it had, and a store another process holds is refused at once. With
``--dsn`` it reads a PostgreSQL schema, opened read-only (see ``store_access``).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ..messages import Conv
from .errors import CommandError, guarded
from .output import hint, line, plural, rows, write_text
from .params import StoreCommand, complete_conversation, data_argument, dsn_options, user_option
from .store_access import ReadStore, reading

READ_ONLY = (
    "The store is read from a snapshot (its table files hard-linked, its log and manifest "
    "copied, into a temporary directory): its own directory is not written. A run on "
    "PostgreSQL is read from its schema, on the server its run.json names; --dsn reads a "
    "schema read-only (nothing created, migrated or written)."
)


def _who(user: str | None) -> str:
    return "without a user" if user is None else f"for user {user!r}"


def missing_conversation(store: ReadStore, conv: Conv) -> CommandError:
    """No such conversation: and if it exists for a user, the ``--user`` that finds it."""
    message = f"no conversation {conv.conversation_id!r} {_who(conv.user_id)}"
    if store.path is None and Path(conv.conversation_id).is_dir():
        # With --dsn the first argument is CONV: a directory there was meant as DATA.
        return CommandError(
            f"{message}; {conv.conversation_id} is a directory, but --dsn names the store: "
            "give DATA or --dsn, not both"
        )
    if conv.user_id is None:
        owners = store.owners(conv.conversation_id)
        if owners:
            shown = ", ".join(repr(o) for o in owners)
            message += (
                f"; {plural(len(owners), 'user')} {'has' if len(owners) == 1 else 'have'} "
                f"one: {shown} (add --user {owners[0]})"
            )
    return CommandError(message)


def _existing(store: ReadStore, conv: Conv) -> Conv:
    if conv not in store.conversations(conv.user_id):
        raise missing_conversation(store, conv)
    return conv


def _existing_user(store: ReadStore, user: str | None) -> None:
    """Refuse a ``--user`` that holds no conversation, naming the users there are."""
    if user is None or store.conversations(user):
        return
    users = store.users()
    if users:
        shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
        held = f"this store's users: {shown}"
    else:
        held = "this store holds no user's conversation"
    raise CommandError(f"no conversations for user {user!r}; {held}")


@click.command(cls=StoreCommand, epilog=READ_ONLY)
@data_argument()
@click.argument(
    "conversation",
    required=False,
    metavar="[CONV]",
    shell_complete=complete_conversation,
    help="A conversation to print as JSON lines, oldest first. Omit it to list the "
    "conversations, one per line: user, conversation, message count.",
)
@user_option(
    "Only this user's conversations; with CONV, the user it belongs to. "
    "[default: every user when listing; no user with CONV]"
)
@dsn_options()
@click.option(
    "--last",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Print only the newest N messages of CONV.  [default: all of them]",
)
@guarded
def inspect(
    conversation: str | None,
    user: str | None,
    last: int | None,
    dsn: str | None,
    namespace: str | None,
    data: Path | None = None,
) -> int:
    """List a store's conversations, or print one of them.

    \b
    otpmem inspect run                     every conversation, with its size
    otpmem inspect run --user sim          one user's
    otpmem inspect run sim-3 --user sim --last 5
    otpmem inspect --dsn postgresql://app@db/mem --namespace prod
    """
    if last is not None and conversation is None:
        raise CommandError("--last needs a CONV: the newest N messages of which conversation?")
    with reading(data, dsn, namespace) as store:
        if conversation is None:
            _existing_user(store, user)
            convs = store.conversations(user)
            rows(
                ("USER", "CONVERSATION", "MESSAGES"),
                [
                    (c.user_id or "-", c.conversation_id, plural(store.count(c), "message"))
                    for c in convs
                ],
            )
            line(plural(len(convs), "conversation"))
            return 0
        conv = _existing(store, Conv(user, conversation))
        for message in store.get(conv, last=last):
            line(json.dumps(message, ensure_ascii=False))
    return 0


@click.command(cls=StoreCommand, epilog=READ_ONLY)
@data_argument()
@click.argument(
    "conversation",
    required=False,
    metavar="[CONV]",
    shell_complete=complete_conversation,
    help="One conversation to export (with --user, that user's).",
)
@user_option(
    "With CONV: the user it belongs to. Alone: export every conversation of USER.  [default: none]"
)
@click.option(
    "--all",
    "all_users",
    is_flag=True,
    help="Export every conversation of every user (and those of no user).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(path_type=Path, dir_okay=False, allow_dash=True),
    default="-",
    show_default=True,
    metavar="FILE",
    help="Where to write the JSON document; - is stdout.",
)
@dsn_options()
@guarded
def export(
    conversation: str | None,
    user: str | None,
    all_users: bool,
    output: Path,
    dsn: str | None,
    namespace: str | None,
    data: Path | None = None,
) -> int:
    """Write conversations as an export document (JSON), for `otpmem import`.

    Name exactly one selection: CONV (with --user for a user's conversation), --user USER
    alone (all of that user's), or --all.
    """
    if all_users and (conversation is not None or user is not None):
        raise CommandError("--all exports everything: give it without CONV and --user")
    if not all_users and conversation is None and user is None:
        raise CommandError(
            "say what to export: CONV (add --user USER for a user's conversation), "
            "--user USER (all of that user's conversations), or --all (everything)"
        )
    with reading(data, dsn, namespace) as store:
        if conversation is None:
            _existing_user(store, user)
        conv = None if conversation is None else _existing(store, Conv(user, conversation))
        document = store.export(conv, None if conv else user, all_users)
    write_text(output, json.dumps(document, ensure_ascii=False, indent=1) + "\n")
    return 0


@click.command(cls=StoreCommand, epilog=READ_ONLY)
@data_argument()
@click.argument("query", help="The text to look for: a case-insensitive substring.")
@user_option("Search this user's conversations.  [default: the conversations of no user]")
@click.option(
    "--conv",
    metavar="CONV",
    default=None,
    shell_complete=complete_conversation,
    help="Search only this conversation (of --user's).  [default: all of them]",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="At most this many hits, the best first.",
)
@dsn_options()
@guarded
def search(
    query: str,
    user: str | None,
    conv: str | None,
    limit: int,
    dsn: str | None,
    namespace: str | None,
    data: Path | None = None,
) -> int:
    """Search one user's messages for a text.

    Hits print as: score (occurrences), user, conversation, #index, content. A search
    reads one tenant only: --user's conversations, or without --user those of no user.
    """
    if not query:
        raise CommandError("QUERY must not be empty")
    with reading(data, dsn, namespace) as store:
        if conv is None:
            _existing_user(store, user)
        scope = None if conv is None else _existing(store, Conv(user, conv))
        hits = store.search(query, user, scope, limit)
        users = store.users() if not hits and user is None and conv is None else []
    rows(
        ("SCORE", "USER", "CONVERSATION", "INDEX", "CONTENT"),
        [
            (
                str(hit.score),
                hit.conv.user_id or "-",
                hit.conv.conversation_id,
                f"#{hit.index}",
                json.dumps(hit.message.get("content"), ensure_ascii=False),
            )
            for hit in hits
        ],
    )
    line(plural(len(hits), "hit"))
    if users:
        shown = ", ".join(users[:5]) + (f" and {len(users) - 5} more" if len(users) > 5 else "")
        hint(
            "without --user, search reads only the conversations of no user; "
            f"this store's users: {shown} (try --user {users[0]})"
        )
    return 0


__all__ = ["export", "inspect", "missing_conversation", "search"]
