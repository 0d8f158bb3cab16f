"""MemoryStore: conversations in a table owned by a server, the ETS analogue.

::

    store = MemoryStore.start_link()
    store.add("c1", [{"role": "user", "content": "hi"}])
    store.get("c1")  # -> [{"role": "user", "content": "hi"}]
"""

from ._handle import MemoryStoreHandle
from ._server import MemoryStore

__all__ = ["MemoryStore", "MemoryStoreHandle"]
