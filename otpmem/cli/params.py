"""Arguments and options that several commands share, each with its help, and completion
of conversation ids and users from the store named on the same command line.

A store command names its store by DATA (a directory) or by ``--dsn`` (and ``--namespace``)
in DATA's place: ``StoreCommand`` drops DATA from the command line that gives ``--dsn``, so
``otpmem inspect --dsn URL c1`` reads ``c1`` as the conversation it is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from click.shell_completion import CompletionItem

F = TypeVar("F", bound=Callable[..., Any])
DATA_HELP = (
    "The store's directory: a LevelDB store, or a run of `otpmem simulate` (with --store "
    "postgres, the run's PostgreSQL schema). Not with --dsn, which names the store instead."
)
DSN_HELP = (
    "Instead of DATA: the PostgreSQL server (postgresql://user@host/db, or key=value pairs; "
    "a password is never printed back, and libpq also takes one from PGPASSWORD or ~/.pgpass)."
    "  [default: none: DATA names the store]"
)
NAMESPACE_HELP = "With --dsn: the store's schema on that server.  [default: otpmem]"
DEFAULT_NAMESPACE = "otpmem"
_BY_DSN = "otpmem.by_dsn"


def gives_dsn(args: list[str], option: str = "--dsn") -> bool:
    """Whether a command line (before any ``--``) gives ``--dsn`` (or ``option``)."""
    options = args[: args.index("--")] if "--" in args else args
    return any(a == option or a.startswith(option + "=") for a in options)


class StoreCommand(click.Command):
    """A command on one store: DATA, or ``--dsn`` [``--namespace``] in its place."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse without DATA when ``--dsn`` is given; refuse a store named twice."""
        by_dsn = ctx.meta[_BY_DSN] = gives_dsn(args)
        if ctx.resilient_parsing:  # completing a word: nothing to refuse
            return super().parse_args(ctx, args)
        if not by_dsn and gives_dsn(args, "--namespace"):
            raise click.UsageError(
                "--namespace names a schema on --dsn's server: give --dsn too (a run's "
                "directory names its own schema)",
                ctx,
            )
        if by_dsn:
            ctx.allow_extra_args = True  # an argument too many is a DATA beside --dsn: said below
        try:
            rest = super().parse_args(ctx, args)
        except click.MissingParameter as exc:
            if exc.param is None or exc.param.name != "data":
                raise
            raise click.UsageError(
                "name the store: DATA (a store's or a run's directory) or --dsn DSN", ctx
            ) from None
        if by_dsn and ctx.args:
            extra = " ".join(repr(a) for a in ctx.args)
            raise click.UsageError(
                f"--dsn names the store, and DATA is given too (an argument too many: "
                f"{extra}): drop DATA or --dsn",
                ctx,
            )
        return rest

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        """The parameters, without DATA on a command line that gives ``--dsn``."""
        params = super().get_params(ctx)
        if ctx.meta.get(_BY_DSN):
            return [p for p in params if p.name != "data"]
        return params

    def collect_usage_pieces(self, ctx: click.Context) -> list[str]:
        """``[OPTIONS] (DATA | --dsn DSN) ...``: the two ways to name the store."""
        pieces = super().collect_usage_pieces(ctx)
        return ["(DATA | --dsn DSN)" if p == "DATA" else p for p in pieces]


def _dsn(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        from ..stores.postgres import check_dsn
    except ImportError:
        raise click.BadParameter("needs psycopg: pip install 'otpmem[postgres]'") from None
    try:
        return check_dsn(value)
    except ValueError as exc:  # its message hides any password
        raise click.BadParameter(str(exc)) from None


def _namespace(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        from ..stores.postgres import check_namespace
    except ImportError:
        return value  # --dsn says which extra to install
    try:
        return check_namespace(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def dsn_options() -> Callable[[F], F]:
    """--dsn DSN and --namespace NS: a PostgreSQL store in DATA's place."""

    def add(function: F) -> F:
        function = click.option(
            "--namespace", metavar="NS", default=None, callback=_namespace, help=NAMESPACE_HELP
        )(function)
        return click.option("--dsn", metavar="DSN", default=None, callback=_dsn, help=DSN_HELP)(
            function
        )

    return add


def _non_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value:
        raise click.BadParameter("must not be empty")
    return value


def _store_names(ctx: click.Context, incomplete: str, users: bool) -> list[CompletionItem]:
    """Conversation ids (or users) held by the store in DATA, for shell completion."""
    data = ctx.params.get("data")
    dsn = ctx.params.get("dsn")
    if data is None and dsn is None and ctx.args and not ctx.meta.get(_BY_DSN):
        data = ctx.args[0]  # an option still waiting for its value left DATA unparsed
    if data is None and dsn is None:
        return []
    try:
        from .store_access import reading

        where = None if data is None else Path(data)
        with reading(where, dsn=dsn, namespace=ctx.params.get("namespace")) as store:
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
    "DEFAULT_NAMESPACE",
    "StoreCommand",
    "complete_conversation",
    "complete_user",
    "data_argument",
    "dsn_options",
    "gives_dsn",
    "user_option",
]
