"""The package imports and a server answers: the floor every other test stands on."""

import otpmem
from tests.support import Worker


def test_version_is_exposed() -> None:
    assert otpmem.version == otpmem.__version__


def test_worker_answers_and_stops() -> None:
    worker = Worker.start_link("w")
    assert worker.call("ping") == "pong"
    worker.stop()
    assert not worker.alive
