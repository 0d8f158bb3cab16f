"""The shared recall index over the default store, found by name.

Under the application (``otpmem.start()``) it is a permanent child of the tree, beside the
default store, so ``otpmem.default_store().search`` is ranked and every agent with
``memory={"recall": True}`` shares one index. It pulls lazily (nothing happens on an
``add``), so an application that never recalls pays nothing for it. Without a running
application, ``default_index()`` starts an unsupervised one and warns, as
``default_store()`` does.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from typing import Any

from ...actors import AlreadyStarted, whereis
from ...stores import DEFAULT_STORE_NAME, default_store
from ...supervisors import ChildSpec
from .handle import RecallIndexHandle
from .index import RecallIndex

DEFAULT_INDEX_NAME = "otpmem.recall_index"
logger = logging.getLogger("otpmem.memory")
_lock = threading.Lock()
# True while the application's tree owns the index: a moment without the name is then a
# restart in progress, never a reason to start a second, unsupervised index.
_supervised = False


def default_index_spec(store_handle_class: type[Any], child_id: str = "recall_index") -> ChildSpec:
    """The application's child: the shared index over the default store, by its name (so
    its reads follow the store across restarts)."""
    store = store_handle_class.named(DEFAULT_STORE_NAME)
    spec: ChildSpec = RecallIndex.child_spec(store, DEFAULT_INDEX_NAME, child_id=child_id)
    return spec


def set_supervised(supervised: bool) -> None:
    """Tell ``default_index()`` that the application's tree owns the index."""
    global _supervised
    with _lock:
        _supervised = supervised


def default_index() -> RecallIndexHandle:
    """A handle to the shared index, by name (so it follows restarts)."""
    with _lock:
        if whereis(DEFAULT_INDEX_NAME) is not None or _supervised:
            return RecallIndexHandle.named(DEFAULT_INDEX_NAME)
        with warnings.catch_warnings():
            # default_store() warns for itself when it has to start one; one warning here.
            warnings.simplefilter("ignore")
            store = default_store()
        message = (
            "otpmem: no application is running, so an unsupervised RecallIndex was started "
            "over the default store (itself started unsupervised if it was not running); "
            "call otpmem.start() first to have them supervised"
        )
        warnings.warn(message, stacklevel=2)
        logger.warning(message)
        with contextlib.suppress(AlreadyStarted):
            RecallIndex.start(store, name=DEFAULT_INDEX_NAME)
        return RecallIndexHandle.named(DEFAULT_INDEX_NAME)
