"""Arguments and options that several commands share, each with its help, and completion
of conversation ids and users from the store named on the same command line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])
DATA_HELP = (
    "The store's directory: a LevelDB store, or a run of `otpmem simulate` (with --store "
    "postgres, the run's PostgreSQL schema)."
)


def _non_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value:
        raise click.BadParameter("must not be empty")
    return value


def _store_names(ctx: click.Context, incomplete: str, users: bool) -> list[CompletionItem]:
    """Conversation ids (or users) held by the store in DATA, for shell completion."""
    data = ctx.params.get("data")
    if data is None and ctx.args:
        data = ctx.args[0]  # an option still waiting for its value left DATA unparsed
    if data is None:
        return []
    try:
        from .store_access import reading

        with reading(Path(data)) as store:
            if users:
                names = store.users()
            else:
                names = [c.conversation_id for c in store.conversations(ctx.params.get("user"))]
    except Exception:  # completion never fails loudly: no store, no suggestions
        return []
    return [CompletionItem(n) for n in sorted(set(names)) if n.startswith(incomplete)]


def complete_conversation(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Conversation ids of the store on the command line (of --user's, if given)."""
    return _store_names(ctx, incomplete, users=False)


def complete_user(
    ctx: click.Context, param: click.Parameter, incomplete: str
) -> list[CompletionItem]:
    """Users of the store on the command line."""
    return _store_names(ctx, incomplete, users=True)


def data_argument() -> Callable[[F], F]:
    """DATA: the store's directory, the first argument of the store commands."""
    return click.argument(
        "data",
        type=click.Path(path_type=Path, file_okay=True, dir_okay=True),
        help=DATA_HELP,
    )


def user_option(help: str) -> Callable[[F], F]:
    """--user USER, completed from the store."""
    return click.option(
        "--user",
        metavar="USER",
        default=None,
        callback=_non_empty,
        shell_complete=complete_user,
        help=help,
    )


__all__ = [
    "DATA_HELP",
    "complete_conversation",
    "complete_user",
    "data_argument",
    "user_option",
]
