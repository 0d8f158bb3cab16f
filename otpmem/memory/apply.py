"""``apply_memory``: PhoenixAI.Store's ``Store.apply_memory/3``, the messages a pipeline
would send for a stored conversation, with one call's overrides; nothing is stored.

::

    pipeline = Pipeline.new([(SlidingWindow, {"last": 20})])
    messages = apply_memory(conv, pipeline, store=store)
    messages = apply_memory(conv, "summarize", store="my_store", max_tokens=2000,
                            model="gpt-4o-mini", provider=chat_model)
    messages = apply_memory(conv, pipeline, store=store, inject_long_term_memory=True,
                            user_id="user-123")

It reads what ``PipelineProvider.history`` reads (the pinned index and as much of the tail
as the call's strategies need, so the cost does not grow with the conversation), runs the
pipeline with the call's ``CallOptions`` (the pipeline itself is never changed: calls with
other overrides may run on it at once), and puts the user's profile and facts in front as
``LongTermMemory.inject`` does. A summary the pipeline rolls is returned in the list but
not stored: a turn loop keeps its summaries with a ``PipelineProvider``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from ..actors import whereis
from ..messages import ConvLike, as_conv, check_user_id, short_repr
from ..stores import ChatMemory, default_store
from .longterm import LongTermMemory
from .pipeline import Entry, Pipeline
from .prepare_context import CallOptions
from .provider import check_store
from .reads import read_for
from .tokens import TokenCounter


def apply_memory(
    conv: ConvLike,
    pipeline: Pipeline | str | Iterable[Entry],
    *,
    store: ChatMemory | str | None = None,
    max_tokens: int | None = None,
    token_counter: TokenCounter | None = None,
    model: str | None = None,
    provider: Any = None,
    inject_long_term_memory: bool = False,
    user_id: str | None = None,
    long_term_memory: LongTermMemory | None = None,
) -> list[Mapping[str, Any]]:
    """The messages ``pipeline`` makes of the stored conversation, for this call's options.

    ``pipeline``: a ``Pipeline``, a preset name, or a list of entries (``Pipeline``'s).
    ``store``: a store handle, the name a store is registered under, or None for the
    default store. ``max_tokens``: the budget of what is sent (every ``TokenTruncation``
    takes it; a pipeline without one gets one). ``token_counter``: the counter of the
    strategies not given their own. ``model``/``provider``: what a ``Summarization``
    without its own summarizes with. ``inject_long_term_memory``: the profile and facts
    of ``user_id`` (default: the conversation's user) in front, from
    ``long_term_memory`` (default: a ``LongTermMemory`` over ``store``).
    """
    key = as_conv(conv)
    chosen = _store(store)
    steps = _pipeline(pipeline)
    options = CallOptions(max_tokens, token_counter, model, provider)
    ltm, user = _long_term(chosen, key.user_id, inject_long_term_memory, user_id, long_term_memory)
    history = read_for(chosen, key, steps, options)
    out = steps.run(history, key, offset=history.offset, options=options)
    return ltm.inject(out, user) if ltm is not None else out


def _store(store: object) -> ChatMemory:
    if store is None:
        return cast(ChatMemory, default_store())
    if isinstance(store, str):
        running = whereis(store)
        if running is None:
            raise ValueError(f"no store is registered as {store!r}: start one with name={store!r}")
        named = getattr(type(running), "named", None)
        store = named(store) if callable(named) else running  # follows restarts
    return check_store(store)


def _pipeline(pipeline: object) -> Pipeline:
    if isinstance(pipeline, Pipeline):
        return pipeline
    if isinstance(pipeline, str):
        return Pipeline.preset(pipeline)
    if isinstance(pipeline, list | tuple):
        return Pipeline(pipeline)
    raise TypeError(
        "pipeline must be a Pipeline, a preset name or a list of strategies, got "
        f"{short_repr(pipeline)}"
    )


def _long_term(
    store: ChatMemory,
    owner: str | None,
    inject: object,
    user_id: str | None,
    given: LongTermMemory | None,
) -> tuple[LongTermMemory | None, str | None]:
    if not isinstance(inject, bool):
        raise TypeError(f"inject_long_term_memory must be a bool, got {short_repr(inject)}")
    if given is not None and not isinstance(given, LongTermMemory):
        raise TypeError(f"long_term_memory must be a LongTermMemory, got {short_repr(given)}")
    if not inject:
        if given is not None:
            raise ValueError(
                "long_term_memory is given but inject_long_term_memory is False: pass "
                "inject_long_term_memory=True to put its facts in front"
            )
        return None, None
    user = owner if user_id is None else check_user_id(user_id)
    if user is None:
        raise ValueError(
            "inject_long_term_memory needs a user: pass user_id=... (or a Conv with a user_id)"
        )
    if owner is not None and user != owner:
        raise ValueError(
            f"user_id {user!r} is not the conversation's user {owner!r}: another user's "
            "facts are never put in a conversation"
        )
    if given is None:
        return LongTermMemory(store), user
    if given.store != store:
        raise ValueError(
            "long_term_memory reads another store than the conversation's: give both the same store"
        )
    return given, user
