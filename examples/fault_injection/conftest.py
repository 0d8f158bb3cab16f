"""Fixtures for the example suite: the leak check otpmem ships, autouse once imported."""

from otpmem.actors.testing import no_leaks  # noqa: F401 - autouse: every test stops what it starts
