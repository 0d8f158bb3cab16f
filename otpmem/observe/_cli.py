"""What ``otpmem simulate --observe [PORT]`` and ``--live`` start around a run, and what
every run publishes for ``otpmem observe --attach``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..agents import Callbacks
from ._meter import TurnMeter
from ._publish import Publisher
from ._server import serve
from ._source import Observer


@contextmanager
def observing(
    port: int | None,
    live: bool,
    say: Callable[[str], None],
    publish_to: Path | None = None,
    ready: Callable[[], bool] | None = None,
) -> Iterator[Callbacks | None]:
    """Serve the page on ``port`` (0: a free one), draw the terminal view, and publish the
    node's status into ``publish_to`` (once ``ready`` says so) while the block runs; yield
    the agent callbacks that feed their turn figures (None: none of them)."""
    if port is None and not live and publish_to is None:
        yield None
        return
    meter = TurnMeter()
    page = None
    drawer = None
    publisher = None
    stop = threading.Event()
    try:
        if publish_to is not None:
            publisher = Publisher(publish_to, observer=Observer(meter=meter), ready=ready)
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
        if publisher is not None:
            publisher.stop()
            publisher.observer.close()
