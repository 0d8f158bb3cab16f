"""The observer: a live view of a running node, as Erlang's ``observer`` gives one.

::

    from otpmem import observe

    page = observe.serve(port=0)          # http://127.0.0.1:PORT/ (loopback, read-only)
    print(page.url); ...; page.stop()

One data source (``Observer``: the supervision tree with strategies, intensities and
restart counts, every process's state and mailbox, the stores, the agents' turn rates and
latencies, recent supervisor events), three faces: the web page (``serve``), a terminal
view (``otpmem.observe.terminal``, Rich) and Prometheus metrics
(``otpmem.observe.prometheus``, the ``prometheus`` extra). Agents report their turns to a
``TurnMeter`` through their callbacks: ``start_agent(..., callbacks=meter.callbacks())``.

From another process: a node ``publish``-es its snapshot every second (into its data
directory, or a row in PostgreSQL) and ``attach(DIR or DSN)`` reads it, read-only, for
``serve(observer=...)``: what ``otpmem observe --attach`` does.
"""

from ._attach import Attached, AttachError, attach
from ._cli import observing
from ._meter import TurnMeter
from ._publish import STATUS_FILE, Publisher, publish
from ._server import ObserverServer, serve
from ._source import Observer

__all__ = [
    "STATUS_FILE",
    "AttachError",
    "Attached",
    "Observer",
    "ObserverServer",
    "Publisher",
    "TurnMeter",
    "attach",
    "observing",
    "publish",
    "serve",
]
