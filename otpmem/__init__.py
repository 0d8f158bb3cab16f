"""otpmem: supervised conversation memory for LLM agents, on an OTP-style actor runtime."""

import logging

logging.getLogger("otpmem").addHandler(logging.NullHandler())

version = "0.1.0"
__version__ = version

__all__ = ["version"]
