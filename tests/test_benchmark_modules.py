"""Every module ``make bench`` runs imports: a name moved between benchmark modules must be
imported from its new place (a full run is 11 minutes; this catches it in a second)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench_path() -> object:
    """The benchmarks directory on sys.path, as when run.py runs them."""
    sys.path.insert(0, str(BENCHMARKS))
    yield
    sys.path.remove(str(BENCHMARKS))


def test_every_benchmark_module_imports_and_has_a_main(bench_path: object) -> None:
    run = importlib.import_module("run")
    for name in run.MODULES:
        module = importlib.import_module(f"bench_{name}")
        assert callable(module.main), name
