"""What ``otpmem simulate --observe [PORT]`` and ``--live`` start around a run."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..agents import Callbacks
from ._meter import TurnMeter
from ._server import serve
from ._source import Observer


@contextmanager
def observing(
    port: int | None, live: bool, say: Callable[[str], None]
) -> Iterator[Callbacks | None]:
    """Serve the page on ``port`` (0: a free one) and/or draw the terminal view while the
    block runs; yield the agent callbacks that feed their turn figures (None: neither)."""
    if port is None and not live:
        yield None
        return
    meter = TurnMeter()
    page = None
    drawer = None
    stop = threading.Event()
    try:
        if port is not None:
            page = serve(port, meter=meter)
            say(f"observer: {page.url} (read-only, this machine only)")
        if live:
            from .terminal import watch

            drawer = threading.Thread(
                target=watch, args=(Observer(meter=meter), stop), name="otpmem-live", daemon=True
            )
            drawer.start()
        yield meter.callbacks()
    finally:
        stop.set()
        if drawer is not None:
            drawer.join(10.0)
        if page is not None:
            page.stop()
