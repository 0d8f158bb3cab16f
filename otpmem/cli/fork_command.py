"""``otpmem fork``: copy the first messages of a conversation into a new one, in one write.

The store is opened as ``otpmem import`` opens it (its directory itself, or the PostgreSQL
schema of a run on PostgreSQL), but only an existing store: a fork has something to copy.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from ..actors import NoProcess, ServerExited
from ..messages import Conv
from ..stores import ConversationExists, StoreUnavailable
from ..stores.leveldb import files as store_files
from .errors import CommandError, guarded
from .output import line, plural
from .params import DATA_HELP, complete_conversation, user_option
from .read_commands import missing_conversation
from .store_access import ReadStore, postgres_run, writing


def _existing_store(path: Path) -> Path:
    """``path`` if it holds a store (LevelDB, or a run on PostgreSQL); the one-line
    reason otherwise, before anything is opened or created."""
    where = os.fspath(path)
    if not path.exists():
        raise StoreUnavailable(f"{where} does not exist")
    if not path.is_dir():
        raise StoreUnavailable(f"{where} is a file, not a store's directory")
    if not store_files.is_store(path) and postgres_run(path) is None:
        raise StoreUnavailable(f"there is no LevelDB store at {where!r}")
    return path


@click.command()
@click.argument(
    "source",
    metavar="SOURCE",
    shell_complete=complete_conversation,
    help="The conversation to fork (of --user's).",
)
@click.argument(
    "into",
    metavar="INTO",
    help="The new conversation, of the same user: it must not hold anything yet.",
)
@click.option(
    "--dir",
    "data",
    required=True,
    metavar="DIR",
    type=click.Path(path_type=Path, file_okay=True, dir_okay=True),
    help=DATA_HELP,
)
@click.option(
    "--at",
    type=click.IntRange(min=0),
    default=None,
    metavar="N",
    help="Copy only the first N messages of SOURCE.  [default: all of them]",
)
@user_option("The user SOURCE and INTO belong to.  [default: no user]")
@click.option(
    "--key",
    metavar="KEY",
    default=None,
    help="An idempotency key: the same fork run again with it is stored once, and says "
    "what the first run copied.  [default: none]",
)
@guarded
def fork(
    source: str, into: str, data: Path, at: int | None, user: str | None, key: str | None
) -> int:
    """Fork a conversation: INTO gets the first N messages of SOURCE, in one write.

    The copy records no usage of its own (what SOURCE spent is counted once), and SOURCE
    is left as it was. A scenario branches at any point; a rewind forks the point to go
    back to.

    \b
    otpmem fork trip trip-b --user ann --at 4 --dir run
    otpmem inspect run trip-b --user ann
    """
    if source == into:
        raise CommandError("SOURCE and INTO are the same conversation: name a new one")
    if not source or not into:
        raise CommandError("SOURCE and INTO must not be empty")
    with writing(_existing_store(data)) as store:
        conv = Conv(user, source)
        if conv not in store.conversations(user):
            raise missing_conversation(ReadStore(store, data), conv)
        try:
            count = store.fork(conv, Conv(user, into), at=at, idempotency_key=key)
        except (ServerExited, NoProcess) as exc:
            # A store that cannot read its own keys crashes on them: that is damage.
            reason = getattr(exc, "reason", None)
            detail = reason if isinstance(reason, BaseException) else exc
            raise store_files.corrupt(data, store_files.error_text(detail)) from None
        except ConversationExists:
            raise
        except ValueError as exc:  # the key refused, in the store's words, named as a flag
            raise CommandError(str(exc).replace("idempotency_key", "--key")) from None
    who = "" if user is None else f" of user {user!r}"
    line(f"forked {plural(count, 'message')} of {source!r} into {into!r}{who} in {data}")
    return 0


__all__ = ["fork"]
