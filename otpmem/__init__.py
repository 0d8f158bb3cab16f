"""otpmem: supervised conversation memory for LLM agents, on an OTP-style actor runtime.

::

    import otpmem
    with otpmem.running(data_dir="data"):
        store = otpmem.default_store()
"""

import logging

from .app import (
    AppError,
    define_agent,
    forget_agent,
    known_agents,
    running,
    running_agents,
    start,
    start_agent,
    stop,
)
from .stores import default_store

logging.getLogger("otpmem").addHandler(logging.NullHandler())

version = "0.1.0"
__version__ = version

__all__ = [
    "AppError",
    "default_store",
    "define_agent",
    "forget_agent",
    "known_agents",
    "running",
    "running_agents",
    "start",
    "start_agent",
    "stop",
    "version",
]
