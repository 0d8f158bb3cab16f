"""``--model openai``: a first check that the server is there at all, so a run against no
server stops at once, storing nothing, and says which URL failed and how. The client
itself, whose retries are seen as they happen, is the simulation's
(``otpmem.simulate.openai_model``)."""

from __future__ import annotations

import time
from collections.abc import Callable

import httpx

from ..simulate import describe
from .errors import CommandError

PROBE_ATTEMPTS = 3
PROBE_TIMEOUT = 5.0
PROBE_BACKOFF = 0.5


def probe(base_url: str, say: Callable[[str], None]) -> None:
    """Check that something answers HTTP at ``base_url`` (any status will do), trying a
    few times; a CommandError naming the URL and the last error otherwise."""
    url = base_url.rstrip("/") + "/models"
    error = ""
    for attempt in range(1, PROBE_ATTEMPTS + 1):
        try:
            httpx.get(url, timeout=PROBE_TIMEOUT)
            return
        except httpx.TransportError as exc:
            error = describe(exc)
        except httpx.InvalidURL as exc:
            raise CommandError(f"--base-url {base_url!r} is not a URL: {exc}") from None
        if attempt < PROBE_ATTEMPTS:
            delay = PROBE_BACKOFF * 2 ** (attempt - 1)
            say(
                f"model: {base_url}: {error}; trying again in {delay:.1f} s "
                f"(attempt {attempt} of {PROBE_ATTEMPTS})"
            )
            time.sleep(delay)  # a server still starting may be there in a moment
    raise CommandError(
        f"cannot reach the model server at {base_url} (--base-url): {error}. "
        "Start it, or point --base-url at one; nothing was run or stored."
    )


__all__ = ["probe"]
