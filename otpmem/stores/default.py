"""The shared default store: one named store every agent finds by name.

Under the application (``otpmem.start()``) it is a permanent, supervised child. Without a
running application, ``default_store()`` starts an unsupervised MemoryStore under the same
name and warns: it works, but a crash loses its history and nothing restarts it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import warnings
from typing import Any

from ..actors import AlreadyStarted, whereis
from .memory import MemoryStore

DEFAULT_STORE_NAME = "otpmem.default_store"
logger = logging.getLogger("otpmem.stores")
_lock = threading.Lock()
# The handle class of the store a supervisor owns (None: no application). While it is set,
# a moment without the name is a restart in progress, never a reason to start a second,
# unsupervised store beside the supervised one.
_supervised: type[Any] | None = None


def set_supervised(handle_class: type[Any] | None) -> None:
    """Tell ``default_store()`` that a supervisor owns the default store (the app does)."""
    global _supervised
    with _lock:
        _supervised = handle_class


def default_store() -> Any:
    """A handle to the shared store, by name (so it follows restarts)."""
    with _lock:
        running = whereis(DEFAULT_STORE_NAME)
        if running is not None:
            return type(running).named(DEFAULT_STORE_NAME)
        if _supervised is not None:
            # Restarting: calls through this handle raise NoProcess until it is back.
            return _supervised.named(DEFAULT_STORE_NAME)
        message = (
            "otpmem.default_store(): no application is running, so an unsupervised "
            "MemoryStore was started; call otpmem.start() first to have it supervised"
        )
        warnings.warn(message, stacklevel=2)
        logger.warning(message)
        with contextlib.suppress(AlreadyStarted):
            MemoryStore.start(name=DEFAULT_STORE_NAME)
        return MemoryStore.named(DEFAULT_STORE_NAME)
