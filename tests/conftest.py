"""Every test must stop what it starts: the leak check runs after each one."""

from otpmem.actors.testing import no_leaks  # noqa: F401 - autouse fixture
